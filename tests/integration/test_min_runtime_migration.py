"""Migration ``0008_min_runtime`` on both backends: projects and departments keep their rows and start with
no minimum runtime (projects: their department's; departments: 0), it downgrades cleanly, and the schema is
exactly what the ORM rows describe."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from scheduler.store.db import Database
from scheduler.store.migrate import migrate_to, upgrade
from scheduler.store.models import Base

BEFORE = "0007_project_usage"


def test_min_runtime_migration_up_down_up(db_url: str) -> None:
    db = Database(db_url)
    try:
        migrate_to(db, BEFORE)
        with db.write() as session:
            session.execute(text(
                "INSERT INTO departments (id, name, deserved_gpus, over_quota_weight, fair_share_gpus, created_at) "
                "VALUES (1, 'research', 4, 1.0, 0, 0)"
            ))  # fmt: skip
            session.execute(text(
                "INSERT INTO projects (id, name, deserved_gpus, over_quota_weight, allow_over_quota, "
                "department_id, fair_share_gpus, created_at) VALUES (1, 'a', 4, 2.0, true, 1, 3, 0)"
            ))  # fmt: skip
        upgrade(db)
        with db.read() as session:
            assert session.execute(text("SELECT name, min_runtime_seconds FROM projects")).all() == [
                ("a", None)
            ]
            depts = session.execute(text("SELECT name, min_runtime_seconds FROM departments")).all()
            assert depts == [("research", 0.0)]
        with db.write_engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        migrate_to(db, BEFORE, down=True)
        with db.write_engine.connect() as conn:
            for table in ("projects", "departments"):
                columns = {c["name"] for c in inspect(conn).get_columns(table)}
                assert "min_runtime_seconds" not in columns and "fair_share_gpus" in columns
        upgrade(db)
        with db.read() as session:
            assert session.execute(text("SELECT name FROM projects")).all() == [("a",)]
    finally:
        db.dispose()
