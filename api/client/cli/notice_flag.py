"""``--preemption-notice`` on ``tide project`` and ``tide department``: how it is read and shown.

Contract: ``add(body, text)`` reads the flag (``duration_flag``): ``20s``, ``2m``, ``1h`` or whole seconds; ``0``, ``off`` or
``none``: no notice (0); ``inherit`` (a project's update only): back to its department's (``None``, which the
service stores as null). Anything else, or a duration that is not whole seconds, ends the command with a
message (exit 2). ``words``/``sentence`` say a notice for a table cell and for a confirmation line.
"""

from __future__ import annotations

from typing import Annotated

import typer

from api.client.cli import duration_flag
from api.client.cli.eta_words import span

Option = Annotated[
    str | None,
    typer.Option(
        "--preemption-notice",
        help="Preemption notice: a replica whose GPUs are reclaimed or preempted gets SIGUSR1 this long "
        "before its SIGTERM, to checkpoint (inside its grace period). 20s, 2m or seconds; 0 or off: none.",
    ),
]


def add(body: dict[str, object], text: str | None, *, inherit: bool = False) -> dict[str, object]:
    """``body`` with ``preemption_notice_seconds`` (whole seconds) when the flag was given."""
    value = duration_flag.read(text, "--preemption-notice", inherit=inherit, whole=True)
    return duration_flag.add(
        body, "preemption_notice_seconds", int(value) if isinstance(value, float) else value
    )


def words(notice: int | None) -> str:
    return "-" if not notice else span(notice)


def sentence(notice: int | None) -> str:
    return f", preemption notice {span(notice)} before SIGTERM" if notice else ""
