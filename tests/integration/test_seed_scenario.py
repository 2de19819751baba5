"""The seed scenario through the REST API with the local executor and real ``sleep`` processes.

One node of 4 GPUs; projects a and b deserve 2 each. a's elastic job (master + 3 workers, min 2, max 4)
borrows all 4 GPUs; b submits two 1-GPU jobs: a shrinks to master + 1 worker within grace period + 2 cycles
(the two highest-index workers go, the master's process is the same throughout) and b runs on its 2 GPUs;
b's jobs are deleted and a grows back to 4. With ``restart``, the service is stopped and started again in
the middle: nothing is lost and no process is started twice.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from servicekit import RunningService, wait_for

from api.client.rest import TideClient
from api.server.schemas import JobPublic

CYCLE, GRACE = 0.1, 2.0


def marked_sleeps(mark: str) -> set[int]:
    """Pids of ``sleep`` processes carrying this test's marker in their environment."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "comm").read_text().strip() == "sleep" and mark.encode() in (
                proc / "environ"
            ).read_bytes():
                pids.add(int(proc.name))
        except OSError:
            continue
    return pids


def running(client: TideClient, project: str, job: str, count: int) -> JobPublic | None:
    found = client.job(project, job)
    live = [r for r in found.replicas if r.status == "running" and r.pid]
    return found if len(live) == count and found.replicas_now == count else None


@pytest.mark.slow
@pytest.mark.parametrize("restart", [False, True], ids=["steady", "restart"])
def test_seed_scenario(db_url: str, make_service: Callable[..., RunningService], restart: bool) -> None:
    mark = f"SEED_TEST_MARK={uuid.uuid4().hex}"
    env = {"SEED_TEST_MARK": mark.split("=")[1]}
    settings = {"executor": "local", "cycle_period": CYCLE, "grace_period": GRACE}
    service = make_service(db_url, **settings)
    client = service.client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    client.create_project({"name": "b", "deserved_gpus": 2})
    job = {"command": ["sleep", "600"], "env": env}
    client.submit("a", {"name": "elastic", "workers": 3, "min_replicas": 2, "max_replicas": 4, **job})
    before = wait_for(lambda: running(client, "a", "elastic", 4), what="a to run 4 replicas")
    master_pid = before.replicas[0].pid  # type: ignore[union-attr]
    wait_for(lambda: len(marked_sleeps(mark)) == 4, what="4 sleep processes")  # the shims exec'd sleep

    submitted = time.monotonic()
    client.submit("b", {"name": "one", **job})
    client.submit("b", {"name": "two", **job})
    wait_for(lambda: running(client, "a", "elastic", 2), what="a to shrink to 2")
    wait_for(lambda: running(client, "b", "one", 1) and running(client, "b", "two", 1), what="b to run")
    took = time.monotonic() - submitted
    assert took <= GRACE + 2 * CYCLE + 1.0, f"shrink and start took {took:.2f} s"
    after = client.job("a", "elastic")  # b runs on the GPUs a's stopped replicas freed
    assert [(r.index, r.status) for r in after.replicas] == [(0, "running"), (1, "running")]
    assert after.replicas[0].pid == master_pid
    shrunk = [i for e in client.events(project="a", job="elastic") if e.kind == "shrink" for i in e.replicas]
    assert sorted(shrunk) == [2, 3]
    assert client.project("b").allocated_gpus == 2
    pids = wait_for(lambda: len(found := marked_sleeps(mark)) == 4 and found, what="4 sleep processes")

    if restart:
        service.stop()
        service = make_service(db_url, **settings)
        client = service.client()
        wait_for(lambda: service.services.engine.cycles >= 3, what="cycles after the restart")
        assert marked_sleeps(mark) == pids  # adopted: nothing started twice, nothing lost
        assert client.job("a", "elastic").replicas[0].pid == master_pid
        assert {j.status for j in client.jobs()} == {"running"}

    client.delete_job("b", "one")
    client.delete_job("b", "two")
    grown = wait_for(lambda: running(client, "a", "elastic", 4), what="a to grow back to 4")
    assert grown.replicas[0].pid == master_pid  # type: ignore[union-attr]
    wait_for(lambda: len(marked_sleeps(mark)) == 4, what="4 sleep processes")  # the shims exec'd sleep
    assert [e.kind for e in client.events(project="a", job="elastic")][-1] == "grow"

    client.delete_job("a", "elastic")
    wait_for(lambda: not marked_sleeps(mark), timeout=GRACE + 5, what="every process to stop")
    final = lambda: {r.status for r in client.job("a", "elastic").replicas} == {"stopped"}  # noqa: E731
    wait_for(final, what="every replica to be recorded as stopped")
