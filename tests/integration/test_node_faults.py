"""A node lost or taken away: cordon, drain with a grace period, fail at once; real processes.

Each replica holds a whole 2-GPU node, so which node a job loses is known. Drained: an elastic job that keeps
``min_replicas`` goes on (its master is the same process) and grows back elsewhere; a rigid job restarts on
another node. Lost: the node's processes die at once, whatever their grace period, and the job restarts on
the nodes left. The replicas' commands ignore SIGTERM, so how fast they die shows which grace was applied.
Changing a node needs the admin token; the state survives in the database.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from servicekit import RunningService, alive, wait_for
from typer.testing import CliRunner

from api.client.cli.main import app
from api.client.rest import TideAPIError, TideClient
from api.server.schemas import JobPublic

# ignores SIGTERM: only a SIGKILL (grace over, or a lost node) ends it. Once SIGTERM is ignored it creates
# READY/<pid of its parent, the replica's shim: the pid Tide reports>; a SIGTERM before that (python still
# starting, under load) would end it at once.
READY = Path(tempfile.mkdtemp(prefix="tide-stubborn-"))
STUBBORN = [
    sys.executable,
    "-c",
    "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    f"open(os.path.join({str(READY)!r}, str(os.getppid())), 'w').close(); time.sleep(600)",
]
LOCAL = {
    "executor": "local",
    "nodes": 4,
    "gpus_per_node": 2,
    "cycle_period": 0.1,
    "grace_period": 60.0,
    "check_invariants": True,
}


def _running(client: TideClient, job: str, count: int) -> JobPublic | None:
    found = client.job("a", job)
    live = [r for r in found.replicas if r.status == "running" and r.pid]
    return found if found.status == "running" and len(live) == count == len(found.replicas) else None


def _where(job: JobPublic) -> dict[int, tuple[str, int]]:
    """Where each replica runs and its pid, once its process ignores SIGTERM."""
    where = {r.index: (r.node, r.pid or 0) for r in job.replicas}
    for _, pid in where.values():
        wait_for(lambda pid=pid: (READY / str(pid)).exists(), timeout=30, what=f"process {pid} to be ready")
    return where


def _submit(client: TideClient, name: str, **body: object) -> None:
    client.submit("a", {"name": name, "gpus_per_replica": 2, "command": STUBBORN, **body})


@pytest.mark.slow
def test_drain_shrinks_an_elastic_job_and_restarts_a_rigid_one(
    make_service: Callable[..., RunningService],
) -> None:
    service = make_service(None, **LOCAL)
    admin = service.client()
    admin.create_project({"name": "a", "deserved_gpus": 8})
    _submit(admin, "rigid", priority=10)
    _submit(admin, "elastic", workers=1, min_replicas=1, max_replicas=2, grace_period=2)
    rigid = _where(wait_for(lambda: _running(admin, "rigid", 1), timeout=30, what="rigid to run"))  # type: ignore[arg-type]
    elastic = _where(wait_for(lambda: _running(admin, "elastic", 2), timeout=30, what="elastic to run"))  # type: ignore[arg-type]

    worker_node, worker_pid = elastic[1]
    assert admin.set_node(worker_node, "drain", grace=1).state in ("draining", "drained")
    wait_for(
        lambda: not alive(worker_pid), timeout=20, what="the drained worker to be killed after its grace"
    )
    assert alive(elastic[0][1]), "the elastic job's master must go on"
    grown = wait_for(lambda: _running(admin, "elastic", 2), timeout=30, what="elastic to grow back elsewhere")
    after = _where(grown)  # type: ignore[arg-type]
    assert after[0] == elastic[0] and after[1][0] not in (worker_node,) and after[1][1] != worker_pid
    assert admin.node(worker_node).state == "drained"

    rigid_node, rigid_pid = rigid[0]
    began = time.monotonic()
    admin.set_node(rigid_node, "drain", grace=1)
    wait_for(lambda: not alive(rigid_pid), timeout=20, what="the rigid job's process to stop")
    assert time.monotonic() - began < 20  # the drain's 1 s, not the job's 60 s
    moved = wait_for(
        lambda: _running(admin, "rigid", 1),
        timeout=30,
        what="rigid to restart on another node",
    )
    node, pid = _where(moved)[0]  # type: ignore[arg-type]
    assert node not in (rigid_node, worker_node) and pid != rigid_pid
    assert admin.job("a", "rigid").restarts == 1
    assert admin.job("a", "elastic").status == "running" and alive(elastic[0][1])
    kinds = [(e.kind, e.job, e.cause) for e in admin.events(project="a") if e.cause == "node"]
    assert ("shrink", "elastic", "node") in kinds and ("evict", "rigid", "node") in kinds
    assert all(j.status in ("running", "pending") for j in admin.jobs(project="a"))

    admin.set_node(worker_node, "uncordon")
    admin.set_node(rigid_node, "uncordon")
    wait_for(lambda: _running(admin, "elastic", 2), timeout=30, what="elastic to grow back after uncordon")
    assert service.services.engine.violations == []


@pytest.mark.slow
def test_a_lost_node_kills_at_once_and_the_job_restarts_on_the_nodes_left(
    make_service: Callable[..., RunningService],
) -> None:
    service = make_service(None, **(LOCAL | {"nodes": 3}))
    admin = service.client()
    admin.create_project({"name": "a", "deserved_gpus": 6})
    _submit(admin, "train", workers=1, min_replicas=2, max_replicas=2, grace_period=8)
    before = _where(wait_for(lambda: _running(admin, "train", 2), timeout=30, what="the job to run"))  # type: ignore[arg-type]
    (master_node, master_pid), (_, worker_pid) = before[0], before[1]
    assert admin.set_node(master_node, "fail").state == "lost"
    wait_for(lambda: not alive(master_pid), timeout=15, what="the lost node's replica to die")
    # killed without grace: the worker elsewhere, signalled at the same time, still has its 8 s
    assert alive(worker_pid)
    wait_for(lambda: not alive(worker_pid), timeout=30, what="the worker to stop after its grace")
    again = wait_for(
        lambda: _running(admin, "train", 2), timeout=30, what="the job to restart on the nodes left"
    )
    after = _where(again)  # type: ignore[arg-type]
    assert master_node not in {node for node, _ in after.values()}
    assert not {pid for _, pid in after.values()} & {pid for _, pid in before.values()}
    job = admin.job("a", "train")
    assert job.restarts == 1 and job.status == "running"
    evictions = [e for e in admin.events(project="a") if e.kind == "evict"]
    assert len(evictions) == 1 and f"node {master_node} was lost" in evictions[0].reason
    lost = admin.node(master_node)
    assert lost.state == "lost" and not lost.schedulable and lost.slots == []
    assert service.services.engine.violations == []


def test_only_an_admin_changes_nodes_and_cordon_keeps_what_runs(
    db_url: str, make_service: Callable[..., RunningService]
) -> None:
    service = make_service(db_url, nodes=2, gpus_per_node=2, check_invariants=True)
    admin = service.client()
    admin.create_project({"name": "a", "deserved_gpus": 4})
    secret = admin.create_token("a").token
    member = service.client(secret)
    admin.submit("a", {"name": "one", "gpus_per_replica": 2, "command": ["sleep", "60"]})
    first = wait_for(lambda: _running(admin, "one", 1), what="the first job")
    node = first.replicas[0].node  # type: ignore[union-attr]
    for action in ("cordon", "uncordon", "drain", "fail"):
        with pytest.raises(TideAPIError) as refused:
            member.set_node(node, action)
        assert refused.value.status_code == 403
    assert [n.state for n in member.nodes()] == ["ready", "ready"]
    with pytest.raises(TideAPIError) as unknown:
        admin.set_node("node-9", "cordon")
    assert unknown.value.status_code == 404 and "node-0, node-1" in unknown.value.detail
    bad = admin.request  # a negative grace is refused with what to fix
    with pytest.raises(TideAPIError) as negative:
        bad("POST", f"/nodes/{node}/drain", json={"grace_seconds": -1})
    assert negative.value.status_code == 422 and "grace_seconds" in negative.value.detail

    assert admin.set_node(node, "cordon").state == "cordoned"
    admin.submit("a", {"name": "two", "gpus_per_replica": 2, "command": ["sleep", "60"]})
    second = wait_for(lambda: _running(admin, "two", 1), what="the second job")
    assert second.replicas[0].node != node  # type: ignore[union-attr]
    assert _running(admin, "one", 1) is not None  # cordon leaves running replicas alone
    admin.delete_job("a", "one")
    wait_for(lambda: admin.node(node).allocated_gpus == 0, what="the cordoned node to be idle")
    admin.submit("a", {"name": "three", "gpus_per_replica": 2, "command": ["sleep", "60"]})
    cycles = service.services.engine.cycles
    wait_for(lambda: service.services.engine.cycles > cycles + 5, what="a few cycles")
    assert admin.job("a", "three").status == "pending"  # its GPUs are free, but on a cordoned node
    assert admin.set_node(node, "uncordon").state == "ready"
    third = wait_for(lambda: _running(admin, "three", 1), what="the third job to start once uncordoned")
    assert third.replicas[0].node == node  # type: ignore[union-attr]
    assert service.services.engine.violations == []


def test_node_commands(make_service: Callable[..., RunningService]) -> None:
    service = make_service(None, nodes=2, gpus_per_node=2)
    runner = CliRunner()
    flags = ["--url", service.url, "--token", "test-admin-token"]
    listed = runner.invoke(app, ["node", "list", *flags], terminal_width=120)
    assert listed.exit_code == 0 and "node-0" in listed.output and "ready" in listed.output
    drained = runner.invoke(app, ["node", "drain", "node-1", "--grace", "5", *flags])
    assert drained.exit_code == 0 and "Node node-1 is drained." in drained.output
    as_json = runner.invoke(app, ["node", "list", "--json", *flags])
    assert '"state": "drained"' in as_json.output
    missing = runner.invoke(app, ["node", "cordon", "nope", *flags])
    assert missing.exit_code == 3 and "known nodes: node-0, node-1" in missing.output
    refused = runner.invoke(app, ["node", "fail", "node-0", "--url", service.url, "--token", "wrong"])
    assert refused.exit_code == 5
    back = runner.invoke(app, ["node", "uncordon", "node-1", *flags])
    assert back.exit_code == 0 and "Node node-1 is ready." in back.output
    helped = runner.invoke(app, ["node", "drain", "--help"], terminal_width=200)
    assert "Example: tide node drain node-1 --grace 30" in helped.output
