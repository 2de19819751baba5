"""Job pods' agents learn their launches from the service (``/agent/v1``), through real resizes.

A real service (uvicorn, SQLite and PostgreSQL) with the in-memory executor playing one whose pods run
Tide's agent (``capabilities.inplace_restarts``): the test plays the agents with plain HTTP. What a user of the
Kubernetes executor relies on: a shrink relaunches the survivors in place at once (the removed replicas
are stopped, the master is not), a grow admits the newcomers only once their launchers are warm, ranks and
the rendezvous port come from the service, a crash restarts the launch within ``max_restarts`` and a resize
never spends one, and a wrong token or an unknown replica is a clear 4xx.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from servicekit import RunningService, settings_for, wait_for
from sqlalchemy import select

from api.server import longpoll
from scheduler.core import Node
from scheduler.executors.base import Capabilities
from scheduler.executors.fake import FakeExecutor
from scheduler.store.models import JobRow, ReplicaRow


class AgentPods(FakeExecutor):
    """The in-memory executor, as one whose pods run Tide's agent: it keeps each job's agent token."""

    capabilities = Capabilities(inplace_restarts=True, preemption_notices=True)

    def __init__(self, nodes: tuple[Node, ...]) -> None:
        super().__init__(nodes)
        self.tokens: dict[tuple[str, str], str] = {}

    def put_agent_token(self, project: str, job: str, token: str) -> None:
        self.tokens[(project, job)] = token


@pytest.fixture
def service(tmp_path: Path, db_url: str) -> Iterator[RunningService]:
    executor = AgentPods((Node("node-0", 4),))
    running = RunningService(settings_for(tmp_path, db_url), executor=executor).start()
    client = running.client()
    client.create_project({"name": "a", "deserved_gpus": 0})
    client.create_project({"name": "b", "deserved_gpus": 2})
    yield running
    running.stop()


def _replicas(service: RunningService, job: str) -> dict[int, int]:
    """Replica index -> id of the job's wanted replicas whose pods were started."""
    with service.services.db.read() as session:
        rows = session.scalars(
            select(ReplicaRow)
            .join(ReplicaRow.job)
            .where(JobRow.name == job, ReplicaRow.desired == "run", ReplicaRow.pid.is_not(None))
        ).all()
        return {r.index: r.id for r in rows}


def _poll(
    service: RunningService, job: str, rid: int, token: str | None = None, **body: Any
) -> httpx.Response:
    executor: AgentPods = service.executor  # type: ignore[assignment]
    secret = token if token is not None else executor.tokens[("a", job)]
    return httpx.post(
        f"{service.url}/agent/v1/projects/a/jobs/{job}/replicas/{rid}",
        json={"wait": 0, **body},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    )


def _launch_all(
    service: RunningService, job: str, running: int | None, size: int, state: str = "running"
) -> dict[int, dict[str, Any]]:
    """Every wanted replica polls (the master offers a port); their orders by replica index, once all got one."""
    ids = wait_for(lambda: (r := _replicas(service, job)) and len(r) == size and r, what=f"{size} replicas")
    assert isinstance(ids, dict)
    with ThreadPoolExecutor(len(ids)) as pool:
        futures = {
            index: pool.submit(
                _poll, service, job, rid, generation=running, state=state, port=40000 + index, wait=20
            )
            for index, rid in ids.items()
        }
        answers = {index: f.result() for index, f in futures.items()}
    assert all(a.status_code == 200 for a in answers.values()), [a.text for a in answers.values()]
    return {index: a.json() for index, a in answers.items()}


def test_shrink_and_grow_relaunch_in_place(service: RunningService) -> None:
    client = service.client()
    command = ["torchrun", "--max-restarts=1", "train.py"]
    client.submit("a", {"name": "a", "command": command, "min_replicas": 2, "max_replicas": 4, "workers": 3})
    first = _launch_all(service, "a", None, 4, state="warming")
    assert {o["action"] for o in first.values()} == {"launch"}
    assert [first[i]["rank"] for i in range(4)] == [0, 1, 2, 3]
    assert {o["world_size"] for o in first.values()} == {4}
    assert {o["rdzv_port"] for o in first.values()} == {40000}  # the master's offer
    g1 = first[0]["generation"]
    master_id = _replicas(service, "a")[0]
    assert _poll(service, "a", master_id, generation=g1, state="running", port=41000).json() == {
        "action": "wait", "generation": None, "world_size": None, "rank": None, "rdzv_port": None,
        "run_id": None,
    }  # fmt: skip

    client.submit("b", {"name": "b", "command": ["sleep", "600"], "workers": 1})  # b's quota: a shrinks
    second = _launch_all(service, "a", g1, 2)
    assert sorted(_replicas(service, "a")) == [0, 1]
    assert _replicas(service, "a")[0] == master_id  # the master was not touched
    assert {(o["world_size"], o["generation"] > g1) for o in second.values()} == {(2, True)}
    g2 = second[0]["generation"]

    client.delete_job("b", "b")
    ids = wait_for(lambda: len(r := _replicas(service, "a")) == 4 and r, what="a grows back")
    assert isinstance(ids, dict)
    for index in (2, 3):  # the newcomers' launchers still import torch: the others keep training
        assert _poll(service, "a", ids[index], state="warming").json()["action"] == "wait"
    assert _poll(service, "a", ids[1], generation=g2, state="running").json()["action"] == "wait"
    assert _poll(service, "a", ids[2], state="warm").json()["action"] == "wait"
    third = _launch_all(service, "a", g2, 4, state="warm")
    assert {o["world_size"] for o in third.values()} == {4}
    assert [third[i]["rank"] for i in range(4)] == [0, 1, 2, 3]
    g3 = third[0]["generation"]
    assert g3 > g2
    events = client.events(project="a")
    assert not [e for e in events if e.kind == "restart"]  # resizes never spend max_restarts

    answer = _poll(service, "a", ids[3], generation=g3, state="exited", exit_code=1)
    assert answer.json()["action"] == "wait"  # its own order comes once the engine restarted the launch
    # (an agent keeps saying "exited" until then; the polls below say "running", so wait for the restart)
    wait_for(
        lambda: any(e.kind == "restart" for e in client.events(project="a")), what="the launch's restart"
    )
    fourth = _launch_all(service, "a", g3, 4)
    assert {o["world_size"] for o in fourth.values()} == {4}
    restarts = [e for e in client.events(project="a") if e.kind == "restart"]
    assert [e.cause for e in restarts] == ["failure"]
    assert "replica 3's training exited with code 1" in restarts[0].reason
    assert "failure 1 of max_restarts 1" in restarts[0].reason

    _poll(service, "a", ids[2], generation=fourth[0]["generation"], state="exited", exit_code=3)
    job = wait_for(lambda: (j := client.job("a", "a")).status == "failed" and j, what="a fails")
    assert "replica 2's training exited with code 3 after 1 restarts (max_restarts 1)" in job.message


def test_wrong_token_or_replica_is_a_clear_4xx(service: RunningService) -> None:
    client = service.client()
    client.submit("a", {"name": "a", "command": ["torchrun", "train.py"], "workers": 1})
    ids = wait_for(lambda: len(r := _replicas(service, "a")) == 2 and r, what="a starts")
    assert isinstance(ids, dict)
    wrong = _poll(service, "a", ids[0], token="not-the-token", state="warming")
    assert wrong.status_code == 401
    assert "not the agent token of job a/a" in wrong.json()["detail"]
    admin = _poll(service, "a", ids[0], token="test-admin-token", state="warming")
    assert admin.status_code == 401  # the admin's token is not an agent's
    unknown = _poll(service, "a", 999_999, state="warming")
    assert unknown.status_code == 404
    assert "has no replica 999999" in unknown.json()["detail"]
    bad = _poll(service, "a", ids[1], state="sleeping")
    assert bad.status_code == 422
    _poll(service, "a", ids[1], state="warm", checkpointed_at=1_800_000_100.5)
    _poll(service, "a", ids[0], state="warm", checkpointed_at=1_800_000_000.0)  # older: the newest is kept
    assert client.job("a", "a").checkpointed_at is not None
    assert client.job("a", "a").checkpointed_at.timestamp() == 1_800_000_100.5  # the job's progress
    # its training speed (R19): kept at the replicas it runs; a nonsense one is a 422
    no_port = _poll(service, "a", ids[0], state="warm")  # the master must offer its rendezvous port
    assert no_port.status_code == 422 and "must offer a rendezvous port" in no_port.json()["detail"]
    speed = {"samples_per_second": 640.0, "steps_per_second": 2.5, "world_size": 2}
    assert _poll(service, "a", ids[0], state="warm", port=40000, progress=speed).status_code == 200
    with service.services.db.read() as session:
        assert session.scalars(select(JobRow.progress_rates)).one() == {"2": 640.0}
    negative = _poll(service, "a", ids[0], state="warm", progress={"samples_per_second": -1})
    assert negative.status_code == 422 and "samples_per_second" in negative.text
    client.delete_job("a", "a")
    wait_for(lambda: client.job("a", "a").status != "running", what="a ends")
    over = _poll(service, "a", ids[0], state="running")
    assert over.status_code == 404
    assert "is not running" in over.json()["detail"]


def test_a_long_poll_waits_its_whole_time_while_the_service_writes_often(service: RunningService) -> None:
    """An agent with nothing new to run waits the ``wait`` it asked for, however often the engine writes
    meanwhile (a release turn writes every 0.1 s while replicas stop): each write wakes the poll to look
    again, and used to count as half a second of its wait, so a poll could end with ``wait`` well before the
    launch it waited for was ready."""
    client = service.client()
    client.submit("a", {"name": "a", "command": ["torchrun", "train.py"], "workers": 1})
    launched = _launch_all(service, "a", None, 2)
    ids = _replicas(service, "a")
    stop = threading.Event()

    def writes_often() -> None:
        while not stop.wait(0.05):
            longpoll.bump()

    writer = threading.Thread(target=writes_often)
    writer.start()
    try:
        started = time.monotonic()
        answer = _poll(service, "a", ids[1], generation=launched[1]["generation"], state="running", wait=1.5)
        waited = time.monotonic() - started
    finally:
        stop.set()
        writer.join()
    assert answer.json()["action"] == "wait"
    assert waited >= 1.4  # not three wake-ups' worth (0.15 s)
