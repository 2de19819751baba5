"""Bring a database to the newest schema, programmatically, from the installed ``migrations`` package.

Contract: ``upgrade(db)`` runs every pending Alembic migration in one transaction and returns the revision;
a database stamped with a revision this code does not know (written by a newer Tide) raises
``SchemaTooNewError`` before anything is touched. ``migrate_to(db, revision, down=...)`` moves it to one
revision, up or down (a rollback; each migration's tests). ``current_revision(db)`` reads the stamp.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

import migrations
from scheduler.store.db import Database


class SchemaTooNewError(RuntimeError):
    """The database was migrated by a newer Tide; refusing to run an older one against it."""


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None, "the migrations package has no revision"
    return head


def current_revision(db: Database) -> str | None:
    with db.write_engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def check_not_newer(db: Database) -> None:
    """Raise ``SchemaTooNewError`` when the database carries a revision unknown to this code."""
    revision = current_revision(db)
    if revision is None:
        return
    known = {script.revision for script in ScriptDirectory.from_config(_config()).walk_revisions()}
    if revision not in known:
        raise SchemaTooNewError(
            f"the database at {db.url.render_as_string(hide_password=True)} is at schema revision "
            f"{revision!r}, written by a newer version of Tide (this one knows up to {head_revision()!r}); "
            "upgrade Tide or point it at another database"
        )


def migrate_to(db: Database, revision: str, *, down: bool = False) -> None:
    """Upgrade ``db`` to ``revision`` (or downgrade it, ``down=True``), in one transaction."""
    config = _config()
    with db.write_engine.begin() as conn:
        config.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(config, revision)


def upgrade(db: Database) -> str:
    """Migrate ``db`` to the head revision and return it."""
    check_not_newer(db)
    migrate_to(db, "head")
    return head_revision()
