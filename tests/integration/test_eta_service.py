"""When will my job start, as a user of the service sees it: the ETA of a waiting job in GET .../jobs/{name},
computed by the engine's worker process from declared durations and the project's history; bad durations
are refused with a message that says what to give."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from servicekit import RunningService, wait_for
from sqlalchemy import select

from api.client.rest import TideAPIError, TideClient
from scheduler.core import ClusterState, Config, Node
from scheduler.core.forecast import Horizon
from scheduler.engine.eta import EtaTask
from scheduler.engine.eta_worker import EtaWorker
from scheduler.engine.loop import Engine, EngineSettings
from scheduler.executors.fake import FakeExecutor
from scheduler.store.db import Database
from scheduler.store.migrate import upgrade
from scheduler.store.models import JobRow, ProjectRow

JOB = {"command": ["sleep", "600"]}


@pytest.fixture
def admin(make_service: Callable[..., RunningService]) -> TideClient:
    return make_service(eta_every=0.2).client()


def test_a_waiting_job_learns_when_the_job_ahead_is_expected_to_end(admin: TideClient) -> None:
    admin.create_project({"name": "a", "deserved_gpus": 4})
    admin.submit("a", {"name": "big", "workers": 3, "expected_duration": 7200, **JOB})
    big = wait_for(lambda: (j := admin.job("a", "big")).status == "running" and j, what="big to run")
    admin.submit("a", {"name": "next", "workers": 1, **JOB})
    job = wait_for(lambda: (j := admin.job("a", "next")).eta is not None and j, timeout=60, what="an ETA")
    eta = job.eta  # type: ignore[union-attr]
    assert big.started_at is not None and big.expected_duration == 7200  # type: ignore[union-attr]
    started = big.started_at.timestamp()  # type: ignore[union-attr]
    assert eta.after == "a/big" and eta.source == "declared" and eta.size == 2
    assert eta.start_p50 is not None and abs(eta.start_p50.timestamp() - (started + 7200)) < 15
    assert eta.start_p90 is not None and abs(eta.start_p90.timestamp() - (started + 9000)) < 15
    assert job.grow_at is None and admin.job("a", "big").eta is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (0, "more than 0"),
        (-60, "more than 0"),
        (10**9, "at most 31536000"),
        ("2h", "valid number"),
    ],
)
def test_an_expected_duration_that_is_no_duration_is_refused(
    admin: TideClient, value: Any, words: str
) -> None:
    admin.create_project({"name": "a", "deserved_gpus": 1})
    with pytest.raises(TideAPIError) as info:
        admin.submit("a", {"name": "j", "expected_duration": value, **JOB})
    assert info.value.status_code == 422
    assert "expected_duration" in str(info.value) and words in str(info.value)


def _engine(tmp_path: Path) -> tuple[Database, Engine, list[float]]:
    db = Database(f"sqlite+pysqlite:///{tmp_path / 'tide.db'}")
    upgrade(db)
    clock = [100_000.0]
    settings = EngineSettings(core=Config(settle_seconds=0), eta_every=1)
    engine = Engine(db, FakeExecutor((Node("node-0", 4),)), settings, clock=lambda: clock[0])
    return db, engine, clock


def _job(project: ProjectRow, name: str, replicas: int, *, status: str = "pending", **kw: Any) -> JobRow:
    return JobRow(
        project=project, name=name, status=status, workers=replicas - 1, min_replicas=replicas,
        max_replicas=replicas, gpus_per_replica=1, command=["sleep", "1"], env={}, created_at=0.0,
        submitted_at=0.0, restarts=0, generation=0, **kw,
    )  # fmt: skip


def _eta(db: Database, name: str) -> dict[str, Any] | None:
    with db.read() as session:
        return session.scalars(select(JobRow.eta).where(JobRow.name == name)).one()


def test_without_a_declared_duration_the_projects_jobs_of_the_same_shape_answer(tmp_path: Path) -> None:
    """Three finished 4-GPU jobs of project a ran 1,000 to 3,000 s (a cancelled one does not count); one like
    them started 500 s ago: of the runs longer than that, the median leaves 1,500 s, so the 2-GPU job behind
    it should start then."""
    db, engine, clock = _engine(tmp_path)
    with db.write() as session:
        a = ProjectRow(name="a", deserved_gpus=4, created_at=0.0, fair_share_gpus=0)
        for i, seconds in enumerate((1000.0, 2000.0, 3000.0)):
            session.add(_job(a, f"old{i}", 4, status="succeeded", started_at=0.0, finished_at=seconds))
        session.add(_job(a, "cancelled", 4, status="cancelled", started_at=0.0, finished_at=5.0))
        session.add(_job(a, "big", 4))
    try:
        engine.tick()  # big starts; nobody waits, so no forecast runs
        assert engine.eta is not None and engine.eta.last_start == clock[0]
        clock[0] += 500
        with db.write() as session:
            session.add(_job(session.scalars(select(ProjectRow)).one(), "next", 2))
        eta = wait_for(lambda: engine.tick() and _eta(db, "next"), timeout=60, what="the forecast")
        assert eta == {
            "start_p50": clock[0] + 1500, "start_p90": clock[0] + 1500, "size": 2, "grows": False,
            "after": "a/big", "source": "project", "computed_at": clock[0],
        }  # fmt: skip
        assert engine.metrics.registry.get_sample_value("tide_eta_recompute_seconds_count") == 1
        assert engine.metrics.registry.get_sample_value("tide_eta_failures_total") == 0
        with db.write() as session:
            session.scalars(select(JobRow).where(JobRow.name == "next")).one().status = "cancelled"
        clock[0] += 5
        engine.tick()  # nobody waits any more: what is left of the last forecast goes
        with db.read() as session:
            assert session.scalars(select(JobRow.name).where(JobRow.eta.is_not(None))).all() == ["next"]
    finally:
        engine.close()


def test_a_slow_forecast_makes_the_next_one_wait_ten_times_as_long() -> None:
    """Forecasts come every ``every`` seconds while they are quick; one that took 10 s (tens of thousands of
    waiting jobs) is followed by the next 100 s after it began, so forecasts keep at most a tenth of a core."""
    worker = EtaWorker(every=30)
    try:
        worker.start(EtaTask(ClusterState((Node("n", 1),), ()), Config(), 0.0, {}, Horizon()))
        wait_for(worker.poll, timeout=60, what="the forecast")
        assert worker.took < 3 and not worker.due(29.0) and worker.due(30.0)
        worker.took = 10.0  # as if it had taken 10 s
        assert not worker.due(30.0) and not worker.due(99.0) and worker.due(100.0)
    finally:
        worker.close()


def test_the_worker_reports_a_failed_forecast_once_and_recovers() -> None:
    worker = EtaWorker(every=0)
    try:
        worker.start(EtaTask(None, Config(), 0.0, {}, Horizon()))  # type: ignore[arg-type]
        with pytest.raises(AttributeError):
            wait_for(worker.poll, timeout=60, what="the failed forecast")
        assert worker.poll() is None and worker.due(0.0)
        worker.start(EtaTask(ClusterState((Node("n", 1),), ()), Config(), 5.0, {}, Horizon()))
        etas, seconds = wait_for(worker.poll, timeout=60, what="the forecast")  # type: ignore[misc]
        assert etas == {} and seconds >= 0
    finally:
        worker.close()


def test_closing_the_worker_ends_a_forecast_in_flight_with_its_process() -> None:
    """Stopping the engine does not wait for a forecast in flight (at 81,920 GPUs one runs for minutes): its
    process is ended and the pool's thread joined, so nothing of it is left when the interpreter exits."""
    worker = EtaWorker(every=0)
    worker.start(EtaTask(ClusterState((Node("n", 1),), ()), Config(), 0.0, {}, Horizon()))
    pool = worker._pool
    assert pool is not None
    children = list((pool._processes or {}).values())  # started with the submit
    worker.close()
    assert children and not any(child.is_alive() for child in children)
    assert worker.poll() is None and worker.due(1.0)


ENGINE = """
import sys, time
from scheduler.core import ClusterState, Config, Node
from scheduler.core.forecast import Horizon
from scheduler.engine.eta import EtaTask
from scheduler.engine.eta_worker import EtaWorker
worker = EtaWorker(every=0)
worker.start(EtaTask(ClusterState((Node("n", 1),), ()), Config(), 5.0, {}, Horizon()))
while worker.poll() is None:
    time.sleep(0.05)
print("ready", flush=True)
time.sleep(600)
"""


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(c) for c in task.read_text().split()]
    return found


def test_the_forecast_child_dies_with_a_killed_engine() -> None:
    """An engine SIGKILLed (the service killed, an OOM) leaves no forecast process running: the kernel
    kills the child when its parent dies."""
    engine = subprocess.Popen([sys.executable, "-c", ENGINE], stdout=subprocess.PIPE, text=True)
    try:
        assert engine.stdout is not None and engine.stdout.readline().strip() == "ready"
        children = _children(engine.pid)  # the forecast's process (and multiprocessing's resource tracker)
        assert any("spawn_main" in Path(f"/proc/{c}/cmdline").read_text() for c in children), children
        engine.kill()
        engine.wait(timeout=30)

        def gone() -> bool:
            for child in children:
                try:
                    if Path(f"/proc/{child}/stat").read_text().split(")")[1].split()[0] != "Z":
                        return False
                except OSError:
                    pass
            return True

        wait_for(gone, timeout=30, what="the forecast's processes to die with their engine")
    finally:
        engine.kill()
        engine.wait(timeout=30)
        assert engine.stdout is not None
        engine.stdout.close()
