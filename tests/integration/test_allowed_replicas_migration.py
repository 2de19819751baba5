"""Migration ``0005_allowed_replicas`` on both backends: jobs written before it read back with no allowed
sizes (any count in min..max, as before), and it downgrades cleanly."""

from __future__ import annotations

import json

from sqlalchemy import inspect, text

from scheduler.store.db import Database
from scheduler.store.migrate import head_revision, migrate_to, upgrade

JOB = (
    "INSERT INTO jobs (project_id, name, status, workers, min_replicas, max_replicas, gpus_per_replica, "
    "command, env, interactive, priority, created_at, submitted_at, restarts, generation) VALUES "
    "(1, 'old', 'pending', 1, 1, 2, 1, :command, '{}', false, 0, 0, 0, 0, 0)"
)


def test_jobs_from_before_allowed_sizes_keep_every_count(db_url: str) -> None:
    db = Database(db_url)
    try:
        migrate_to(db, "0004_job_checkpoints")
        with db.write() as session:
            session.execute(
                text(
                    "INSERT INTO projects (id, name, deserved_gpus, over_quota_weight, allow_over_quota, "
                    "fair_share_gpus, created_at) VALUES (1, 'team-a', 1, 1, true, 0, 0)"
                )
            )
            session.execute(text(JOB), {"command": json.dumps(["python", "train.py"])})
        assert upgrade(db) == head_revision()
        with db.read() as session:
            assert session.execute(text("SELECT name, allowed_replicas FROM jobs")).all() == [("old", None)]
        migrate_to(db, "0004_job_checkpoints", down=True)
        with db.write_engine.connect() as conn:
            assert "allowed_replicas" not in {c["name"] for c in inspect(conn).get_columns("jobs")}
        assert upgrade(db) == head_revision()
    finally:
        db.dispose()
