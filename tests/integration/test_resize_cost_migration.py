"""Migration ``0012_resize_cost`` on both backends: projects, departments and jobs keep their rows and start
with no resize cost (null; jobs measured 0 times), it downgrades cleanly, and the schema is exactly what
the ORM rows say."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from scheduler.store.db import Database
from scheduler.store.migrate import migrate_to, upgrade
from scheduler.store.models import Base

BEFORE = "0010_preemption_notice"
ADDED = {
    "projects": {"resize_cost_seconds"},
    "departments": {"resize_cost_seconds"},
    "jobs": {"resize_cost_seconds", "resizes_measured", "resize_from"},
}


def test_resize_cost_migration_up_down_up(db_url: str) -> None:
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
            for table in ("projects", "departments"):
                rows = session.execute(text(f"SELECT name, resize_cost_seconds FROM {table}")).all()
                assert [tuple(r) for r in rows] == [("a" if table == "projects" else "research", None)]
        with db.write_engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        migrate_to(db, BEFORE, down=True)
        with db.write_engine.connect() as conn:
            for table, added in ADDED.items():
                columns = {c["name"] for c in inspect(conn).get_columns(table)}
                assert not columns & added and "id" in columns
        upgrade(db)
        with db.read() as session:
            assert session.execute(text("SELECT name FROM projects")).all() == [("a",)]
    finally:
        db.dispose()
