"""Migration ``0012_resize_cost`` on both backends: projects, departments and jobs keep their rows and start
with no resize cost (null; jobs measured 0 times), it downgrades cleanly, and the schema is exactly what
the ORM rows say."""

from __future__ import annotations

from migrationkit import null_in_projects_and_departments, up_down_up

BEFORE = "0011_pod_templates"
ADDED = {
    "projects": {"resize_cost_seconds"},
    "departments": {"resize_cost_seconds"},
    "jobs": {"resize_cost_seconds", "resizes_measured", "resize_from"},
}


def test_resize_cost_migration_up_down_up(db_url: str) -> None:
    up_down_up(db_url, BEFORE, ADDED, after_upgrade=null_in_projects_and_departments("resize_cost_seconds"))
