"""Trace input: the Philly job table, team sizes, slices of it, and a seeded synthetic generator.

Contract: every loader returns ``TraceJob`` records sorted by ``(submit, name)`` with ``submit`` in seconds
from the first submission (so a trace always starts at 0). Names are ``j00000``.. in that order, hence stable
for a given file. Randomness (slice sampling, synthetic arrivals) comes only from the ``random.Random``
passed in, so the same file and seed give the same jobs.

``philly.csv`` columns: ``timestamp,duration,num_gpus,gpu_time,cluster`` (``cluster`` is the team).
``philly_vc.csv`` columns: ``vc,node num`` (size of each team's virtual cluster in 8-GPU nodes).
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One submitted job: ``gpus`` GPUs for ``duration`` seconds at that size, from team ``team``."""

    name: str
    team: str
    submit: float
    duration: float
    gpus: int


def _renumber(jobs: Iterable[TraceJob]) -> list[TraceJob]:
    ordered = sorted(jobs, key=lambda j: (j.submit, j.name))
    if not ordered:
        return []
    start = ordered[0].submit
    width = max(5, len(str(len(ordered))))
    return [replace(j, name=f"j{i:0{width}d}", submit=j.submit - start) for i, j in enumerate(ordered)]


def _parse_time(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def load_philly(path: str | Path) -> list[TraceJob]:
    """Read a Philly-style job table; rows with no GPUs or no run time are skipped."""
    jobs: list[TraceJob] = []
    with Path(path).open(newline="") as handle:
        for i, row in enumerate(csv.DictReader(handle)):
            gpus, duration = int(row["num_gpus"]), float(row["duration"])
            if gpus <= 0 or duration <= 0:
                continue
            team = row["cluster"].strip()
            jobs.append(TraceJob(f"r{i:06d}", team, _parse_time(row["timestamp"]), duration, gpus))
    return _renumber(jobs)


def load_vc_sizes(path: str | Path) -> dict[str, int]:
    """Read ``vc,node num``: the size of each team's virtual cluster in nodes."""
    with Path(path).open(newline="") as handle:
        return {row["vc"].strip(): int(row["node num"]) for row in csv.DictReader(handle)}


def fold_teams(jobs: Sequence[TraceJob], known: Iterable[str], into: str = "other") -> list[TraceJob]:
    """Rename every team not in ``known`` to ``into`` (the trace has teams with no published size)."""
    keep = set(known)
    return [j if j.team in keep else replace(j, team=into) for j in jobs]


def busiest_window(jobs: Sequence[TraceJob], hours: float) -> tuple[float, float]:
    """The ``hours``-long window (starting at a submission) holding the most submissions; earliest on ties."""
    span = hours * 3600.0
    times = [j.submit for j in jobs]
    best, best_start, hi = -1, 0.0, 0
    for lo, start in enumerate(times):
        while hi < len(times) and times[hi] < start + span:
            hi += 1
        if hi - lo > best:
            best, best_start = hi - lo, start
    return best_start, best_start + span


def pollux_slice(
    jobs: Sequence[TraceJob], rng: random.Random, count: int = 160, hours: float = 8.0
) -> list[TraceJob]:
    """Sample ``count`` jobs from the busiest ``hours`` window, as the Pollux and Sia workloads do."""
    lo, hi = busiest_window(jobs, hours)
    window = [j for j in jobs if lo <= j.submit < hi]
    picked = rng.sample(window, min(count, len(window)))
    return _renumber(picked)


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    """What-if workload: Poisson arrivals, a size mix, log-normal run times, teams weighted 1/rank."""

    jobs: int = 500
    arrivals_per_hour: float = 60.0
    teams: int = 4
    size_mix: tuple[tuple[int, float], ...] = ((1, 0.7), (2, 0.1), (4, 0.1), (8, 0.07), (16, 0.03))
    median_duration: float = 1800.0
    duration_sigma: float = 1.5


def parse_size_mix(text: str) -> tuple[tuple[int, float], ...]:
    """``"1:0.7,8:0.3"`` -> ((1, 0.7), (8, 0.3))."""
    pairs = [part.split(":") for part in text.split(",") if part.strip()]
    return tuple((int(g), float(w)) for g, w in pairs)


def synthetic(spec: SyntheticSpec, rng: random.Random) -> list[TraceJob]:
    """Generate ``spec.jobs`` jobs; the same spec and seed always give the same list."""
    sizes = [g for g, _ in spec.size_mix]
    weights = [w for _, w in spec.size_mix]
    teams = [f"team{i}" for i in range(spec.teams)]
    team_weights = [1.0 / (i + 1) for i in range(spec.teams)]
    clock, out = 0.0, []
    for i in range(spec.jobs):
        clock += rng.expovariate(spec.arrivals_per_hour / 3600.0)
        duration = max(60.0, rng.lognormvariate(math.log(spec.median_duration), spec.duration_sigma))
        team = rng.choices(teams, team_weights)[0]
        out.append(TraceJob(f"s{i:06d}", team, clock, round(duration), rng.choices(sizes, weights)[0]))
    return _renumber(out)
