"""Migration ``0002_node_state`` on both backends: it upgrades a database written by ``0001`` keeping its
nodes (``ready``), downgrades cleanly, and leaves the schema exactly as the ORM rows describe it."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from scheduler.store.db import Database
from scheduler.store.migrate import current_revision, head_revision, migrate_to, upgrade
from scheduler.store.models import Base


def test_node_state_migration_up_down_up(db_url: str) -> None:
    db = Database(db_url)
    try:
        migrate_to(db, "0001")
        with db.write() as session:
            session.execute(text("INSERT INTO nodes (name, gpus, schedulable) VALUES ('node-0', 4, true)"))
        assert upgrade(db) == head_revision() == current_revision(db)
        with db.read() as session:
            assert session.execute(text("SELECT state, drain_grace FROM nodes")).all() == [("ready", None)]
        with db.write_engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        migrate_to(db, "0001", down=True)
        with db.write_engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("nodes")}
        assert columns == {"name", "gpus", "schedulable"}
        assert upgrade(db) == head_revision()
    finally:
        db.dispose()
