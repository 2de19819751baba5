"""R19 goodput-aware growth: which job grows, by what it turns a GPU into.

Contract: pure functions over ``Job.throughput`` (a ``Throughput`` the shell fitted with ``fit`` from the
samples per second a job reported at the sizes it ran). They never decide *whether* a project gets GPUs (fair
shares stay R1/R4's), only *which* of its jobs grows first and how far:

- ``gain(job, n)``: the progress one more step of growth adds, per replica added, as a fraction of what one
  replica alone achieves (Pollux's speedup). Linear scaling is 1.0; a job that reports nothing counts as 1.0
  (today's implicit assumption), so among such jobs today's order stands.
- ``cap(job, n, k, rival)``: of ``k`` replicas a job could add at ``n``, how many it takes: never past the size
  where its speed peaks (more replicas would slow it down), and beyond its first step only while each step
  adds at least ``rival`` (what the next job in line would make of a GPU): the rest is left to that job.
- ``rival``: the gain of the next growth claim in a project's line (0.0 when there is none).

The model: one step at ``n`` replicas takes ``compute / n + sync * (n - 1)`` seconds (at the job's fixed
global batch), Pollux's compute time plus a synchronisation term that grows with replicas. ``fit`` solves it
by least squares from two or more sizes; from one size it assumes linear scaling at the measured per-replica
rate (``sync = 0``): one size says nothing about how the job scales, so it ranks like a job that reports
nothing until it has run at a second size.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sized

from scheduler.core import sizes
from scheduler.core.model import UNLIMITED, Job, Throughput

# what a job that reports nothing is taken to make of one more replica: linear scaling (today's rule)
UNREPORTED_GAIN = 1.0


def fit(points: Iterable[tuple[int, float]]) -> Throughput | None:
    """The model from ``(replicas, samples per second)`` measurements (several per size are averaged);
    ``None`` without a positive one. See the module contract for one size."""
    per_size: dict[int, list[float]] = {}
    for n, rate in points:
        if n >= 1 and rate > 0 and math.isfinite(rate):
            per_size.setdefault(n, []).append(1.0 / rate)
    if not per_size:
        return None
    ns = sorted(per_size)
    ys = [sum(per_size[n]) / len(per_size[n]) for n in ns]
    if len(ns) == 1:
        return Throughput(compute=ns[0] * ys[0], sync=0.0)
    us, vs = [1.0 / n for n in ns], [float(n - 1) for n in ns]
    suu = sum(u * u for u in us)
    svv = sum(v * v for v in vs)
    suv = sum(u * v for u, v in zip(us, vs, strict=True))
    suy = sum(u * y for u, y in zip(us, ys, strict=True))
    svy = sum(v * y for v, y in zip(vs, ys, strict=True))
    det = suu * svv - suv * suv
    if det > 0:
        c = (suy * svv - svy * suv) / det
        s = (svy * suu - suy * suv) / det
        if c > 0 and s >= 0:
            return Throughput(compute=c, sync=s)
        if c > 0:  # faster than linear between the sizes: no synchronisation term
            return Throughput(compute=suy / suu, sync=0.0)
    # slower with every replica beyond what 1/n explains: fastest on one replica
    s = max(svy / svv, 0.0) if svv > 0 else 0.0
    return Throughput(compute=min(ys) * 1e-6, sync=s) if s > 0 else Throughput(compute=suy / suu, sync=0.0)


def speed(model: Throughput, n: int) -> float:
    """Steps per second at ``n`` replicas (relative)."""
    return 1.0 / (model.compute / n + model.sync * (n - 1))


def peak(model: Throughput) -> int:
    """The replica count at which the job runs fastest (``UNLIMITED`` for linear scaling)."""
    if model.sync <= 0:
        return UNLIMITED
    x = math.sqrt(model.compute / model.sync)
    low = max(1, math.floor(x))
    return low if speed(model, low) >= speed(model, low + 1) else low + 1


def step_gain(model: Throughput, n: int, k: int) -> float:
    """What adding ``k`` replicas to ``n`` adds per replica, as a fraction of one replica's speed."""
    return (speed(model, n + k) - speed(model, n)) / (k * speed(model, 1))


def gain(job: Job, n: int) -> float:
    """The gain of the job's next growth step from ``n`` replicas (module contract)."""
    model = job.throughput
    if model is None:
        return UNREPORTED_GAIN
    k = sizes.grow_at_least(job, n, 1)
    if k >= UNLIMITED or n + k > job.max_replicas:
        return 0.0
    return step_gain(model, n, k)


def cap(job: Job, n: int, k: int, rival: float) -> int:
    """How many of ``k`` replicas the job takes at ``n`` (module contract); ``k`` for a job that reports
    nothing."""
    model = job.throughput
    if model is None or k <= 0:
        return k
    top = min(n + k, peak(model))
    took = 0
    while True:
        step = sizes.grow_at_least(job, n + took, 1)
        if step >= UNLIMITED or n + took + step > top:
            return took
        if took and step_gain(model, n + took, step) < rival:
            return took
        took += step


def rival(queue: Iterable[Job], active: Mapping[tuple[str, str], Sized]) -> float:
    """The gain of the first running job (a growth claim) in ``queue`` (0.0 when none)."""
    for job in queue:
        n = len(active[job.key])
        if n:
            return gain(job, n)
    return 0.0
