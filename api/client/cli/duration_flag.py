"""A duration flag of ``tide project`` and ``tide department`` (``--preemption-notice``, ``--resize-cost``).

Contract: ``read(text, flag)`` reads it: ``20s``, ``2m``, ``1h`` or seconds; ``0``, ``off`` or ``none``: 0;
``inherit`` where allowed (updates): ``None``, which the service stores as null (back to the department's,
or the service's default); ``UNSET`` when the flag was not given. With ``whole``, a duration that is not whole
seconds is refused. Anything else ends the command with a message naming the flag (exit 2).
"""

from __future__ import annotations

from api.client.cli import context, target
from api.client.cli.eta_words import parse_duration

INHERIT = "inherit"
UNSET = object()  # the flag was not given


def read(text: str | None, flag: str, *, inherit: bool = False, whole: bool = False) -> float | object | None:
    if text is None:
        return UNSET
    word = text.strip().lower()
    if inherit and word == INHERIT:
        return None
    if word in ("0", "off", "none"):
        return 0.0
    try:
        value = float(parse_duration(text))
    except ValueError as e:
        context.fail(f"{flag} {e}", target.EXIT_BAD_INPUT)
    if whole and value != int(value):
        context.fail(f"{flag} {text!r}: give whole seconds", target.EXIT_BAD_INPUT)
    return value


def add(body: dict[str, object], key: str, value: object) -> dict[str, object]:
    """``body`` with ``key`` when the flag was given (``value`` is not ``UNSET``)."""
    if value is not UNSET:
        body[key] = value
    return body
