"""The ``tide`` command: a typer app whose command groups each live in their own module.

Contract: ``main()`` is the console script's entry point. Each module in ``COMMAND_MODULES`` adds its
commands with a ``register(app)`` function; ``COMMANDS`` says which module registers each top-level command
(a test checks it against what the modules register). A new group is a new module under ``api/client/cli/``, one
line in each, without touching the others.

Every command starts fast (bench/cli_start.py measures it). ``tide version`` and ``tide list --json``, which
scripts call in loops, are answered by ``api.client.cli.quick`` with the standard library alone when it can (else
it says so, and the full CLI runs the same command line). For the rest, importing this module imports
nothing more, ``build`` imports typer, and a command loads only the module that registers it: typer builds
its command tree from every registered function's signature at each start (~25 ms for all of them). ``tide``
alone, ``--help``, shell completion and a name no module registers load them all, so help, completion and
"No such command" read as before. ``app`` (for tests driving the whole CLI) is the app with every command.

A command module imports nothing of the server at its top: no FastAPI, pydantic, SQLAlchemy or
``scheduler.*``; it imports httpx (``api.client.rest``) and plain answer types (``api.client.client_types``), and rich
when a command draws a table. A command that runs server-side code (``serve``, ``simulate``) keeps its
options and help in its module and imports the implementation inside the command function; an import-linter
contract in pyproject.toml ("The CLI's client layer ...") checks this, and lists each such deferred import by
name.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from api.client.cli import quick

if TYPE_CHECKING:
    import typer

COMMAND_MODULES = (
    "serve", "config", "jobs", "submit", "admin", "nodes", "simulate", "agent", "version", "db"
)  # fmt: skip
COMMANDS = {
    "serve": "serve",
    "login": "config",
    "config": "config",
    "submit-dist": "jobs",
    "list": "jobs",
    "describe": "jobs",
    "logs": "jobs",
    "delete": "jobs",
    "submit": "submit",
    "project": "admin",
    "department": "admin",
    "cluster": "admin",
    "events": "admin",
    "token": "admin",
    "node": "nodes",
    "simulate": "simulate",
    "agent": "agent",
    "version": "version",
    "db": "db",
}


def _root() -> None:
    """Tide: quota-aware elastic GPU scheduling for distributed PyTorch jobs."""


def build(modules: Sequence[str] = COMMAND_MODULES) -> typer.Typer:
    """The app with the commands of ``modules`` (all of them by default)."""
    import typer  # noqa: PLC0415 - the quick path (``api.client.cli.quick``) answers its commands without it

    from api.client.cli.usage import OneLineErrors  # noqa: PLC0415 - imports typer too

    built = typer.Typer(
        cls=OneLineErrors,
        name="tide",
        help="Tide: quota-aware elastic GPU scheduling for distributed PyTorch jobs.",
        no_args_is_help=True,
        add_completion=True,
    )
    built.callback()(_root)
    for name in modules:
        importlib.import_module(f"api.client.cli.{name}").register(built)
    return built


def modules_for(argv: Sequence[str]) -> tuple[str, ...]:
    """The modules a command line needs: the one registering its command, else all of them."""
    if any(key.startswith("_") and key.endswith("_COMPLETE") for key in os.environ):
        return COMMAND_MODULES  # shell completion lists every command
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    owner = COMMANDS.get(command) if command is not None else None
    return (owner,) if owner is not None else COMMAND_MODULES


def main() -> None:
    code = quick.run(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    build(modules_for(sys.argv[1:]))()


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # built on first use: a command's own start loads only its module
        built = build()
        globals()["app"] = built
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
