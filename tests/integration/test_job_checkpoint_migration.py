"""Migration ``0004_job_checkpoints`` on both backends: it upgrades a database written by ``0003`` keeping
its jobs (no checkpoint known yet), downgrades cleanly, and the head schema is exactly what the ORM rows
describe."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from scheduler.store.db import Database
from scheduler.store.migrate import current_revision, head_revision, migrate_to, upgrade
from scheduler.store.models import Base


def _job_columns(db: Database) -> set[str]:
    with db.write_engine.connect() as conn:
        return {c["name"] for c in inspect(conn).get_columns("jobs")}


def test_job_checkpoint_migration_up_down_up(db_url: str) -> None:
    db = Database(db_url)
    try:
        migrate_to(db, "0003_inplace_launches")
        with db.write() as session:
            session.execute(
                text(
                    "INSERT INTO projects (id, name, deserved_gpus, over_quota_weight, allow_over_quota, "
                    "fair_share_gpus, created_at) VALUES (1, 'vision', 4, 1.0, true, 0, 0.0)"
                )
            )
            session.execute(
                text(
                    "INSERT INTO jobs (id, project_id, name, status, workers, min_replicas, max_replicas, "
                    "gpus_per_replica, command, env, interactive, priority, created_at, submitted_at, "
                    "restarts, generation) VALUES (1, 1, 'resnet', 'running', 1, 1, 2, 1, '[]', '{}', "
                    "false, 0, 0.0, 0.0, 0, 0)"
                )
            )
        migrate_to(db, "0004_job_checkpoints")
        with db.read() as session:
            assert session.execute(text("SELECT name, checkpointed_at FROM jobs")).all() == [("resnet", None)]
        assert upgrade(db) == head_revision() == current_revision(db)
        with db.write_engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        migrate_to(db, "0003_inplace_launches", down=True)
        assert "checkpointed_at" not in _job_columns(db)
        migrate_to(db, "0004_job_checkpoints")
        assert "checkpointed_at" in _job_columns(db)
    finally:
        db.dispose()
