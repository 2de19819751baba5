"""``tide serve``: run the service (API, scheduling loop, local executor) in the foreground.

Contract: every flag has a ``TIDE_*`` environment equivalent (flag wins). On start it prints where the API
and its docs are, the data directory, the database, and the admin token when it was just generated (later
starts say where it is stored). It writes ``DATA/server.json`` (the URL) so the CLI on this machine finds
the server and its token without flags.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Annotated

import typer
import uvicorn
from sqlalchemy.exc import OperationalError

from api.app import create_app
from api.auth import ADMIN_TOKEN_FILE, admin_token
from api.settings import Settings, default_data_dir
from scheduler.store.db import Database
from scheduler.store.migrate import SchemaTooNewError, check_not_newer


def _banner(settings: Settings, token: str, created: bool) -> str:
    url = f"http://{settings.host}:{settings.port}"
    lines = [
        f"Tide API:      {url}/api/v1",
        f"API docs:      {url}/docs",
        f"Dashboard:     {url}/",
        f"Data dir:      {settings.data_dir}",
        f"Database:      {'PostgreSQL' if settings.database_url else settings.resolved_database_url()}",
    ]
    if settings.admin_token:
        lines.append("Admin token:   from TIDE_ADMIN_TOKEN")
    elif created:
        lines.append(
            f"Admin token:   {token}  (generated now; stored in {settings.data_dir / ADMIN_TOKEN_FILE})"
        )
    else:
        lines.append(f"Admin token:   stored in {settings.data_dir / ADMIN_TOKEN_FILE}")
    return "\n".join(lines)


def serve(
    *,
    host: Annotated[str, typer.Option(envvar="TIDE_HOST", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="TIDE_PORT", help="Port to listen on.")] = 8000,
    database_url: Annotated[
        str | None,
        typer.Option(envvar="TIDE_DATABASE_URL", help="postgresql://... (default: SQLite in the data dir)."),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(envvar="TIDE_DATA_DIR", help="State, logs, admin token (default ~/.local/share/tide)."),
    ] = None,
    executor: Annotated[
        str, typer.Option(envvar="TIDE_EXECUTOR", help="local (kubernetes: later).")
    ] = "local",
    nodes: Annotated[int | None, typer.Option(envvar="TIDE_NODES", min=1, help="Virtual nodes.")] = None,
    gpus_per_node: Annotated[
        int | None, typer.Option(envvar="TIDE_GPUS_PER_NODE", min=1, help="Virtual GPUs per node.")
    ] = None,
    cycle_period: Annotated[
        float, typer.Option(envvar="TIDE_CYCLE_PERIOD", min=0.01, help="Seconds between scheduling cycles.")
    ] = 1.0,
    grace_period: Annotated[
        float, typer.Option(envvar="TIDE_GRACE_PERIOD", min=0, help="Seconds from SIGTERM to SIGKILL.")
    ] = 30.0,
    settle_time: Annotated[
        float,
        typer.Option(envvar="TIDE_SETTLE_TIME", min=0, help="Seconds a resized job is left alone (R7)."),
    ] = 10.0,
    log_level: Annotated[str, typer.Option(envvar="TIDE_LOG_LEVEL", help="debug, info, warning.")] = "info",
) -> None:
    """Run the Tide service in the foreground.

    Example: tide serve --nodes 2 --gpus-per-node 4 --grace-period 10
    """
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings(
        data_dir=(data_dir or default_data_dir()).expanduser().resolve(),
        database_url=database_url,
        host=host,
        port=port,
        executor=executor,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        cycle_period=cycle_period,
        grace_period=grace_period,
        settle_seconds=settle_time,
        admin_token=os.environ.get("TIDE_ADMIN_TOKEN") or None,
    )
    if executor == "kubernetes":
        raise typer.BadParameter(
            "the kubernetes executor is not available yet: use local", param_hint="--executor"
        )
    if executor not in ("local", "fake"):
        raise typer.BadParameter(f"unknown executor {executor!r}; available: local", param_hint="--executor")
    _refuse_newer_schema(settings)
    token, created = admin_token(settings)
    typer.echo(_banner(settings, token, created))
    (settings.data_dir / "server.json").write_text(json.dumps({"url": f"http://{host}:{port}"}))
    uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level.lower())


def _refuse_newer_schema(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = Database(settings.resolved_database_url())
    try:
        check_not_newer(db)
    except SchemaTooNewError as error:
        typer.echo(f"tide: {error}", err=True)
        raise typer.Exit(2) from error
    except OperationalError as error:
        typer.echo(f"tide: cannot reach the database: {error.orig}", err=True)
        raise typer.Exit(2) from error
    finally:
        db.dispose()


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
