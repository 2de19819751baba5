"""``tide login URL --token T`` and ``tide config project NAME|show``: the CLI's config file (0600).

Contract: values are stored in ``api.client.cli.target.config_path()``; flags and ``TIDE_*`` variables still win
over them (see ``target.resolve``). ``login`` checks the server answers before saving, ``config project`` that
the server has the project (``--no-check``: save it as it is).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from api.client.cli import context, target
from api.client.cli.jobs import Token, Url
from api.shared.paths import api_root

config_app = typer.Typer(help="The CLI's saved settings (default project).", no_args_is_help=True)


def login(
    url: Annotated[str, typer.Argument(help="Server URL, e.g. http://gpu-box:8000.")],
    token: Annotated[str, typer.Option("--token", help="Bearer token (admin or project).")],
    check: Annotated[bool, typer.Option("--check/--no-check", help="Check the server first.")] = True,
    ca: Annotated[
        str | None,
        typer.Option(
            "--ca", help="PEM CA bundle that signed an https server's certificate (else TIDE_CA_BUNDLE)."
        ),
    ] = None,
) -> None:
    """Save the server and token the CLI uses by default (and the CA bundle of an https server).

    Example: tide login http://gpu-box:8000 --token tide_p_...
    """
    if ca is not None:
        ca = str(Path(ca).expanduser().resolve())
    if check:
        with context.session(url, token, ca=ca) as client:
            client.projects()
    path = target.save_config({"url": api_root(url), "token": token} | ({"ca": ca} if ca else {}))
    typer.echo(f"Logged in to {url}; saved in {path}.")


@config_app.command("project")
def set_project(
    name: Annotated[str, typer.Argument(help="Project used when -p is not given.")],
    check: Annotated[bool, typer.Option("--check/--no-check", help="Check the server has it first.")] = True,
    url: Url = None,
    token: Token = None,
) -> None:
    """Set the default project (after checking the server has it).

    Example: tide config project team-a
    """
    if check:
        with context.session(url, token) as client:
            client.project(name)
    path = target.save_config({"project": name})
    typer.echo(f"Default project: {name} (saved in {path}).")


@config_app.command("show")
def show() -> None:
    """Show the saved settings (the token hidden).

    Example: tide config show
    """
    data = target.load_config()
    if data.get("token"):
        data["token"] = str(data["token"])[:8] + "..."
    typer.echo(f"# {target.config_path()}")
    typer.echo(json.dumps(data, indent=2))


def register(app: typer.Typer) -> None:
    app.command("login")(login)
    app.add_typer(config_app, name="config")
