"""Timestamps of a resize's steps, for profiling (docs/elastic-resize.md, "Where the time goes").

Contract: ``trace(what, **fields)`` appends one JSON line ``{"t", "what", "pid", **fields}`` to the file
named by ``$TIDE_TRACE_FILE`` when it is set (the service's environment; launchers and workers inherit it),
and does nothing otherwise. Standard library only, never raises: a trace must not break a launch.
"""

from __future__ import annotations

import json
import os
import time

TRACE_FILE = "TIDE_TRACE_FILE"


def trace(what: str, **fields: object) -> None:
    path = os.environ.get(TRACE_FILE)
    if not path:
        return
    line = json.dumps({"t": time.time(), "what": what, "pid": os.getpid(), **fields}, default=str)
    try:
        with open(path, "a") as handle:
            handle.write(line + "\n")
    except OSError:
        pass
