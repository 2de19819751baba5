"""Migration ``0009_topology`` on both backends: nodes keep their rows with no domain, jobs keep theirs as
``preferred``, it downgrades cleanly, and the schema is exactly what the ORM rows describe."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from scheduler.store.db import Database
from scheduler.store.migrate import migrate_to, upgrade
from scheduler.store.models import Base

BEFORE = "0008_min_runtime"


def test_topology_migration_up_down_up(db_url: str) -> None:
    db = Database(db_url)
    try:
        migrate_to(db, BEFORE)
        with db.write() as session:
            session.execute(
                text("INSERT INTO nodes (name, gpus, schedulable, state) VALUES ('n', 8, true, 'ready')")
            )
            session.execute(text(
                "INSERT INTO projects (id, name, deserved_gpus, over_quota_weight, allow_over_quota, "
                "fair_share_gpus, created_at) VALUES (1, 'a', 4, 1.0, true, 0, 0)"
            ))  # fmt: skip
            session.execute(text(
                "INSERT INTO jobs (id, project_id, name, status, workers, min_replicas, max_replicas, "
                "gpus_per_replica, command, env, interactive, priority, created_at, submitted_at, restarts, "
                "generation) VALUES (1, 1, 'j', 'pending', 0, 1, 1, 1, '[\"true\"]', '{}', false, 0, 0, 0, 0, 0)"
            ))  # fmt: skip
        upgrade(db)
        with db.read() as session:
            assert session.execute(text("SELECT name, domain FROM nodes")).all() == [("n", None)]
            assert session.execute(text("SELECT name, topology FROM jobs")).all() == [("j", "preferred")]
        with db.write_engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        migrate_to(db, BEFORE, down=True)
        with db.write_engine.connect() as conn:
            assert "domain" not in {c["name"] for c in inspect(conn).get_columns("nodes")}
            assert "topology" not in {c["name"] for c in inspect(conn).get_columns("jobs")}
        upgrade(db)
    finally:
        db.dispose()
