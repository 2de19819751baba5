"""Migration ``0010_preemption_notice`` on both backends: projects, departments and replicas keep their rows
and start with no notice (null), it downgrades cleanly, and the schema is exactly what the ORM rows say."""

from __future__ import annotations

from migrationkit import null_in_projects_and_departments, up_down_up

BEFORE = "0009_topology"
ADDED = {
    "projects": {"preemption_notice_seconds"},
    "departments": {"preemption_notice_seconds"},
    "replicas": {"notice_seconds", "noticed_at"},
}


def test_preemption_notice_migration_up_down_up(db_url: str) -> None:
    up_down_up(
        db_url, BEFORE, ADDED, after_upgrade=null_in_projects_and_departments("preemption_notice_seconds")
    )
