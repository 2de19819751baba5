"""One migration's round trip on a real database: up from the revision before it, down, and up again.

``up_down_up(db_url, before, added, ...)`` migrates to ``before``, writes ``seed`` (SQL of that schema: by
default a department ``research`` and its project ``a``), upgrades to head and calls ``after_upgrade``
(what the migration must have done to the rows), checks that the schema is exactly what the ORM rows say,
migrates back down to ``before`` (the ``added`` columns, by table, are gone and the rows kept), upgrades
again and calls ``after_round_trip``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from scheduler.store.db import Database
from scheduler.store.migrate import migrate_to, upgrade
from scheduler.store.models import Base

DEPARTMENT_AND_PROJECT = (
    "INSERT INTO departments (id, name, deserved_gpus, over_quota_weight, fair_share_gpus, created_at) "
    "VALUES (1, 'research', 4, 1.0, 0, 0)",
    "INSERT INTO projects (id, name, deserved_gpus, over_quota_weight, allow_over_quota, department_id, "
    "fair_share_gpus, created_at) VALUES (1, 'a', 4, 2.0, true, 1, 3, 0)",
)


def project_a_kept(db: Database) -> None:
    with db.read() as session:
        assert session.execute(text("SELECT name FROM projects")).all() == [("a",)]


def null_in_projects_and_departments(column: str) -> Callable[[Database], None]:
    """``after_upgrade``: project a and department research keep their rows, with ``column`` null."""

    def check(db: Database) -> None:
        with db.read() as session:
            for table, name in (("projects", "a"), ("departments", "research")):
                rows = session.execute(text(f"SELECT name, {column} FROM {table}")).all()
                assert [tuple(r) for r in rows] == [(name, None)], table

    return check


def up_down_up(
    db_url: str,
    before: str,
    added: Mapping[str, set[str]],
    *,
    seed: Sequence[str] = DEPARTMENT_AND_PROJECT,
    after_upgrade: Callable[[Database], None] | None = None,
    after_round_trip: Callable[[Database], None] = project_a_kept,
) -> None:
    db = Database(db_url)
    try:
        migrate_to(db, before)
        with db.write() as session:
            for statement in seed:
                session.execute(text(statement))
        upgrade(db)
        if after_upgrade is not None:
            after_upgrade(db)
        with db.write_engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        migrate_to(db, before, down=True)
        with db.write_engine.connect() as conn:
            for table, columns in added.items():
                found = {c["name"] for c in inspect(conn).get_columns(table)}
                assert not found & columns and "id" in found, table
        upgrade(db)
        after_round_trip(db)
    finally:
        db.dispose()
