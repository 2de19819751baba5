"""Bring a database to the newest schema, programmatically, from the installed ``migrations`` package.

Contract: ``upgrade(db)`` runs every pending Alembic migration in one transaction and returns the revision.
On PostgreSQL that transaction first takes a transaction-level advisory lock (``MIGRATE_LOCK_SQL``; it works
behind a transaction-pooling PgBouncer), on SQLite ``BEGIN IMMEDIATE``: pods that start together migrate
once, the others wait and find the schema at head. The same transaction records which code may still run
against the schema (``schema_compat``: the revision and ``compatible_with``, the oldest revision whose code
works with it).

The rule that makes rollbacks safe, N/N+1: from ``PREVIOUS_RELEASE`` on, every migration is expand-only
(new tables; new columns nullable or with a server default; nothing dropped, renamed or tightened), unless
listed in ``CONTRACTING``. Then ``compatible_with`` is ``PREVIOUS_RELEASE``, and the previous release,
rolled back onto a schema its code does not know, runs (with a warning) instead of refusing;
``tests/integration/test_schema_compat.py`` checks both halves. A database at a revision this code does not
know, without such a record naming a revision it knows, raises ``SchemaTooNewError`` before anything is
touched, saying what to do.

``migrate_to(db, revision, down=...)`` moves it to one revision, up or down; ``downgrade_plan(db, revision)``
says, without touching the database, which tables and columns a downgrade drops (the migrations run on a
scratch SQLite copy of the schema). ``current_revision(db)`` reads the stamp.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect, text

import migrations
from scheduler.store.db import Database

log = logging.getLogger(__name__)

# The schema of the release before this one: its code must keep working against this release's schema.
PREVIOUS_RELEASE = "0010_preemption_notice"
# Migrations since PREVIOUS_RELEASE that drop, rename or tighten something the previous release reads: each
# one moves ``compatible_with`` up to itself (a rollback past it needs ``tide db downgrade`` first).
CONTRACTING: frozenset[str] = frozenset()
COMPAT_TABLE = "schema_compat"
MIGRATE_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('tide-migrate:' || current_schema()))"


class SchemaTooNewError(RuntimeError):
    """The database was migrated by a newer Tide; refusing to run an older one against it."""


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    return config


def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(_config())


def head_revision() -> str:
    head = _scripts().get_current_head()
    assert head is not None, "the migrations package has no revision"
    return head


def known_revisions() -> list[str]:
    """Every revision this code knows, newest first."""
    return [script.revision for script in _scripts().walk_revisions()]


def compatible_with(head: str) -> str:
    """The oldest revision whose code runs against the schema at ``head``: ``PREVIOUS_RELEASE`` when every
    migration since is expand-only, else the newest contracting migration at or below ``head``."""
    for revision in _scripts().iterate_revisions(head, "base"):
        if revision.revision in CONTRACTING or revision.revision == PREVIOUS_RELEASE:
            return revision.revision
    return head  # a history that does not contain PREVIOUS_RELEASE: only its own code


def _revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


def current_revision(db: Database) -> str | None:
    with db.write_engine.connect() as conn:
        return _revision(conn)


def _recorded_compat(conn: Connection, revision: str) -> str | None:
    """``compatible_with`` as the migrating Tide recorded it for ``revision`` (None: nothing recorded)."""
    if not inspect(conn).has_table(COMPAT_TABLE):
        return None  # a schema from before the record existed
    row = conn.execute(
        text(f"SELECT compatible_with FROM {COMPAT_TABLE} WHERE revision = :r"), {"r": revision}
    ).first()
    return None if row is None else str(row[0])


def _check(conn: Connection, url: str) -> str | None:
    """None when the schema is one this code knows; the revision when it is newer but declared compatible;
    ``SchemaTooNewError`` otherwise."""
    revision = _revision(conn)
    known = known_revisions()
    if revision is None or revision in known:
        return None
    floor = _recorded_compat(conn, revision)
    if floor is not None and floor in known:
        log.warning(
            "the database is at schema revision %r, written by a newer Tide; it declares code from %r on "
            "compatible (expand-only migrations), so this Tide (up to %r) runs against it",
            revision,
            floor,
            known[0],
        )
        return revision
    readable = f"; it is readable by Tide from revision {floor!r} on" if floor is not None else ""
    raise SchemaTooNewError(
        f"the database at {url} is at schema revision {revision!r}, written by a newer version of Tide "
        f"(this one knows up to {known[0]!r}){readable}; upgrade Tide, or take a backup and move the "
        f"schema back with the newer Tide's `tide db downgrade {known[0]}` (docs/kubernetes.md, 'Upgrades, "
        "backup and rollback')"
    )


def check_not_newer(db: Database) -> None:
    """Raise ``SchemaTooNewError`` when the database carries a revision unknown to this code that does not
    declare this code compatible."""
    with db.write_engine.connect() as conn:
        _check(conn, db.url.render_as_string(hide_password=True))


def _record_compat(conn: Connection) -> None:
    revision = _revision(conn)
    if revision is None or not inspect(conn).has_table(COMPAT_TABLE):
        return
    conn.execute(text(f"DELETE FROM {COMPAT_TABLE}"))
    conn.execute(
        text(f"INSERT INTO {COMPAT_TABLE} (revision, compatible_with) VALUES (:r, :c)"),
        {"r": revision, "c": compatible_with(revision)},
    )


def _run(conn: Connection, revision: str, *, down: bool) -> None:
    config = _config()
    config.attributes["connection"] = conn
    (command.downgrade if down else command.upgrade)(config, revision)
    _record_compat(conn)


def migrate_to(db: Database, revision: str, *, down: bool = False) -> None:
    """Upgrade ``db`` to ``revision`` (or downgrade it, ``down=True``), in one transaction, under the lock."""
    with db.write_engine.begin() as conn:
        if not db.is_sqlite:
            conn.execute(text(MIGRATE_LOCK_SQL))
        _run(conn, revision, down=down)


def upgrade(db: Database) -> str:
    """Migrate ``db`` to the head revision and return the revision it is at: the head, or a newer one that
    declares this code compatible. Two callers at once: one migrates, the other waits and finds it done."""
    with db.write_engine.begin() as conn:
        if not db.is_sqlite:
            conn.execute(text(MIGRATE_LOCK_SQL))
        newer = _check(conn, db.url.render_as_string(hide_password=True))
        if newer is not None:
            return newer
        if _revision(conn) != head_revision():
            _run(conn, "head", down=False)
    return head_revision()


@dataclass(frozen=True)
class DowngradePlan:
    """What ``migrate_to(db, target, down=True)`` would do: the steps, and what they drop."""

    current: str | None
    target: str
    steps: tuple[str, ...]  # the migrations undone, newest first
    dropped_tables: tuple[str, ...]
    dropped_columns: tuple[str, ...]  # "table.column", of tables that stay


def schema_at(revision: str) -> dict[str, set[str]]:
    """The tables and their columns at ``revision`` (the migrations run on a scratch SQLite database)."""
    with tempfile.TemporaryDirectory(prefix="tide-schema-") as scratch:
        db = Database(f"sqlite+pysqlite:///{scratch}/schema.db")
        try:
            migrate_to(db, revision)
            with db.engine.connect() as conn:
                inspector = inspect(conn)
                return {
                    table: {c["name"] for c in inspector.get_columns(table)}
                    for table in inspector.get_table_names()
                    if table != "alembic_version"
                }
        finally:
            db.dispose()


def downgrade_plan(db: Database, target: str) -> DowngradePlan:
    """The migrations a downgrade to ``target`` undoes and what it drops; ``ValueError`` for a revision this
    code does not know or one above the database's."""
    known = known_revisions()
    if target not in known:
        raise ValueError(f"unknown schema revision {target!r}; known: {', '.join(reversed(known))}")
    current = current_revision(db)
    if current is not None and current not in known:
        raise ValueError(f"the database is at {current!r}, which this Tide does not know: use the newer Tide")
    if current is None or known.index(target) <= known.index(current):
        raise ValueError(f"the database is at {current!r}, not above {target!r}: nothing to downgrade")
    steps = tuple(known[known.index(current) : known.index(target)])
    now, then = schema_at(current), schema_at(target)
    tables = tuple(sorted(set(now) - set(then)))
    columns = tuple(sorted(f"{t}.{c}" for t in then if t in now for c in now[t] - then[t]))
    return DowngradePlan(current, target, steps, tables, columns)
