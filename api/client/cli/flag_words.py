"""The server's error messages in the CLI's words: the flags a person typed, the commands they know.

Contract: pure (the standard library only). ``say(error, flags)`` is the message of a ``TideAPIError``
for a command whose body fields came from ``flags`` (field -> ``Typed``: the flag, the value as typed,
whether the field is seconds): each problem named by its flag and typed value instead of the API's field
name (``-g/--gpu -1: must be at least 1``, not ``gpus_per_replica: Input should be ...``), a bound on
seconds written as a duration (``30d``, not ``2592000``), and the API's routes in messages replaced by the
commands that read the same (``tide project list``, not ``GET /api/v1/projects``). A message it cannot map
stays as the server wrote it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from api.client.rest import TideAPIError


@dataclass(frozen=True, slots=True)
class Typed:
    """Where a body field came from: its flag, the value as typed (None: not shown), seconds or not."""

    flag: str
    value: str | None = None
    seconds: bool = False


_BOUNDS = (
    ("Input should be greater than or equal to ", "must be at least "),
    ("Input should be less than or equal to ", "must be at most "),
    ("Input should be greater than ", "must be more than "),
    ("Input should be less than ", "must be less than "),
)
_ROUTES = (
    (re.compile(r"see GET /api/v1/jobs\?project=([-a-z0-9]+)"), r"see `tide list -p \1`"),
    (re.compile(r"see GET /api/v1/projects\b"), "see `tide project list`"),
    (re.compile(r"see GET /api/v1/departments\b"), "see `tide department list`"),
)


def say(error: TideAPIError, flags: Mapping[str, Typed]) -> str:
    """The error's message, in the flags' words where it names a field of theirs."""
    if error.status_code == 422 and error.errors and flags:
        return "; ".join(_problem(found, flags) for found in error.errors)
    return _fields_named(commands(error.detail), flags)


def commands(detail: str) -> str:
    """``detail`` with the API's routes replaced by the commands that show the same."""
    for pattern, replacement in _ROUTES:
        detail = pattern.sub(replacement, detail)
    return detail


def _problem(found: Mapping[str, Any], flags: Mapping[str, Typed]) -> str:
    loc = [str(part) for part in found.get("loc", ()) if part != "body"]
    message = str(found.get("msg", "invalid")).removeprefix("Value error, ")
    typed = flags.get(loc[0]) if loc else None
    if typed is None:
        where = ".".join(loc)
        return _fields_named(f"{where}: {message}" if where else message, flags)
    for api_words, cli_words in _BOUNDS:
        if message.startswith(api_words):
            bound = message.removeprefix(api_words)
            message = cli_words + (_duration(bound) if typed.seconds else bound)
    shown = f"{typed.flag} {typed.value}" if typed.value is not None else typed.flag
    return f"{shown}: {_fields_named(message, flags)}"


def _fields_named(message: str, flags: Mapping[str, Typed]) -> str:
    """``message`` with the API's field names (``limit_gpus``: those with an underscore, which no English
    word has) replaced by their flags."""
    for field in sorted((f for f in flags if "_" in f), key=len, reverse=True):
        message = re.sub(rf"\b{re.escape(field)}\b", flags[field].flag, message)
    return message


def _duration(bound: str) -> str:
    """``2592000`` seconds as ``30d`` (whole days, hours or minutes where it is one), else as given."""
    try:
        seconds = float(bound)
    except ValueError:
        return bound
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
