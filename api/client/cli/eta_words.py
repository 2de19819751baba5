"""Start-time forecasts in words: the ``ETA`` column of ``tide list``, the sentence of ``tide describe job``,
and the ``--expected-duration`` a user types.

Contract: pure functions of a ``client_types.JobPublic`` (its ``eta`` when pending, ``grow_at`` when a running
elastic job is below its wanted size) and the time now; standard library only (the client imports nothing
of the server). ``parse_duration`` reads ``90m``, ``2h``, ``1h30m``, ``1d``, ``45s`` or plain seconds and
raises ``ValueError`` with what to type instead.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from api.client.client_types import EtaPublic, JobPublic

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)([dhms]))")
_SOURCES = {
    "declared": "its declared duration",
    "project": "its project's recent jobs of the same shape",
    "cluster": "the cluster's recent jobs",
    "default": "a default guess (no finished jobs to learn from yet)",
}


def parse_duration(text: str) -> float:
    """Seconds in ``text``: ``3600``, ``90m``, ``2h``, ``1h30m``, ``1d``, ``45s``."""
    value = text.strip().lower()
    try:
        seconds = float(value)
    except ValueError:
        parts = _DURATION.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise ValueError(
                f"{text!r} is not a duration: give seconds, or e.g. 90m, 2h, 1h30m, 1d"
            ) from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not 0 < seconds < float("inf"):
        raise ValueError(f"{text!r}: a duration must be more than 0 seconds")
    return seconds


def span(seconds: float) -> str:
    """``45s``, ``12m``, ``1h20m``, ``2d3h``: the two largest units."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h}h{m:02d}m" if m else f"{h}h"
    d, h = divmod(s // 3600, 24)
    return f"{d}d{h}h" if h else f"{d}d"


def _forecast(job: JobPublic) -> tuple[EtaPublic | None, bool]:
    if job.status == "pending":
        return job.eta, False
    return (job.grow_at, True) if job.status == "running" else (None, False)


def _until(when: datetime, now: datetime) -> float:
    return (when - now).total_seconds()


def eta_cell(job: JobPublic, now: datetime | None = None) -> str:
    """``~1h20m`` (p50 from now) ``..2h`` (p90), ``grow ~5m`` for growth, ``> horizon``, or empty."""
    eta, grows = _forecast(job)
    if eta is None:
        return ""
    now = now or datetime.now(UTC)
    if eta.start_p50 is None:
        return "not soon"
    text = f"~{span(_until(eta.start_p50, now))}"
    if eta.start_p90 is not None and eta.start_p90 > eta.start_p50:
        text += f"..{span(_until(eta.start_p90, now))}"
    return f"grow {text}" if grows else text


def eta_sentence(job: JobPublic, now: datetime | None = None) -> str | None:
    """What ``tide describe job`` says about when the job starts or grows; None without a forecast."""
    eta, grows = _forecast(job)
    if eta is None:
        return None
    now = now or datetime.now(UTC)
    verb = f"grow to {eta.size} replicas" if grows else "start"
    if eta.start_p50 is None:
        return f"not expected to {verb} within the next 7 days if nothing changes"
    clock = eta.start_p50.astimezone(UTC).strftime("%H:%M UTC")
    text = f"expected to {verb} in about {span(_until(eta.start_p50, now))} (around {clock})"
    if eta.start_p90 is not None and eta.start_p90 > eta.start_p50:
        text += f", most likely by {eta.start_p90.astimezone(UTC).strftime('%H:%M UTC')}"
    if not grows:
        text += f", with {eta.size} replica{'s' if eta.size != 1 else ''}"
    if eta.after is None:
        return text + ": the GPUs it needs are free or being freed"
    source = _SOURCES.get(eta.source or "", "an estimate")
    return text + f", when {eta.after} ends (its end estimated from {source})"
