"""Traces installed with the package, by name: ``--trace philly --vc-sizes philly`` work from any directory.

Contract: ``trace_file(text)`` and ``vc_sizes_file(text)`` turn what a user gave into a file to read. A path
to an existing file wins and is returned as given; otherwise a bundled name (``TRACES``, ``VC_SIZES``) gives
the file in ``DATA`` (``scheduler/simulator/data/``, installed as package data; its ``README.md`` names the
sources and the licence); anything else raises ``UnknownTrace``, whose message says what to give instead.
Only looks at the file system; reads no file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
TRACES: Mapping[str, str] = {"philly": "philly.csv"}
VC_SIZES: Mapping[str, str] = {"philly": "philly_vc.csv"}


class UnknownTrace(ValueError):
    """Neither an existing file nor a bundled name."""


def _resolve(text: str, bundled: Mapping[str, str], what: str) -> Path:
    path = Path(text)
    if path.is_file():
        return path
    if text in bundled:
        return DATA / bundled[text]
    names = ", ".join(sorted(bundled))
    raise UnknownTrace(
        f"{text!r} is neither a file nor a bundled {what}; give the path of a file or one of: {names}"
    )


def trace_file(text: str) -> Path:
    """The job table for ``--trace``: a Philly-style CSV path, or a bundled trace's name."""
    return _resolve(text, TRACES, "trace")


def vc_sizes_file(text: str) -> Path:
    """The team sizes for ``--vc-sizes``: a ``vc,node num`` CSV path, or a bundled trace's name."""
    return _resolve(text, VC_SIZES, "set of team sizes")
