"""``--resize-cost`` on ``tide project`` and ``tide department`` (R18): how it is read and shown.

Contract: ``add(body, text)`` reads the flag (``duration_flag``): ``30s``, ``2m``, ``1h`` or seconds; ``0``, ``off`` or ``none``: free
(0); ``inherit`` (updates only): back to its department's, or for a department the service's default (``None``,
stored as null). Anything else ends the command with a message (exit 2). ``words``/``sentence`` say it for a
table cell and for a confirmation line.
"""

from __future__ import annotations

from typing import Annotated

import typer

from api.client.cli import duration_flag
from api.client.cli.eta_words import span

Option = Annotated[
    str | None,
    typer.Option(
        "--resize-cost",
        help="Resize cost: how long a resize (every grow or shrink restarts the job) pauses its jobs not yet "
        "measured. Growth happens only when it pays for that, and a resized job is left alone for ten of "
        "them. 30s, 2m or seconds; 0 or off: free; inherit (update): its department's, else the service's.",
    ),
]


def add(body: dict[str, object], text: str | None, *, inherit: bool = False) -> dict[str, object]:
    """``body`` with ``resize_cost_seconds`` when the flag was given."""
    return duration_flag.add(
        body, "resize_cost_seconds", duration_flag.read(text, "--resize-cost", inherit=inherit)
    )


def words(cost: float | None) -> str:
    return "-" if cost is None else ("free" if cost == 0 else span(cost))


def sentence(cost: float | None) -> str:
    return f", resize cost {span(cost)}" if cost else ""
