"""The store on real SQLite and PostgreSQL: migrations, a newer schema refused, the snapshot mapper, WAL."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import inspect, text
from sqlalchemy.exc import OperationalError

from scheduler.core import ClusterState, Job, Node, Project, Replica
from scheduler.store import db as db_module
from scheduler.store.db import Database
from scheduler.store.mapper import load_state
from scheduler.store.migrate import SchemaTooNewError, current_revision, head_revision, upgrade
from scheduler.store.models import JobRow, NodeRow, ProjectRow, ReplicaRow


@pytest.fixture
def db(db_url: str) -> Database:
    database = Database(db_url)
    yield database  # type: ignore[misc]
    database.dispose()


def test_migrations_create_the_schema_and_are_idempotent(db: Database) -> None:
    assert current_revision(db) is None
    assert upgrade(db) == head_revision()
    assert upgrade(db) == head_revision()
    tables = set(inspect(db.engine).get_table_names())
    assert {"projects", "departments", "jobs", "replicas", "events", "tokens", "nodes"} <= tables


def test_a_database_from_a_newer_version_is_refused(db: Database) -> None:
    upgrade(db)
    with db.write() as session:
        session.execute(text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    with pytest.raises(SchemaTooNewError, match="newer version of Tide"):
        upgrade(db)


def test_sqlite_runs_in_wal_mode(tmp_path: object) -> None:
    database = Database(f"sqlite+pysqlite:///{tmp_path}/wal.db")
    with database.read() as session:
        assert session.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    database.dispose()


def _open_together(url: str, openers: int) -> tuple[list[Exception], list[object]]:
    """``openers`` threads open a new Database on ``url`` at the same moment, migrate it and read its
    journal mode."""
    gate = threading.Barrier(openers)
    failures: list[Exception] = []
    modes: list[object] = []

    def open_it() -> None:
        database = Database(url)
        try:
            gate.wait()
            upgrade(database)  # a write transaction (BEGIN IMMEDIATE) while the others connect
            with database.read() as session:
                modes.append(session.execute(text("PRAGMA journal_mode")).scalar())
        except Exception as error:  # reported by the caller
            failures.append(error)
        finally:
            database.dispose()

    threads = [threading.Thread(target=open_it) for _ in range(openers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return failures, modes


def test_services_opening_a_new_sqlite_file_together_all_start(tmp_path: Path) -> None:
    """Services (or the API's and the engine's processes) open a new file at the same moment while one of
    them migrates it: switching a connection to WAL then answers "database is locked" at once, without
    SQLite's busy wait, so it is retried (without that, about one round in five failed with three)."""
    for round_ in range(15):
        failures, modes = _open_together(f"sqlite+pysqlite:///{tmp_path}/new-{round_}.db", 3)
        assert failures == [] and modes == ["wal"] * 3, (round_, failures)


def _seed(db: Database) -> None:
    with db.write() as session:
        session.add(NodeRow(name="node-0", gpus=4, schedulable=True))
        project = ProjectRow(name="a", deserved_gpus=2, created_at=1.0, fair_share_gpus=0)
        job = JobRow(
            project=project,
            name="train",
            status="running",
            workers=2,
            min_replicas=1,
            max_replicas=3,
            gpus_per_replica=1,
            command=["sleep", "1"],
            env={},
            created_at=2.0,
            submitted_at=2.0,
            last_resized_at=3.0,
            checkpointed_at=4.5,
            restarts=0,
            generation=1,
        )
        job.replicas = [
            ReplicaRow(
                index=0, node="node-0", gpus=1, desired="run", status="running", pid=10, created_at=2.0
            ),
            ReplicaRow(index=1, node="node-0", gpus=1, desired="run", status="starting", created_at=2.0),
            ReplicaRow(
                index=2, node="node-0", gpus=1, desired="stop", status="terminating", pid=12, created_at=2.0
            ),
            ReplicaRow(
                index=3,
                node="node-0",
                gpus=1,
                desired="done",
                status="succeeded",
                pid=13,
                exit_code=0,
                created_at=2.0,
            ),
        ]
        done = JobRow(
            project=project,
            name="old",
            status="succeeded",
            workers=0,
            min_replicas=1,
            max_replicas=1,
            gpus_per_replica=1,
            command=["true"],
            env={},
            created_at=1.0,
            submitted_at=1.0,
            restarts=0,
            generation=1,
        )
        session.add_all([project, job, done])


def test_the_mapper_builds_the_snapshot_the_core_reads(db: Database) -> None:
    upgrade(db)
    _seed(db)
    with db.read() as session:
        state = load_state(session)
    assert state == ClusterState(
        nodes=(Node("node-0", 4),),
        projects=(Project("a", 2, created_at=1.0),),
        jobs=(
            Job(
                project="a",
                name="train",
                min_replicas=2,  # replica 3 finished its work: the job is ending, kept at the 2 it runs
                max_replicas=2,
                submitted_at=2.0,
                last_resized_at=3.0,
                checkpointed_at=4.5,  # R5's least-work-lost tie-break weighs it
                replicas=(
                    Replica(0, "node-0", 1),
                    Replica(1, "node-0", 1),
                    Replica(2, "node-0", 1, releasing=True),
                ),
            ),
        ),
    )


@pytest.mark.postgres
def test_a_pooled_connection_broken_while_idle_is_replaced_and_one_just_used_is_not_checked(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pooled PostgreSQL connection idle for a while is checked before use, so one a database restart broke
    (here: its backend terminated) is replaced and the request succeeds. One used less than
    ``PING_AFTER_IDLE_S`` ago is not checked (under load every request would pay a round trip): a use that
    finds it broken fails once, as a write during an outage does (503), and the pool is renewed."""
    db = Database(pg_url, pool=1)
    backend = "SELECT pg_backend_pid()"

    def terminate(pid: int) -> None:
        with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as c:
            c.execute("SELECT pg_terminate_backend(%s)", (pid,))

    try:
        with db.read() as session:
            first = session.scalar(text(backend))
        terminate(first)
        monkeypatch.setattr(db_module, "PING_AFTER_IDLE_S", 0.0)  # idle long enough: checked
        with db.read() as session:
            second = session.scalar(text(backend))
        assert second != first
        terminate(second)
        monkeypatch.setattr(db_module, "PING_AFTER_IDLE_S", 3600.0)  # just used: not checked
        with pytest.raises(OperationalError), db.read() as session:
            session.scalar(text(backend))
        with db.read() as session:
            assert session.scalar(text(backend)) not in (first, second)
    finally:
        db.dispose()
