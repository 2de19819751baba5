"""Migration ``0011_pod_templates`` on both backends: jobs, projects and departments keep their rows and start
with no template or defaults (null), it downgrades cleanly, and the schema is exactly what the ORM rows say."""

from __future__ import annotations

from migrationkit import DEPARTMENT_AND_PROJECT, null_in_projects_and_departments, up_down_up
from sqlalchemy import text

from scheduler.store.db import Database

BEFORE = "0010_preemption_notice"
ADDED = {"jobs": {"pod_template"}, "projects": {"pod_defaults"}, "departments": {"pod_defaults"}}
JOB = (
    "INSERT INTO jobs (id, project_id, name, status, workers, min_replicas, max_replicas, gpus_per_replica, "
    "command, env, interactive, priority, created_at, submitted_at, restarts, generation) "
    "VALUES (1, 1, 'train', 'pending', 0, 1, 1, 1, '[\"x\"]', '{}', false, 0, 0, 0, 0, 0)"
)


def _job_kept(db: Database) -> None:
    with db.read() as session:
        assert session.execute(text("SELECT name, pod_template FROM jobs")).all() == [("train", None)]


def _no_templates_then_one(db: Database) -> None:
    _job_kept(db)
    null_in_projects_and_departments("pod_defaults")(db)
    with db.write() as session:
        session.execute(text("""UPDATE jobs SET pod_template = '{"shm_size": "16Gi"}'"""))


def test_pod_templates_migration_up_down_up(db_url: str) -> None:
    up_down_up(
        db_url,
        BEFORE,
        ADDED,
        seed=(*DEPARTMENT_AND_PROJECT, JOB),
        after_upgrade=_no_templates_then_one,
        after_round_trip=_job_kept,
    )
