"""``tide simulate``: replay a trace through the scheduler's own ``plan_cycle`` (scheduler.simulator).

Contract: every argument after ``simulate`` goes unchanged to ``scheduler.simulator.cli.main`` (its
``--help`` lists them); the exit code is its exit code. Unlike the other commands this one talks to no
server: it runs the simulator in this process, on a virtual clock. The simulator is imported when the
command runs: it draws plots with matplotlib, which the service image (no ``train`` extra) does not have,
and ``tide serve`` must start there.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command(
        "simulate",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
        add_help_option=False,
    )
    def simulate(ctx: typer.Context) -> None:
        """Replay a GPU trace under Tide and its baselines; writes a report (tide simulate --help).

        Example (the Philly trace installed with Tide): tide simulate --trace philly --vc-sizes philly
        --gpus 64 --pollux-slice --out report/
        """
        from scheduler.simulator.cli import main as simulator_main  # noqa: PLC0415 - needs matplotlib

        raise typer.Exit(simulator_main(list(ctx.args)))
