"""``GET /cluster`` in two parts (``api.server.routes.cluster``), on a real service over HTTP.

A submit is seen by the next read (its project's and department's pending figures) without the nodes being
built again, and so are the cycles that only write waiting jobs' notes; a write that changes what a node
shows (a cordon, a delete that releases a replica) is seen by the next read, which builds them again; the
answer is byte for byte what ``schemas.ClusterPublic`` writes (nodes serialised from plain values: shared
GPUs, a releasing replica, a cordoned node's time).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest
from servicekit import ADMIN, RunningService, wait_for

from api.server import schemas
from api.server.routes import cluster

HEADERS = {"Authorization": f"Bearer {ADMIN}"}
JOB = {"command": ["sleep", "60"]}


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the builds of the nodes' part."""
    counted: list[int] = []
    build = cluster.base_part

    def counting(svc: object) -> object:
        counted.append(1)
        return build(svc)  # type: ignore[arg-type]

    monkeypatch.setattr(cluster, "base_part", counting)
    return counted


@pytest.fixture
def row_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the builds of the projects' and departments' part."""
    counted: list[int] = []
    build = cluster.rows_part

    def counting(svc: object, base: object) -> object:
        counted.append(1)
        return build(svc, base)  # type: ignore[arg-type]

    monkeypatch.setattr(cluster, "rows_part", counting)
    return counted


def keep_views(svc: RunningService) -> None:
    """No rebuild for age (for another instance's changes): builds counted are those a change asked for."""
    svc.services.views.max_age = 3600.0


def quiet(svc: RunningService) -> None:
    """Stop the engine's cycles (nothing changes but what the test writes)."""
    engine = svc.services.engine
    engine.stop()  # type: ignore[attr-defined]
    last = -1
    while engine.cycles != last:  # type: ignore[attr-defined]
        last = engine.cycles  # type: ignore[attr-defined]
        time.sleep(0.3)


def read(svc: RunningService) -> tuple[bytes, schemas.ClusterPublic]:
    answer = httpx.get(f"{svc.url}/api/v1/cluster", headers=HEADERS)
    assert answer.status_code == 200
    return answer.content, schemas.ClusterPublic.model_validate_json(answer.content)


def test_a_submit_is_seen_without_building_the_nodes_again(
    db_url: str, make_service: Callable[..., RunningService], builds: list[int], row_builds: list[int]
) -> None:
    svc = make_service(db_url, nodes=2, gpus_per_node=4)
    keep_views(svc)
    client = svc.client()
    client.create_department({"name": "d", "deserved_gpus": 8})
    client.create_project({"name": "a", "deserved_gpus": 8, "department": "d"})
    client.submit("a", {"name": "held", "gpus_per_replica": 2, **JOB})
    wait_for(lambda: client.cluster().allocated_gpus == 2, what="the first job running")
    quiet(svc)
    _, before = read(svc)
    built, rows_built = len(builds), len(row_builds)
    for k in range(3):
        client.submit("a", {"name": f"wait{k}", "workers": 1, "gpus_per_replica": 4, **JOB})
        _, seen = read(svc)  # right after the submit's answer
        project = next(p for p in seen.projects if p.name == "a")
        assert (project.pending_jobs, project.pending_gpus, project.running_jobs) == (k + 1, 8 * (k + 1), 1)
        assert seen.departments[0].pending_gpus == 8 * (k + 1)
        assert seen.nodes == before.nodes
    assert len(builds) == built  # three submits, the nodes' part kept
    assert len(row_builds) == rows_built  # and the projects' rows

    node = next(n.name for n in before.nodes if not n.slots)
    assert httpx.post(f"{svc.url}/api/v1/nodes/{node}/cordon", headers=HEADERS).status_code == 200
    _, seen = read(svc)
    assert next(n for n in seen.nodes if n.name == node).state == "cordoned"
    assert len(builds) == built + 1
    assert len(row_builds) == rows_built + 1

    client.delete_job("a", "held")
    _, seen = read(svc)
    slot = next(s for n in seen.nodes for s in n.slots)
    assert (slot.job, slot.releasing, slot.job_status) == ("held", True, "cancelled")
    project = next(p for p in seen.projects if p.name == "a")
    assert (project.running_jobs, project.allocated_gpus) == (0, 0)
    assert len(builds) == built + 2


def test_the_answer_is_the_schemas_bytes(db_url: str, make_service: Callable[..., RunningService]) -> None:
    svc = make_service(db_url, nodes=2, gpus_per_node=2)
    client = svc.client()
    client.create_project({"name": "a", "deserved_gpus": 4})
    client.submit("a", {"name": "whole", "workers": 1, **JOB})
    for k in range(2):
        client.submit("a", {"name": f"half{k}", "gpu_fraction": 0.5, **JOB})
    wait_for(lambda: client.cluster().allocated_gpus == 3, what="the jobs running")
    quiet(svc)
    client.delete_job("a", "whole")  # its replicas releasing
    idle = next(n.name for n in client.cluster().nodes if n.allocated_gpus < n.gpus)
    assert httpx.post(f"{svc.url}/api/v1/nodes/{idle}/cordon", headers=HEADERS).status_code == 200
    body, seen = read(svc)
    slots = [s for n in seen.nodes for s in n.slots]
    assert {s.share for s in slots} == {None, 0.5} and any(s.releasing for s in slots)
    assert any(n.state_since is not None for n in seen.nodes)
    assert seen.model_dump_json().encode() == body


def test_the_cycles_that_place_nothing_leave_the_nodes(
    db_url: str, make_service: Callable[..., RunningService], builds: list[int]
) -> None:
    """Jobs submitted to a full cluster: the engine writes their notes (and fair shares), never who holds
    which GPU, so the nodes are not built again while their projects' figures follow every submit."""
    svc = make_service(db_url, nodes=1, gpus_per_node=4)
    keep_views(svc)
    client = svc.client()
    client.create_project({"name": "a", "deserved_gpus": 4})
    client.submit("a", {"name": "fill", "workers": 3, **JOB})
    wait_for(lambda: read(svc)[1].allocated_gpus == 4, what="the cluster full")
    time.sleep(0.5)  # settled: the replicas seen running
    read(svc)
    built, cycles = len(builds), svc.services.engine.cycles
    for k in range(3):
        client.submit("a", {"name": f"wait{k}", **JOB})
        wait_for(lambda k=k: client.job("a", f"wait{k}").pending_reason, what="a cycle's note")  # type: ignore[misc]
        project = next(p for p in read(svc)[1].projects if p.name == "a")
        assert (project.pending_jobs, project.running_jobs) == (k + 1, 1)
    assert svc.services.engine.cycles > cycles
    assert len(builds) == built
