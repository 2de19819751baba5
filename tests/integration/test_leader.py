"""Leader election: one scheduler per database; a standby takes over when the leader goes.

PostgreSQL: an advisory lock on the leader's own connection (a killed connection hands over at once).
SQLite: an exclusive file lock beside the database. With two full services on one PostgreSQL database and
one data directory, the standby adopts the leader's running processes when it takes over.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from servicekit import RunningService, wait_for

from scheduler.core import Node
from scheduler.engine.leader import AdvisoryLockLeadership, FileLeadership
from scheduler.engine.loop import Engine, EngineSettings
from scheduler.executors.fake import FakeExecutor
from scheduler.store.db import Database
from scheduler.store.migrate import upgrade


def test_file_lock_elects_one_leader(tmp_path: Path) -> None:
    first, second = FileLeadership(tmp_path / "db.leader"), FileLeadership(tmp_path / "db.leader")
    assert first.holds() and not second.holds()
    first.release()
    assert second.holds() and not first.holds()
    second.release()


@pytest.mark.postgres
def test_advisory_lock_hands_over_when_the_leader_connection_dies(pg_url: str) -> None:
    db_a, db_b = Database(pg_url), Database(pg_url)
    upgrade(db_a)
    nodes = (Node("node-0", 4),)
    lock = AdvisoryLockLeadership(db_a)
    leader = Engine(db_a, FakeExecutor(nodes), EngineSettings(), leadership=lock)
    standby = Engine(db_b, FakeExecutor(nodes), EngineSettings(), leadership=AdvisoryLockLeadership(db_b))
    try:
        assert leader.tick() is not None and leader.is_leader
        assert standby.tick() is None and standby.role == "standby"
        assert lock._conn is not None
        backend = lock._conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        with db_b.engine.connect() as conn:  # the leader "dies": its session is killed server-side
            conn.exec_driver_sql(f"SELECT pg_terminate_backend({int(backend or 0)})")
            conn.commit()
            alive = f"SELECT count(*) FROM pg_stat_activity WHERE pid = {int(backend or 0)}"

            def gone() -> bool:  # pg_terminate_backend only signals: wait until that session has ended
                count = conn.exec_driver_sql(alive).scalar()
                conn.commit()
                return count == 0

            wait_for(gone, timeout=10, what="the leader's session to end")
        assert standby.tick() is not None and standby.is_leader
        assert leader.tick() is None and leader.role == "standby"
    finally:
        for engine, db in ((leader, db_a), (standby, db_b)):
            engine.close()
            db.dispose()


@pytest.mark.postgres
@pytest.mark.slow
def test_standby_service_takes_over_and_adopts(
    pg_url: str, make_service: Callable[..., RunningService]
) -> None:
    settings = {"executor": "local", "cycle_period": 0.1, "grace_period": 1.0}
    first = make_service(pg_url, **settings)
    second = make_service(pg_url, **settings)
    admin = first.client()
    assert first.services.engine.is_leader and second.services.engine.role == "standby"
    assert second.client().cluster().leader is False
    admin.create_project({"name": "a", "deserved_gpus": 2})
    admin.submit("a", {"name": "train", "workers": 1, "command": ["sleep", "600"]})

    def started() -> object:
        job = admin.job("a", "train")
        return len(job.replicas) == 2 and all(r.pid for r in job.replicas) and job

    running = wait_for(started, what="the job to run")
    pids = sorted(r.pid for r in running.replicas if r.pid)  # type: ignore[union-attr]
    assert len(pids) == 2
    first.stop()
    wait_for(lambda: second.services.engine.is_leader, timeout=10, what="the standby to take over")
    follower = second.client()
    wait_for(lambda: second.services.engine.cycles >= 3, what="cycles on the new leader")
    job = follower.job("a", "train")
    assert job.status == "running" and sorted(r.pid for r in job.replicas if r.pid) == pids
    follower.delete_job("a", "train")
    wait_for(
        lambda: {r.status for r in follower.job("a", "train").replicas} == {"stopped"},
        timeout=10,
        what="the adopted replicas to stop",
    )
