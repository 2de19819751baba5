"""R14 fair share over time: decayed over-quota usage, and the over-quota weight it leaves a project.

Contract: pure functions, no clock (the shell passes the times).

- Usage ``U`` of a project is the GPU-seconds it held beyond its deserved quota, each second weighted by
  ``0.5 ** (age / half_life)``: ``accrue`` advances it over an interval during which the project held
  ``over`` GPUs above its quota (the exact integral, so any cycle length gives the same value).
- Normalised usage ``u = U / (C * half_life / ln 2)``: the fraction of the most over-quota usage a cluster of
  ``C`` schedulable GPUs could have accumulated (a project that held the whole cluster above its quota for
  ever has ``u = 1``). KAI-Scheduler normalises to cluster capacity the same way.
- Among the projects of one division (the top level, or one department) that want GPUs beyond their
  quota, a project's share of their over-quota weights is ``s = w / sum(w)``, and its weight becomes
  ``w' = w * max(1/32, 1 - u / (2 s))``, rounded down to a multiple of ``w / 32``. This is KAI-Scheduler's
  time-based fair share ``max(0, s + k (s - u))`` with ``k = 1``, divided by ``1 + k`` so that a project
  with no usage keeps its weight (departments and projects compared with them are not disturbed), and
  floored above 0 so a heavy user still borrows before the weight-0 projects. Kueue's Admission Fair
  Sharing orders tenants by the same kind of decayed usage per weight.

The rounding keeps weights exact rationals with small denominators, so the division stays exact and cached
between cycles while usage drifts. ``half_life == 0`` switches it all off (usage stays 0).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from fractions import Fraction
from typing import TypeVar

from scheduler.core.model import ClusterState

K = TypeVar("K", bound=Hashable)  # a competitor's name

STEPS = 32  # the weight factor moves in steps of 1/32


def accrue(usage: float, over: int, seconds: float, half_life: float) -> float:
    """``usage`` decayed over ``seconds``, plus ``over`` GPUs held above quota over those seconds."""
    if half_life <= 0:
        return 0.0
    if seconds <= 0:
        return usage
    keep = math.pow(0.5, seconds / half_life)
    return usage * keep + over * (half_life / math.log(2)) * (1.0 - keep)


def over_quota(state: ClusterState) -> dict[str, int]:
    """GPUs each project holds above its deserved quota (replicas still stopping count: they hold GPUs; a
    shared GPU of its fractional replicas, R20, counts as one)."""
    held = {p.name: 0 for p in state.projects}
    shared: set[tuple[str, str, int]] = set()
    for job in state.jobs:
        if job.project in held:
            held[job.project] += sum(r.gpus for r in job.replicas)
            if job.gpu_fraction is not None:
                shared.update((job.project, r.node, r.gpu) for r in job.replicas if r.gpu is not None)
    for project, _node, _gpu in shared:
        held[project] += 1
    return {p.name: max(held[p.name] - p.deserved_gpus, 0) for p in state.projects}


def normalised(usage: float, capacity: int, half_life: float) -> float:
    """``u``: usage as a fraction of what ``capacity`` GPUs held above quota for ever would accumulate."""
    if half_life <= 0 or capacity <= 0:
        return 0.0
    return usage * math.log(2) / (capacity * half_life)


def factor(u: float, s: Fraction | int) -> Fraction:
    """The weight factor for normalised usage ``u`` and weight share ``s`` (0 < s <= 1)."""
    steps = math.floor(STEPS * (1.0 - u / (2.0 * float(s))) + 1e-9)
    return Fraction(min(max(steps, 1), STEPS), STEPS)


def adjusted(weights: Mapping[K, Fraction | int], usage: Mapping[K, float]) -> dict[K, Fraction | int]:
    """R14 weights of one division's competitors (``weights``: name -> weight > 0; ``usage``: name -> u)."""
    total = sum(weights.values())
    out: dict[K, Fraction | int] = {}
    for name, w in weights.items():
        u = usage.get(name, 0.0)
        if u <= 0:
            out[name] = w
            continue
        f = factor(u, Fraction(w) / total)
        out[name] = w if f == 1 else w * f
    return out
