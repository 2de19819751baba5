"""GPU fractions in the store (R20): migration ``0015_gpu_fractions`` goes up, down and up again, the schema
matches the models, and a fractional job and its replicas' shares round-trip exactly into the core's snapshot."""

from __future__ import annotations

from fractions import Fraction

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from scheduler.core.plan import Cause, Placement
from scheduler.statuses import JobStatus
from scheduler.store import lifecycle
from scheduler.store.db import Database
from scheduler.store.mapper import load_state
from scheduler.store.migrate import current_revision, head_revision, migrate_to, upgrade
from scheduler.store.models import Base, JobRow, ProjectRow
from scheduler.store.queries import job_by_name


def test_gpu_fractions_migration_up_down_up(db_url: str) -> None:
    db = Database(db_url)
    try:
        migrate_to(db, "0014_schema_compat")
        assert upgrade(db) == head_revision() == current_revision(db)
        with db.write_engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        migrate_to(db, "0014_schema_compat", down=True)
        with db.write_engine.connect() as conn:
            assert "gpu_fraction" not in {c["name"] for c in inspect(conn).get_columns("jobs")}
            assert "share" not in {c["name"] for c in inspect(conn).get_columns("replicas")}
        assert upgrade(db) == head_revision()
    finally:
        db.dispose()


def test_a_fractional_job_round_trips_exactly_into_the_snapshot(db_url: str) -> None:
    db = Database(db_url)
    try:
        upgrade(db)
        with db.write() as session:
            project = ProjectRow(name="a", deserved_gpus=1, created_at=1.0)
            session.add(
                JobRow(
                    project=project, name="nb", status=JobStatus.PENDING, workers=0, min_replicas=1,
                    max_replicas=1, gpus_per_replica=1, command=["sleep", "1"], env={}, created_at=2.0,
                    submitted_at=2.0, gpu_fraction="1/3",
                )
            )  # fmt: skip
        with db.write() as session:
            job = job_by_name(session, "a", "nb", lock=True)
            assert job is not None
            placement = Placement(0, "node-0", 0, share=Fraction(1, 3), gpu=2)
            lifecycle.start(session, job, [placement], grow=False, now=3.0, cause=Cause.FAIR_SHARE, reason="")
        with db.read() as session:
            state = load_state(session)
        (nb,) = state.jobs
        assert nb.gpu_fraction == Fraction(1, 3)
        (replica,) = nb.replicas
        assert (replica.gpus, replica.share, replica.gpu) == (0, Fraction(1, 3), 2)
    finally:
        db.dispose()
