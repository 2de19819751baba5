"""Migration ``0008_min_runtime`` on both backends: projects and departments keep their rows and start with
no minimum runtime (projects: their department's; departments: 0), it downgrades cleanly, and the schema is
exactly what the ORM rows describe."""

from __future__ import annotations

from migrationkit import up_down_up
from sqlalchemy import text

from scheduler.store.db import Database

BEFORE = "0007_project_usage"


def _none_for_projects_zero_for_departments(db: Database) -> None:
    with db.read() as session:
        assert session.execute(text("SELECT name, min_runtime_seconds FROM projects")).all() == [("a", None)]
        depts = session.execute(text("SELECT name, min_runtime_seconds FROM departments")).all()
        assert depts == [("research", 0.0)]


def test_min_runtime_migration_up_down_up(db_url: str) -> None:
    added = {"projects": {"min_runtime_seconds"}, "departments": {"min_runtime_seconds"}}
    up_down_up(db_url, BEFORE, added, after_upgrade=_none_for_projects_zero_for_departments)
