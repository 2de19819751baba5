"""R16 allowed sizes: the replica counts a job may run at.

Contract: a job whose ``allowed_replicas`` is empty may run at any count in ``min_replicas..max_replicas``
(today's behaviour). Otherwise it runs only at the counts listed there, and always may at ``min_replicas``
(its gang, R8) and ``max_replicas`` (its cap): Tide starts, grows and shrinks it only to those counts.
Pure functions over a ``Job``; the shell expands a step or powers of two into the explicit list.

A shrink to an allowed count may stop more replicas than a claimant needs (8 -> 4 when one GPU is wanted):
the rest is not reserved for anyone, so the same cycle's later claims wait for it instead of taking more
victims, and it is idle (lent, R4) once those replicas have stopped.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from scheduler.core.model import UNLIMITED, Job, Replica


def sizes(job: Job) -> tuple[int, ...]:
    """Every count the job may run at, ascending (``min_replicas`` and ``max_replicas`` included)."""
    lo, hi = job.min_replicas, job.max_replicas
    if not job.allowed_replicas:
        return tuple(range(lo, hi + 1))
    return tuple(sorted({lo, hi, *(n for n in job.allowed_replicas if lo < n < hi)}))


def allowed(job: Job, count: int) -> bool:
    """Whether the job may run at ``count`` replicas (0: not running, always allowed)."""
    if count == 0:
        return True
    if not job.min_replicas <= count <= job.max_replicas:
        return False
    return not job.allowed_replicas or count in (job.min_replicas, job.max_replicas, *job.allowed_replicas)


def grow_by(job: Job, now: int, most: int) -> int:
    """Replicas to add to a job running ``now`` to reach the largest allowed count within ``now + most``."""
    if not job.allowed_replicas or most <= 0:
        return max(most, 0)
    steps = sizes(job)
    i = bisect_right(steps, now + most) - 1
    return steps[i] - now if i >= 0 and steps[i] > now else 0


def grow_at_least(job: Job, now: int, want: int) -> int:
    """Replicas to add to reach the smallest allowed count of at least ``now + want`` (``UNLIMITED`` when
    there is none: callers cap it by what they may take)."""
    if not job.allowed_replicas:
        return want
    steps = sizes(job)
    i = bisect_left(steps, now + want)
    return steps[i] - now if i < len(steps) else UNLIMITED


def shrink_to(job: Job, now: int) -> int:
    """The largest allowed count below ``now`` and at least ``min_replicas`` (``now - 1`` for a job with no
    list); ``now`` itself when there is none (the job can only go whole)."""
    if not job.allowed_replicas:
        return now - 1 if now > job.min_replicas else now
    steps = sizes(job)
    i = bisect_left(steps, now) - 1
    return steps[i] if i >= 0 else now


def extras(job: Job, active: list[Replica]) -> list[tuple[Replica, ...]]:
    """The job's elastic extras as shrink steps, the first one first: each step takes the highest-index
    replicas down to the next allowed count (one replica each for a job with no list)."""
    out: list[tuple[Replica, ...]] = []
    n = len(active)
    while (lower := shrink_to(job, n)) < n:
        out.append(tuple(active[lower:n]))
        n = lower
    return out


def describe(job: Job) -> str:
    """The allowed counts for a reason a person reads, e.g. ``allowed sizes 1, 2, 4, 8``."""
    return "allowed sizes " + ", ".join(str(n) for n in sizes(job))
