"""Migration ``0006_job_eta`` on both backends: jobs written before it keep their rows (no declared duration,
no first start, no ETA), it downgrades cleanly, and the schema is exactly what the ORM rows describe."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from scheduler.store.db import Database
from scheduler.store.migrate import _config, head_revision, migrate_to, upgrade
from scheduler.store.models import Base

REVISION = "0006_job_eta"
BEFORE = str(ScriptDirectory.from_config(_config()).get_revision(REVISION).down_revision)
JOB = (
    "INSERT INTO jobs (project_id, name, status, workers, min_replicas, max_replicas, gpus_per_replica, "
    "command, env, interactive, priority, created_at, submitted_at, restarts, generation) VALUES "
    "(1, 'train', 'pending', 0, 1, 1, 1, '[\"true\"]', '{}', false, 0, 1.0, 1.0, 0, 0)"
)


def test_job_eta_migration_up_down_up(db_url: str) -> None:
    db = Database(db_url)
    try:
        migrate_to(db, BEFORE)
        with db.write() as session:
            session.execute(
                text(
                    "INSERT INTO projects (name, deserved_gpus, over_quota_weight, allow_over_quota, "
                    "fair_share_gpus, created_at) VALUES ('a', 1, 1.0, true, 0, 0.0)"
                )
            )
            session.execute(text(JOB))
        assert upgrade(db) == head_revision()
        with db.read() as session:
            row = session.execute(text("SELECT name, expected_duration, started_at, eta FROM jobs")).one()
        assert tuple(row) == ("train", None, None, None)
        with db.write_engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        migrate_to(db, BEFORE, down=True)
        with db.write_engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("jobs")}
            indexes = {i["name"] for i in inspect(conn).get_indexes("jobs")}
        assert (
            not {"expected_duration", "started_at", "eta"} & columns and "ix_jobs_finished_at" not in indexes
        )
        assert upgrade(db) == head_revision()
    finally:
        db.dispose()
