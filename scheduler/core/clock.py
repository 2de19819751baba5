"""Times in reasons (R13): one wall-clock format for every sentence a person reads.

Contract: the core's clock is the caller's (the service's: UTC epoch seconds); a reason that says "until"
or "at" shows that time as ``HH:MM UTC`` (the CLI's ETAs read the same), never as a raw number.
"""

from __future__ import annotations

import math


def clock(t: float) -> str:
    """``14:05 UTC``: the minute ``t`` falls in, rounded up (so "until" never reads earlier than it is)."""
    minutes = math.ceil(t / 60)
    return f"{minutes // 60 % 24:02d}:{minutes % 60:02d} UTC"
