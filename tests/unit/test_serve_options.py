"""``tide serve``'s options, declared once (``api.shared.serve_options``): the CLI, ``run`` and ``Settings``
read the same fields, and the flags and variables users know keep their names."""

from __future__ import annotations

from dataclasses import fields

from api.server.parts import engine_settings
from api.server.settings import Settings
from api.shared.serve_options import ServeOptions, env_of, flag_of, serve_options


def test_every_option_has_help_and_its_own_flag_and_variable() -> None:
    options = serve_options()
    assert all(item.metadata["help"] for item in options)
    assert len({flag_of(item) for item in options}) == len({env_of(item) for item in options}) == len(options)


def test_the_settle_time_flag_and_variable_keep_their_names() -> None:
    (settle,) = [item for item in serve_options() if item.name == "settle_seconds"]
    assert (flag_of(settle), env_of(settle)) == ("--settle-time", "TIDE_SETTLE_TIME")


def test_settings_take_the_options_whole_with_their_defaults() -> None:
    names = [item.name for item in fields(ServeOptions)]
    assert [item.name for item in fields(Settings)][: len(names)] == names
    defaults = Settings.of(ServeOptions(), data_dir=Settings().data_dir)
    assert defaults == Settings()
    assert Settings.of(ServeOptions(port=9000, settle_seconds=2.5), engine_process=True).settle_seconds == 2.5


def test_the_core_plans_knowing_the_loops_cycle_period_and_settle_time() -> None:
    """Decision 71 weighs a job's settle time against when the loop plans again: the service hands the core
    its cycle period with the settle time and the resize cost."""
    core = engine_settings(Settings(cycle_period=7.5, settle_seconds=20.0, resize_cost_seconds=3.0)).core
    assert (core.next_plan_seconds, core.settle_seconds, core.resize_cost_seconds) == (7.5, 20.0, 3.0)
