"""What ``tide db current|upgrade|downgrade`` do (``api.client.cli.db`` holds their options).

Contract: each resolves the database as ``tide serve`` does (the URL, else SQLite in the data directory),
prints what it did on stdout and exits 2 (``typer.Exit``) with one line on stderr when it refuses: an
unknown revision or one not below the database's, a database that does not answer, a schema written by a
newer Tide that does not declare this one compatible, and (``downgrade``) a live leader. A live leader is
one holding the election this code takes (``scheduler.engine.leader``: PostgreSQL's advisory lock, SQLite's
file lock); the downgrade holds it while it runs, so no service starts leading meanwhile. Services that
elect with a Kubernetes Lease hold neither: stop them first (``kubectl scale deploy/tide --replicas 0``).
"""

from __future__ import annotations

from pathlib import Path

import typer
from sqlalchemy.exc import OperationalError

from api.shared.paths import default_data_dir
from scheduler.engine.leader import leadership_for
from scheduler.store import migrate
from scheduler.store.db import Database, sqlite_url


def _open(database_url: str | None, data_dir: Path | None) -> Database:
    return Database(database_url or sqlite_url(data_dir or default_data_dir()))


def _refuse(message: str) -> typer.Exit:
    typer.echo(f"tide: {message}", err=True)
    return typer.Exit(2)


def current(database_url: str | None, data_dir: Path | None) -> None:
    db = _open(database_url, data_dir)
    try:
        revision = migrate.current_revision(db)
    except OperationalError as error:
        raise _refuse(f"cannot reach the database: {error.orig}") from error
    finally:
        db.dispose()
    typer.echo(f"database: {revision or '(empty)'}\nthis Tide: {migrate.head_revision()}")


def upgrade(database_url: str | None, data_dir: Path | None) -> None:
    db = _open(database_url, data_dir)
    try:
        before = migrate.current_revision(db)
        after = migrate.upgrade(db)
    except migrate.SchemaTooNewError as error:
        raise _refuse(str(error)) from error
    except OperationalError as error:
        raise _refuse(f"cannot reach the database: {error.orig}") from error
    finally:
        db.dispose()
    typer.echo(f"schema at {after}" + (" (already)" if before == after else f" (was {before or 'empty'})"))


def downgrade(
    revision: str, database_url: str | None, data_dir: Path | None, *, dry_run: bool, force: bool
) -> None:
    db = _open(database_url, data_dir)
    leadership = leadership_for(db)
    try:
        try:
            plan = migrate.downgrade_plan(db, revision)
        except ValueError as error:
            raise _refuse(str(error)) from error
        _print_plan(plan, dry_run=dry_run)
        if dry_run:
            return
        if not leadership.holds() and not force:
            raise _refuse(
                "a Tide service leads on this database: stop it first (kubectl scale deploy/tide --replicas 0), "
                "or pass --force"
            )
        migrate.migrate_to(db, revision, down=True)
        typer.echo(f"schema at {revision}")
    except OperationalError as error:
        raise _refuse(f"cannot reach the database: {error.orig}") from error
    finally:
        leadership.release()
        db.dispose()


def _print_plan(plan: migrate.DowngradePlan, *, dry_run: bool) -> None:
    verb = "would undo" if dry_run else "undoing"
    typer.echo(f"{plan.current} -> {plan.target}: {verb} {', '.join(plan.steps)}")
    for table in plan.dropped_tables:
        typer.echo(f"  drops table {table} (and its rows)")
    for column in plan.dropped_columns:
        typer.echo(f"  drops column {column} (and its values)")
    if not plan.dropped_tables and not plan.dropped_columns:
        typer.echo("  drops no table or column")
