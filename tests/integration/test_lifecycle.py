"""Each transition of a job, through its one door (``scheduler.store.lifecycle``), on real SQLite and
PostgreSQL: it sets the status, resets what depends on it and writes its event; the columns hold the plain
words (what the API and the CLI read)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select, text

from scheduler.core.plan import Cause, Placement
from scheduler.statuses import JobStatus
from scheduler.store import lifecycle
from scheduler.store.db import Database
from scheduler.store.migrate import upgrade
from scheduler.store.models import EventRow, JobRow, ProjectRow
from scheduler.store.queries import job_by_name


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    upgrade(database)
    with database.write() as session:
        project = ProjectRow(name="a", deserved_gpus=4, created_at=1.0)
        session.add(
            JobRow(
                project=project, name="train", status=JobStatus.PENDING, workers=3, min_replicas=2,
                max_replicas=4, gpus_per_replica=1, command=["sleep", "1"], env={}, created_at=2.0,
                submitted_at=2.0,
            )
        )  # fmt: skip
    with database.write() as session:
        job = job_by_name(session, "a", "train", lock=True)
        assert job is not None
        placements = [Placement(i, "node-0", 1) for i in range(4)]
        lifecycle.start(session, job, placements, grow=False, now=10.0, cause=Cause.FAIR_SHARE, reason="go")
        session.flush()
        for replica in job.replicas[:3]:  # replica 3 waits for its GPUs: never launched
            lifecycle.launched(
                replica, pid=100 + replica.index, gpu_ids=[replica.index], now=11.0, running=True
            )
    yield database
    database.dispose()


def _events(db: Database) -> list[tuple[str, list[int], str, str | None, object]]:
    with db.read() as session:
        rows = session.scalars(select(EventRow).order_by(EventRow.id)).all()
        return [(e.kind, e.replicas, e.reason, e.cause, e.details) for e in rows]


def _stored(db: Database) -> tuple[object, ...]:
    """The job's and its replicas' words as the database holds them (no ORM)."""
    with db.read() as session:
        job = session.execute(text("SELECT status, generation, restarts FROM jobs")).one()
        replicas = session.execute(
            text('SELECT "index", desired, status FROM replicas ORDER BY "index"')
        ).all()
        return tuple(job), [tuple(r) for r in replicas]


def test_a_start_makes_the_job_running_with_its_replicas(db: Database) -> None:
    assert _stored(db) == (
        ("running", 1, 0),
        [(0, "run", "running"), (1, "run", "running"), (2, "run", "running"), (3, "run", "starting")],
    )
    assert _events(db) == [("start", [0, 1, 2, 3], "go", "fair-share", None)]


def test_a_shrink_stops_the_replicas_named_and_forgets_one_never_launched(db: Database) -> None:
    with db.write() as session:
        job = job_by_name(session, "a", "train", lock=True)
        assert job is not None
        marked = lifecycle.release(
            session, job, [3, 2], evict=False, now=20.0, cause=Cause.RECLAIM, reason="for b",
            details={"lost_gpu_seconds": 9.0}, notify=lambda released: ("notice: 5 s", 5.0),
        )  # fmt: skip
        assert [r.index for r in marked] == [2]
    assert _stored(db) == (
        ("running", 2, 0),
        [(0, "run", "running"), (1, "run", "running"), (2, "stop", "terminating")],
    )
    shrink = (
        "shrink",
        [3, 2],
        "for b; notice: 5 s",
        "reclaim",
        {"lost_gpu_seconds": 9.0, "notice_seconds": 5.0},
    )
    assert _events(db)[1:] == [shrink]


def test_an_eviction_stops_every_wanted_replica_and_sends_the_job_back_to_wait(db: Database) -> None:
    with db.write() as session:
        job = job_by_name(session, "a", "train", lock=True)
        assert job is not None
        lifecycle.release(
            session, job, [0, 1, 2, 3], evict=True, now=20.0, cause=Cause.NODE, reason="node lost",
            pending_reason="node lost",
        )  # fmt: skip
    assert _stored(db) == (
        ("pending", 2, 1),
        [(0, "stop", "terminating"), (1, "stop", "terminating"), (2, "stop", "terminating")],
    )
    assert _events(db)[1:] == [("evict", [0, 1, 2, 3], "node lost", "node", None)]
    with db.read() as session:
        assert session.scalar(select(JobRow.pending_reason)) == "node lost"


@pytest.mark.parametrize(
    ("status", "kind"),
    [(JobStatus.CANCELLED, "cancel"), (JobStatus.FAILED, "fail"), (JobStatus.SUCCEEDED, "finish")],
)
def test_a_finished_job_stops_its_replicas_and_says_why(db: Database, status: JobStatus, kind: str) -> None:
    with db.write() as session:
        job = job_by_name(session, "a", "train", lock=True)
        assert job is not None
        job.pending_reason, job.queue_position = "waiting", 3
        lifecycle.finish_job(session, job, status, now=30.0, reason="because")
    assert _stored(db)[0] == (status.value, 1, 0)
    assert _events(db)[1:] == [(kind, [], "because", None, None)]
    with db.read() as session:
        row = session.execute(select(JobRow.finished_at, JobRow.message, JobRow.pending_reason)).one()
        assert tuple(row) == (30.0, "because", None)


def test_an_exit_on_request_is_forgotten_and_one_on_its_own_is_kept_as_done(db: Database) -> None:
    with db.write() as session:
        job = job_by_name(session, "a", "train", lock=True)
        assert job is not None
        lifecycle.release(session, job, [2], evict=False, now=20.0, cause=Cause.RECLAIM, reason="for b")
        lifecycle.exited(session, job.replicas[2], 1)  # told to stop: torchrun exits 1 on SIGTERM
        lifecycle.exited(session, job.replicas[1], 3)
    assert _stored(db)[1] == [(0, "run", "running"), (1, "done", "failed"), (3, "run", "starting")]
