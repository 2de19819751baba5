"""Metrics of one simulated run, integrated over the virtual clock.

Contract: the simulator calls ``Recorder.observe(now, sample)`` after every batch of events; the previous
sample is held constant over ``[previous now, now)`` (allocations change only at events, so the integrals
are exact). ``Recorder.summary()`` returns plain numbers. Definitions (also printed in every report):

- utilisation: allocated GPU-time / (cluster GPUs x makespan) (the report also gives it over the arrival
  window, ``[0, last submission)``, which does not favour a policy whose long jobs end later);
  demand served: allocated / min(cluster, demand).
- guarantee: ``g = min(deserved, demand)``;
  honoured = integral of min(alloc, g) / integral of g (time with g > 0).
- below guarantee (R2): the project has less than g *and* one of its jobs could take a step (start its
  minimum gang, or grow one replica) without lifting it above g. R2 promises that owed GPUs arrive within
  grace + one cycle, so what is measured is how long owed GPUs wait, oldest first: each time the project is
  below and g rises above every level still owed, the level g is owed from that moment; it is met once the
  project has ``min(level, g)`` GPUs (or is no longer below). ``longest_below`` is the longest such wait,
  where what the project *has* counts the GPUs the last plan holds for it (a start waiting for released GPUs,
  a drain for its own oldest gang: R2's invariant judges a plan the same way); ``longest_below_running``
  counts only the GPUs its jobs run on. A project that stays below for hours because new jobs keep arriving,
  each served within a cycle or two, waits a cycle or two; one that never gets the GPUs it was owed at some
  moment waits until it does.
- borrowed: integral of max(0, alloc - deserved); lent: a project's unused quota times the fraction of all
  unused quota that borrowers used at that moment.
- fairness: Jain's index of alloc / fair share over projects with demand and a fair share (1 = exact),
  time-weighted over time when some project had demand.
- fairness over time (R14): for each day (``[k x 86400, (k+1) x 86400)`` of the virtual clock), Jain's index
  of each project's over-quota GPU-hours that day divided by its over-quota weight, over the projects with
  a weight that wanted GPUs beyond their quota at some moment of that day (demand above quota); the mean
  over the days with at least two such projects (1 = over-quota GPU-hours exactly in proportion to weight).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

DAY = 86400.0


@dataclass(frozen=True, slots=True)
class ProjectSample:
    """``starving``: below with GPUs held for it counted as its (``held``); ``starving_running``: below by the
    GPUs it runs on only (``None``: the same as ``starving``, nothing being held)."""

    alloc: int
    demand: int
    deserved: int
    fair: int
    starving: bool
    held: int = 0
    starving_running: bool | None = None


@dataclass(slots=True)
class ProjectTotals:
    """Integrals (GPU-seconds or seconds) for one project."""

    deserved: int
    weight: float = 1.0
    alloc: float = 0.0
    guaranteed: float = 0.0
    honoured: float = 0.0
    borrowed: float = 0.0
    lent: float = 0.0
    demand_time: float = 0.0
    below_since: float | None = None
    longest_below: float = 0.0
    longest_below_running: float = 0.0
    below_episodes: int = 0
    # (since, level): guarantee levels owed and not yet met, oldest (and lowest) first
    owed: list[tuple[float, int]] = field(default_factory=list)
    owed_running: list[tuple[float, int]] = field(default_factory=list)
    # R14: per day, GPU-seconds above quota; and the days it wanted GPUs beyond its quota
    daily_borrowed: dict[int, float] = field(default_factory=dict)
    days_wanting: set[int] = field(default_factory=set)


@dataclass(slots=True)
class Recorder:
    """Accumulates integrals; also keeps a utilisation time series for the plots."""

    capacity: int
    projects: dict[str, ProjectTotals]
    last_time: float = 0.0
    last: dict[str, ProjectSample] = field(default_factory=dict)
    used_time: float = 0.0
    served_time: float = 0.0
    servable_time: float = 0.0
    fairness_time: float = 0.0
    fairness_weight: float = 0.0
    series: list[tuple[float, int, int]] = field(default_factory=list)

    @classmethod
    def for_projects(
        cls, capacity: int, deserved: Mapping[str, int], weights: Mapping[str, float] | None = None
    ) -> Recorder:
        w = weights or {}
        return cls(capacity, {p: ProjectTotals(q, w.get(p, 1.0)) for p, q in sorted(deserved.items())})

    def daily_fairness(self) -> float:
        """The mean over days of Jain's index of over-quota GPU-hours per weight (module docstring)."""
        days = sorted({d for t in self.projects.values() if t.weight > 0 for d in t.days_wanting})
        values = []
        for day in days:
            x = [
                t.daily_borrowed.get(day, 0.0) / t.weight
                for t in self.projects.values()
                if t.weight > 0 and day in t.days_wanting
            ]
            if len(x) < 2:
                continue
            squares = sum(v * v for v in x)
            values.append(sum(x) ** 2 / (len(x) * squares) if squares else 1.0)
        return sum(values) / len(values) if values else math.nan

    def observe(self, now: float, sample: Mapping[str, ProjectSample]) -> list[str]:
        """Close ``[last_time, now)`` with the previous sample; return projects that just fell below (R2)."""
        self._integrate_days(self.last_time, now)
        self._integrate(now - self.last_time)
        fell = [p for p, s in sample.items() if self._track_below(p, s, now)]
        self.last_time, self.last = now, dict(sample)
        used = sum(s.alloc for s in sample.values())
        demand = sum(s.demand for s in sample.values())
        if not self.series or self.series[-1][1:] != (used, demand):
            self.series.append((now, used, demand))
        return fell

    def _track_below(self, project: str, s: ProjectSample | None, now: float) -> bool:
        """Update the owed levels (module docstring); True when the project just fell below its guarantee by
        the GPUs it runs on (the simulator then plans a cycle after the grace period)."""
        tot = self.projects[project]
        if s is None:  # the end of the run: every wait still open ends
            starving = running = False
            alloc = held = guarantee = 0
        else:
            starving, alloc, held, guarantee = s.starving, s.alloc, s.held, min(s.deserved, s.demand)
            running = s.starving if s.starving_running is None else s.starving_running
        tot.longest_below = max(
            tot.longest_below, _owed_levels(tot.owed, starving, alloc + held, guarantee, now)
        )
        tot.longest_below_running = max(
            tot.longest_below_running, _owed_levels(tot.owed_running, running, alloc, guarantee, now)
        )
        if running and tot.below_since is None:
            tot.below_since, tot.below_episodes = now, tot.below_episodes + 1
            return True
        if not running:
            tot.below_since = None
        return False

    def _integrate_days(self, start: float, end: float) -> None:
        """R14's daily figures over ``[start, end)`` with the previous sample, split at day boundaries."""
        if end <= start or not self.last:
            return
        rows = [
            (self.projects[p], max(0, s.alloc - s.deserved), s.demand > s.deserved)
            for p, s in self.last.items()
        ]
        day = int(start // DAY)
        while start < end:
            stop = min(end, (day + 1) * DAY)
            for tot, over, wanting in rows:
                if wanting:
                    tot.days_wanting.add(day)
                if over:
                    tot.daily_borrowed[day] = tot.daily_borrowed.get(day, 0.0) + over * (stop - start)
            start, day = stop, day + 1

    def _integrate(self, dt: float) -> None:
        if dt <= 0 or not self.last:
            return
        samples = self.last
        used = sum(s.alloc for s in samples.values())
        demand = sum(s.demand for s in samples.values())
        self.used_time += used * dt
        servable = min(self.capacity, demand)
        self.servable_time += servable * dt
        self.served_time += min(used, servable) * dt
        borrowed = sum(max(0, s.alloc - s.deserved) for s in samples.values())
        unused = sum(max(0, s.deserved - s.alloc) for s in samples.values())
        lend_ratio = min(1.0, borrowed / unused) if unused else 0.0
        for name, s in samples.items():
            self._integrate_project(self.projects[name], s, dt, lend_ratio)
        self._integrate_fairness(samples.values(), dt)

    @staticmethod
    def _integrate_project(tot: ProjectTotals, s: ProjectSample, dt: float, lend_ratio: float) -> None:
        guarantee = min(s.deserved, s.demand)
        tot.alloc += s.alloc * dt
        tot.guaranteed += guarantee * dt
        tot.honoured += min(s.alloc, guarantee) * dt
        tot.borrowed += max(0, s.alloc - s.deserved) * dt
        tot.lent += max(0, s.deserved - s.alloc) * lend_ratio * dt
        tot.demand_time += dt if s.demand > 0 else 0.0

    def _integrate_fairness(self, samples: Iterable[ProjectSample], dt: float) -> None:
        ratios = [s.alloc / s.fair for s in samples if s.demand > 0 and s.fair > 0]
        if not ratios:
            return
        squares = sum(r * r for r in ratios)
        jain = (sum(ratios) ** 2) / (len(ratios) * squares) if squares else 0.0
        self.fairness_time += jain * dt
        self.fairness_weight += dt

    def close(self, now: float) -> None:
        """End of the run: integrate the last stretch and close open below-guarantee stretches."""
        self._integrate_days(self.last_time, now)
        self._integrate(now - self.last_time)
        self.last_time = now
        for name in self.projects:
            self._track_below(name, None, now)


def _owed_levels(
    owed: list[tuple[float, int]], starving: bool, has: int, guarantee: int, now: float
) -> float:
    """Meet the owed levels the project now has (or all, when it is not below), then owe the guarantee if it
    rose above every level still owed; returns the longest wait that just ended (0 if none)."""
    longest = 0.0
    while owed and (not starving or has >= min(owed[0][1], guarantee)):
        since, _ = owed.pop(0)
        longest = max(longest, now - since)
    if starving and (not owed or guarantee > owed[-1][1]):
        owed.append((now, guarantee))
    return longest
