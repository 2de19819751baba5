"""``tide version``: the installed Tide's version (``api.shared.version``); talks to no server.

Contract: prints ``tide VERSION`` on one line and exits 0.
"""

from __future__ import annotations

import typer

from api.shared.version import package_version


def version() -> None:
    """Print the installed Tide's version.

    Example: tide version
    """
    typer.echo(f"tide {package_version()}")


def register(app: typer.Typer) -> None:
    app.command("version")(version)
