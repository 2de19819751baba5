"""``tide agent -- torchrun train.py ...``: the entrypoint of a job pod on Kubernetes (its resizes in place).

Contract: runs ``scheduler.elastic.agent.pod`` for the training command after ``--`` with the settings
the Kubernetes executor puts in the pod's environment (``TIDE_AGENT_URL``, ``TIDE_AGENT_TOKEN``,
``TIDE_PROJECT``, ``TIDE_JOB``, ``TIDE_REPLICA_ID``, ``TIDE_MASTER_ADDR``); ``--url`` overrides the first.
The exit code is the pod's: 0 when the training finished (or the job is over), 143 when the pod was
deleted, 2 with a message naming what to fix when a setting is missing or the service refuses the agent.
A training image gets the command with ``pip install tide-scheduler``. It talks only to its own job's
agent endpoint; the agent is imported when the command runs (it is not a client command).
"""

from __future__ import annotations

import os
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command(
        "agent",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def agent(
        ctx: typer.Context,
        url: Annotated[
            str | None,
            typer.Option(help="The URL job pods reach the Tide service at (default: $TIDE_AGENT_URL)."),
        ] = None,
        connect_timeout: Annotated[
            float,
            typer.Option(
                envvar="TIDE_AGENT_CONNECT_TIMEOUT",
                min=1,
                help="Seconds to keep trying a service never reached, then exit 2.",
            ),
        ] = 300.0,
    ) -> None:
        """Run a torchrun job's replica in a pod, relaunching it at each size the service orders.

        Example (a pod's command, set by tide serve --executor kubernetes):
        tide agent -- torchrun --nproc-per-node 1 train.py
        """
        from scheduler.elastic.agent.link import settings_from  # noqa: PLC0415 - a pod's command only
        from scheduler.elastic.agent.pod import PodAgent  # noqa: PLC0415

        try:
            settings = settings_from(os.environ, list(ctx.args), url)
        except ValueError as error:
            typer.echo(f"tide agent: {error}", err=True)
            raise typer.Exit(2) from error
        raise typer.Exit(PodAgent(settings, connect_deadline=connect_timeout).run())
