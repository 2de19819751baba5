"""The ``tide`` command: a typer app whose command groups each live in their own module.

Contract: ``main()`` is the console script's entry point. A module adds its commands with a ``register(app)``
function listed in ``COMMAND_MODULES``, so new groups (jobs, projects, logs, ...) plug in without touching
the others. Commands other than ``serve`` talk to the service over HTTP only (``api.client``).
"""

from __future__ import annotations

import typer

from api.cli import admin, config, jobs, nodes, serve, simulate

app = typer.Typer(
    name="tide",
    help="Tide: quota-aware elastic GPU scheduling for distributed PyTorch jobs.",
    no_args_is_help=True,
    add_completion=True,
)


@app.callback()
def _root() -> None:
    """Tide: quota-aware elastic GPU scheduling for distributed PyTorch jobs."""


COMMAND_MODULES = (serve, config, jobs, admin, nodes, simulate)
for _module in COMMAND_MODULES:
    _module.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
