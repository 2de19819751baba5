"""``tide db``: the schema of Tide's database, by hand: ``current``, ``upgrade``, ``downgrade REV``.

Contract: options and help only; what each command does is ``api.server.dbcommands``, imported when it runs
(SQLAlchemy, Alembic). The database is ``--database-url`` (``TIDE_DATABASE_URL``), else the SQLite file in
``--data-dir`` (``TIDE_DATA_DIR``), as ``tide serve`` resolves it. Exit 0 done, 2 refused (a bad revision, a
live leader, a schema of a newer Tide), with the reason on stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Url = Annotated[
    str | None,
    typer.Option("--database-url", envvar="TIDE_DATABASE_URL", help="postgresql://... (default: SQLite)."),
]
DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir", envvar="TIDE_DATA_DIR", help="Where the SQLite database is (default: tide serve's)."
    ),
]


def register(app: typer.Typer) -> None:
    db = typer.Typer(
        help="The database schema: current, upgrade, downgrade (docs/kubernetes.md, 'Upgrades')."
    )
    app.add_typer(db, name="db")

    @db.command("current")
    def current(database_url: Url = None, data_dir: DataDir = None) -> None:
        """Print the schema revision of the database, and this Tide's newest."""
        from api.server import dbcommands  # noqa: PLC0415 - SQLAlchemy and Alembic, for this command only

        dbcommands.current(database_url, data_dir)

    @db.command("upgrade")
    def upgrade(database_url: Url = None, data_dir: DataDir = None) -> None:
        """Migrate the database to this Tide's newest schema, once (a lock: pods starting meanwhile wait).

        Run it before rolling out a new release (a Kubernetes Job), after a backup (pg_dump).
        """
        from api.server import dbcommands  # noqa: PLC0415 - SQLAlchemy and Alembic, for this command only

        dbcommands.upgrade(database_url, data_dir)

    @db.command("downgrade")
    def downgrade(
        revision: Annotated[str, typer.Argument(help="The schema revision to go back to (tide db current).")],
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what it would drop.")] = False,
        force: Annotated[
            bool, typer.Option("--force", help="Even while a Tide leads (its cycles may then fail).")
        ] = False,
        database_url: Url = None,
        data_dir: DataDir = None,
    ) -> None:
        """Move the schema back to REVISION, dropping what later migrations added (their data is lost).

        Refused while a Tide service leads on this database (stop it first: kubectl scale --replicas 0) unless
        --force. Take a backup first.
        """
        from api.server import dbcommands  # noqa: PLC0415 - SQLAlchemy and Alembic, for this command only

        dbcommands.downgrade(revision, database_url, data_dir, dry_run=dry_run, force=force)
