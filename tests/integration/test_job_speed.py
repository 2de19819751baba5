"""Jobs report their training speed (goodput-aware growth, R19): a job run by the local executor writes
``$TIDE_CHECKPOINT_DIR/tide-progress``; the service keeps the newest samples per second at each size it ran
(``lifecycle.progressed``, migration ``0013_job_progress``) and hands the core the fitted model."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from servicekit import ADMIN, RunningService, wait_for
from sqlalchemy import inspect, select
from typer.testing import CliRunner

from api.client.cli.main import app
from scheduler.core.plan import Cause, Placement
from scheduler.elastic.agent.link import Report
from scheduler.elastic.agent.progress import Progress, parse, read_progress, write_progress
from scheduler.statuses import JobStatus
from scheduler.store import lifecycle
from scheduler.store.db import Database
from scheduler.store.mapper import load_state
from scheduler.store.migrate import current_revision, head_revision, migrate_to, upgrade
from scheduler.store.models import Base, JobRow, ProjectRow
from scheduler.store.queries import job_by_name


def test_the_mark_file_round_trips_and_anything_else_is_no_report(tmp_path: Path) -> None:
    d = tmp_path
    assert read_progress(d) is None
    write_progress(d, 812.5, 3.17, 8)
    assert read_progress(d) == Progress(812.5, 3.17, 8)
    (d / "tide-progress").write_text('{"samples_per_second": 10}')
    assert read_progress(d) == Progress(10.0)
    for bad in ("[1]", "{}", '{"samples_per_second": -1}', '{"samples_per_second": true}', "not json"):
        (d / "tide-progress").write_text(bad)
        assert read_progress(d) is None, bad
    assert parse({"samples_per_second": 5, "world_size": 0, "steps_per_second": "x"}) == Progress(5.0)


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    upgrade(database)
    with database.write() as session:
        project = ProjectRow(name="a", deserved_gpus=4, created_at=1.0)
        session.add(
            JobRow(
                project=project, name="train", status=JobStatus.PENDING, workers=2, min_replicas=1,
                max_replicas=4, gpus_per_replica=2, command=["sleep", "1"], env={}, created_at=2.0,
                submitted_at=2.0,
            )
        )  # fmt: skip
    with database.write() as session:
        job = job_by_name(session, "a", "train", lock=True)
        assert job is not None
        placements = [Placement(i, "node-0", 2) for i in range(2)]
        lifecycle.start(session, job, placements, grow=False, now=10.0, cause=Cause.FAIR_SHARE, reason="go")
    yield database
    database.dispose()


def test_speeds_are_kept_per_size_and_the_core_gets_the_fitted_model(db: Database) -> None:
    with db.write() as session:
        job = job_by_name(session, "a", "train", lock=True)
        assert job is not None
        assert lifecycle.progressed(job, 400.0, world_size=4)  # 2 replicas x 2 GPUs
        assert not lifecycle.progressed(job, 999.0, world_size=8)  # measured before a resize: not booked
        assert lifecycle.progressed(job, 420.0)  # the newest at a size wins
        job.progress_rates = {**(job.progress_rates or {}), "1": 250.0}  # as if it ran on one replica
    with db.read() as session:
        rates = session.scalars(select(JobRow.progress_rates)).one()
        assert rates == {"2": 420.0, "1": 250.0}
        (core_job,) = load_state(session).jobs
    assert core_job.throughput is not None and core_job.throughput.sync > 0  # 2 replicas: < 2x one
    with db.write() as session:  # whatever else a hand-edited column holds is ignored, not a crash
        job = job_by_name(session, "a", "train", lock=True)
        assert job is not None
        job.progress_rates = {"x": 5.0, "3": "fast", "2": True, "1": 250.0}
    with db.read() as session:
        (core_job,) = load_state(session).jobs
    assert core_job.throughput is not None and core_job.throughput.sync == 0.0  # one size: linear


def test_progress_migration_up_down_up(db_url: str) -> None:
    db = Database(db_url)
    try:
        migrate_to(db, "0010_preemption_notice")
        migrate_to(db, "0013_job_progress")
        assert upgrade(db) == head_revision() == current_revision(db)
        with db.write_engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        migrate_to(db, "0010_preemption_notice", down=True)
        with db.write_engine.connect() as conn:
            assert "progress_rates" not in {c["name"] for c in inspect(conn).get_columns("jobs")}
        migrate_to(db, "0013_job_progress")
    finally:
        db.dispose()


REPORTS = "; ".join(
    [
        "import json, os, pathlib, time",
        "d = pathlib.Path(os.environ['TIDE_CHECKPOINT_DIR'])",
        "d.mkdir(parents=True, exist_ok=True)",
        "(d / 'tide-progress.tmp').write_text(json.dumps({'samples_per_second': 123.5, 'world_size': 1}))",
        "os.replace(d / 'tide-progress.tmp', d / 'tide-progress')",
        "time.sleep(60)",
    ]
)


def test_a_local_job_reports_its_speed_through_its_mark_file(
    make_service: Callable[..., RunningService],
) -> None:
    service = make_service(None, executor="local", cycle_period=0.1)
    client = service.client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    client.submit("a", {"name": "train", "command": [sys.executable, "-c", REPORTS]})
    db = service.services.db

    def rates() -> object:
        with db.read() as session:
            return session.scalars(select(JobRow.progress_rates)).one()

    assert wait_for(rates, timeout=30, what="a speed report") == {"1": 123.5}
    assert client.job("a", "train").speeds == {"1": 123.5}  # the API shows it, and so does the CLI:
    described = CliRunner().invoke(
        app, ["describe", "job", "train", "-p", "a", "--url", service.url, "--token", ADMIN]
    )
    assert described.exit_code == 0, described.output
    assert "Speed:      123.5 samples/s at 1 replica (as the job reported)" in described.output


def test_a_pod_agent_sends_the_speed_only_when_the_training_reported_one() -> None:
    quiet = Report(1, "running", None, 40000, 10.0)
    assert "progress" not in quiet.body()
    loud = Report(1, "running", None, 40000, 10.0, progress=Progress(640.0, None, 2))
    assert loud.body()["progress"] == {"samples_per_second": 640.0, "world_size": 2}
