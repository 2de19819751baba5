"""A launch whose record is lost: the process started, then the database went away before the commit.

The same window opens when the service is killed with SIGKILL between starting a process and committing it
(the local executor's record on disk survives; the store's row still has no pid). The engine must neither
fail the job ("already started") nor keep two processes for one replica: the unrecorded process is killed,
the replica launched again once, and the job runs. Driven cycle by cycle on a real SQLite database; the
fault is injected by an executor that starts the replica and then raises the database's own error.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from scheduler.core import Config, Node
from scheduler.engine.loop import Engine, EngineSettings
from scheduler.executors.base import LaunchSpec, Observation
from scheduler.executors.fake import FakeExecutor
from scheduler.store.db import Database
from scheduler.store.migrate import upgrade
from scheduler.store.models import JobRow, ProjectRow, ReplicaRow


class LosesFirstCommit(FakeExecutor):
    """Starts every replica; the first time, the database "goes away" right after the process started."""

    def __init__(self) -> None:
        super().__init__((Node("node-0", 4),))
        self.lost = False

    def start(self, spec: LaunchSpec) -> Observation:
        observation = super().start(spec)
        if not self.lost:
            self.lost = True
            raise OperationalError("COMMIT", {}, Exception("server closed the connection unexpectedly"))
        return observation


def test_an_unrecorded_launch_is_killed_and_started_again_once(tmp_path: Path) -> None:
    db = Database(f"sqlite+pysqlite:///{tmp_path / 'tide.db'}")
    upgrade(db)
    executor = LosesFirstCommit()
    engine = Engine(db, executor, EngineSettings(core=Config(settle_seconds=0), check_invariants=True))
    with db.write() as session:
        project = ProjectRow(name="a", deserved_gpus=4, created_at=0.0, fair_share_gpus=0)
        session.add(project)
        session.add(
            JobRow(
                project=project, name="train", status="pending", workers=0, min_replicas=1, max_replicas=1,
                gpus_per_replica=2, command=["sleep", "60"], env={}, created_at=1.0, submitted_at=1.0,
            )
        )  # fmt: skip
    with pytest.raises(OperationalError):
        engine.tick()  # planned, launched, then the commit was lost
    first = executor.started[0].replica_id
    first_pid = executor.records[first].observation.pid
    with db.read() as session:
        assert session.scalars(select(ReplicaRow.pid)).all() == [None]  # the store never heard of the pid
    for _ in range(6):
        engine.tick()
    with db.read() as session:
        job = session.scalars(select(JobRow)).one()
        replicas = session.scalars(select(ReplicaRow)).all()
        assert job.status == "running", job.message
        assert len(replicas) == 1 and replicas[0].pid is not None
        assert replicas[0].id == first and replicas[0].pid != first_pid  # the first process was killed
        assert replicas[0].pid == executor.records[first].observation.pid
    assert len(executor.live()) == 1, "one process per replica, never two"
    assert len(executor.started) == 2 and engine.violations == []
