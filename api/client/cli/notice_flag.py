"""``--preemption-notice`` on ``tide project`` and ``tide department``: how it is read and shown.

Contract: ``seconds(text)`` reads the flag: ``20s``, ``2m``, ``1h`` or whole seconds; ``0``, ``off`` or
``none``: no notice (0); ``inherit`` (a project's update only): back to its department's (``None``, which the
service stores as null). Anything else, or a duration that is not whole seconds, ends the command with a
message (exit 2). ``words``/``sentence`` say a notice for a table cell and for a confirmation line.
"""

from __future__ import annotations

from typing import Annotated

import typer

from api.client.cli import context, target
from api.client.cli.eta_words import parse_duration, span

Option = Annotated[
    str | None,
    typer.Option(
        "--preemption-notice",
        help="Preemption notice: a replica whose GPUs are reclaimed or preempted gets SIGUSR1 this long "
        "before its SIGTERM, to checkpoint (inside its grace period). 20s, 2m or seconds; 0 or off: none.",
    ),
]
INHERIT = "inherit"
UNSET = object()  # the flag was not given


def seconds(text: str | None, *, inherit: bool = False) -> int | object | None:
    """Whole seconds from the flag; ``UNSET`` when not given; ``None`` for ``inherit`` where allowed."""
    if text is None:
        return UNSET
    word = text.strip().lower()
    if inherit and word == INHERIT:
        return None
    if word in ("0", "off", "none"):
        return 0
    try:
        value = parse_duration(text)
    except ValueError as e:
        context.fail(f"--preemption-notice {e}", target.EXIT_BAD_INPUT)
    if value != int(value):
        context.fail(f"--preemption-notice {text!r}: give whole seconds", target.EXIT_BAD_INPUT)
    return int(value)


def add(body: dict[str, object], text: str | None, *, inherit: bool = False) -> dict[str, object]:
    """``body`` with ``preemption_notice_seconds`` when the flag was given."""
    value = seconds(text, inherit=inherit)
    if value is not UNSET:
        body["preemption_notice_seconds"] = value
    return body


def words(notice: int | None) -> str:
    return "-" if not notice else span(notice)


def sentence(notice: int | None) -> str:
    return f", preemption notice {span(notice)} before SIGTERM" if notice else ""
