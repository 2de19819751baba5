"""Migration ``0007_project_usage`` on both backends: projects keep their rows and start with no usage, it
downgrades cleanly, and the schema is exactly what the ORM rows describe."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from scheduler.store.db import Database
from scheduler.store.migrate import migrate_to, upgrade
from scheduler.store.models import Base

BEFORE = "0006_job_eta"


def test_usage_migration_up_down_up(db_url: str) -> None:
    db = Database(db_url)
    try:
        migrate_to(db, BEFORE)
        with db.write() as session:
            session.execute(text(
                "INSERT INTO projects (id, name, deserved_gpus, over_quota_weight, allow_over_quota, "
                "fair_share_gpus, created_at) VALUES (1, 'a', 4, 2.0, true, 3, 0)"
            ))  # fmt: skip
        upgrade(db)
        with db.read() as session:
            rows = session.execute(
                text("SELECT name, fair_share_gpus, usage_gpu_seconds, usage_at, usage_weight FROM projects")
            ).all()
            assert rows == [("a", 3, 0.0, None, None)]
        with db.write_engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        migrate_to(db, BEFORE, down=True)
        with db.write_engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("projects")}
            assert (
                not columns & {"usage_gpu_seconds", "usage_at", "usage_weight"}
                and "fair_share_gpus" in columns
            )
        upgrade(db)
    finally:
        db.dispose()
