"""Migration ``0003_inplace_launches`` on both backends: a database with running jobs upgrades keeping them
(no launch generation yet, no agent token: they get one at their next launch), downgrades cleanly, and
the schema is exactly what the ORM rows describe."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from scheduler.store.db import Database
from scheduler.store.migrate import migrate_to, upgrade
from scheduler.store.models import Base

BEFORE = "0002_node_state"


def test_inplace_migration_up_down_up(db_url: str) -> None:
    db = Database(db_url)
    try:
        migrate_to(db, BEFORE)
        with db.write() as session:
            session.execute(text(
                "INSERT INTO projects (id, name, deserved_gpus, over_quota_weight, allow_over_quota, "
                "fair_share_gpus, created_at) VALUES (1, 'a', 4, 1.0, true, 0, 0)"
            ))  # fmt: skip
            session.execute(text(
                "INSERT INTO jobs (id, project_id, name, status, workers, min_replicas, max_replicas, "
                "gpus_per_replica, command, env, interactive, priority, created_at, submitted_at, restarts, "
                "generation) VALUES (1, 1, 'a', 'running', 1, 1, 2, 1, '[\"torchrun\"]', '{}', false, 0, "
                "0, 0, 0, 3)"
            ))  # fmt: skip
            session.execute(text(
                "INSERT INTO replicas (id, job_id, \"index\", node, gpus, desired, status, pid, created_at) "
                "VALUES (1, 1, 0, 'node-0', 1, 'run', 'running', 42, 0)"
            ))  # fmt: skip
        upgrade(db)
        with db.read() as session:
            rows = session.execute(text("SELECT launch_generation, launch_at, pid FROM replicas")).all()
            assert rows == [(None, None, 42)]
            assert session.execute(text("SELECT agent_token_hash FROM jobs")).all() == [(None,)]
        with db.write_engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        migrate_to(db, BEFORE, down=True)
        with db.write_engine.connect() as conn:
            assert "agent_reports" not in inspect(conn).get_table_names()
            assert "launch_generation" not in {c["name"] for c in inspect(conn).get_columns("replicas")}
            assert "agent_token_hash" not in {c["name"] for c in inspect(conn).get_columns("jobs")}
        upgrade(db)
    finally:
        db.dispose()
