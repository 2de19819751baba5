"""The ``tide`` command: a typer app whose command groups each live in their own module.

Contract: ``main()`` is the console script's entry point. Each module in ``COMMAND_MODULES`` adds its
commands with a ``register(app)`` function; a new group is a new module under ``api/cli/`` and one line in
that tuple, without touching the others.

Every command starts fast (``tide list`` in about 0.2 s; bench/cli_start.py measures it), because importing
this module imports only what the client commands need: typer, httpx (``api.client``) and plain answer
types (``api.client_types``); rich when a command draws a table. A command module imports nothing of the
server at its top: no FastAPI, pydantic, SQLAlchemy or ``scheduler.*``. A command that runs server-side
code (``serve``, ``simulate``) keeps its options and help in its module and imports the implementation
inside the command function; an import-linter contract in pyproject.toml ("The CLI's client layer ...")
checks this, and lists each such deferred import by name.
"""

from __future__ import annotations

import typer

from api.cli import admin, agent, config, jobs, nodes, serve, simulate, submit, version

app = typer.Typer(
    name="tide",
    help="Tide: quota-aware elastic GPU scheduling for distributed PyTorch jobs.",
    no_args_is_help=True,
    add_completion=True,
)


@app.callback()
def _root() -> None:
    """Tide: quota-aware elastic GPU scheduling for distributed PyTorch jobs."""


COMMAND_MODULES = (serve, config, jobs, submit, admin, nodes, simulate, agent, version)
for _module in COMMAND_MODULES:
    _module.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
