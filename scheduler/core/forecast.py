"""When will a waiting job start: the snapshot run forward through ``plan_cycle`` on a virtual clock.

Contract: pure. ``forecast(state, config, now=..., left=...)`` returns an ``Eta`` for every waiting job (pending)
and every running elastic job below ``max_replicas`` (or for ``targets`` only): when it starts (or grows), to how
many replicas, and which job's end frees the GPUs. ``left[key]`` is an ``Estimate`` of the seconds each job
still runs (for a pending job: its whole run once started); a job missing from ``left`` never ends.

The forward run is what the live loop would do if nothing new arrived: cycle at ``now`` on the snapshot,
apply the plan as a perfect executor (releases are instant), follow up one settle time later while plans
change something, else jump to the cycle after the next estimated end, where that job leaves the cluster.
Far ahead, cycles thin out: the next cycle comes no sooner than ``Horizon.step`` x the time already
forecast (2 %), and every job that ends by then leaves at that cycle, so a busy cluster costs a few hundred
cycles for a week, not one per job that ends. What starts at such a cycle is dated back to the last of those
ends (on the cycle grid): it would have started then; one that could have started at an earlier end of the
same stretch is late by at most the stretch (2 % of how far ahead it is).
A job that is resized keeps its work: its time left scales by old/new GPUs. The run stops when every target
has started, after ``Horizon.cycles`` cycles, or ``Horizon.seconds`` past ``now``.

It runs twice: once with every job's median time left (``start_p50``), once with the upper guesses
(``start_p90``, never earlier than ``start_p50``). ``None`` means not within the horizon (or, for a running
job, that it is expected to end before it grows); its ``size`` is then the size the job waits for
(``max_replicas`` for a running job, ``min_replicas`` for a pending one). A cycle that changes nothing is
followed by the next estimated end or the end of a job's settle time (R7), whichever comes first: a job
just resized may grow once it settled.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from scheduler.core import resize_cost
from scheduler.core.cycle import apply_plan, finish_releases, plan_cycle
from scheduler.core.estimate import Estimate, Source
from scheduler.core.model import ClusterState, Config, Job, Replica
from scheduler.core.plan import Plan

Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Horizon:
    """How far the forward run looks: ``seconds`` of virtual time, ``cycles`` plans at most; cycles at least
    ``step`` x the time already forecast apart."""

    seconds: float = 7 * 86400.0
    cycles: int = 400
    cycle_seconds: float = 10.0
    step: float = 0.02


@dataclass(frozen=True, slots=True)
class Eta:
    """When a job starts (or, ``grows``, a running job grows), on the shell's clock, and to ``size`` replicas.

    ``after`` is the job whose estimated end frees the GPUs (None: they are free, or being freed, now);
    ``source`` says what that end is estimated from.
    """

    start_p50: float | None
    start_p90: float | None
    size: int
    grows: bool
    after: Key | None = None
    source: Source | None = None


@dataclass(frozen=True, slots=True)
class _Seen:
    at: float
    size: int
    grows: bool
    after: Key | None


def waiting(job: Job) -> bool:
    """A job the forecast answers for: pending, or running elastic below ``max_replicas``."""
    active = sum(1 for r in job.replicas if not r.releasing)
    return active == 0 or active < job.max_replicas


def forecast(
    state: ClusterState,
    config: Config,
    *,
    now: float,
    left: Mapping[Key, Estimate],
    targets: Collection[Key] | None = None,
    horizon: Horizon | None = None,
) -> dict[Key, Eta]:
    """The ``Eta`` of every waiting job in ``state`` (of ``targets`` only, when given)."""
    keys = {j.key for j in state.jobs if waiting(j)}
    wanted = keys if targets is None else keys & set(targets)
    if not wanted:
        return {}
    h = horizon or Horizon()
    median = _Forward(state, config, now, {k: e.p50 for k, e in left.items()}, h).until(wanted)
    # the upper run only bounds what the median run saw start: none of them, no upper run
    upper = (
        _Forward(state, config, now, {k: e.p90 for k, e in left.items()}, h).until(wanted) if median else {}
    )
    jobs = {j.key: j for j in state.jobs if j.key in wanted}
    out = {}
    for key in sorted(wanted):
        a, b = median.get(key), upper.get(key)
        if a is None:
            out[key] = _never(jobs[key])
            continue
        p90 = None if b is None else max(a.at, b.at)
        source = left[a.after].source if a.after is not None else None
        out[key] = Eta(a.at, p90, a.size, a.grows, a.after, source)
    return out


def _never(job: Job) -> Eta:
    """No time within the horizon: a running job would grow to ``max_replicas``, a pending one start at
    ``min_replicas`` (the sizes it waits for)."""
    running = any(not r.releasing for r in job.replicas)
    return Eta(None, None, job.max_replicas if running else job.min_replicas, running)


class _Forward:
    """One forward run with fixed times left; ``until(wanted)`` returns what it saw of those jobs."""

    def __init__(
        self, state: ClusterState, config: Config, now: float, seconds: Mapping[Key, float], h: Horizon
    ) -> None:
        self.state, self.config, self.now, self.h = state, config, now, h
        self.left = dict(seconds)  # seconds left at the job's current size (pending: its whole run)
        self.gpus = {j.key: _gpus(r for r in j.replicas if not r.releasing) for j in state.jobs}
        self.since: dict[Key, float] = {}
        self.evicted_at: dict[Key, int] = {}  # GPUs an evicted job's time left was counted at
        self.end_at: dict[Key, float] = {}
        self.ends: list[tuple[float, Key]] = []
        self.freed: Key | None = None
        self.freed_at: float | None = None  # the last end processed since the previous cycle
        self.seen: dict[Key, _Seen] = {}
        for key, gpus in self.gpus.items():
            if gpus > 0:
                self._schedule_end(key, now)

    def _schedule_end(self, key: Key, t: float) -> None:
        self.since[key] = t
        end = t + self.left.get(key, math.inf)
        self.end_at[key] = end
        if end < math.inf:
            heapq.heappush(self.ends, (end, key))

    def until(self, wanted: set[Key]) -> dict[Key, _Seen]:
        t, cycles, stop = self.now, 0, self.now + self.h.seconds
        follow = max(self.h.cycle_seconds, self.config.settle_seconds)
        while cycles < self.h.cycles and t <= stop and not wanted <= self.seen.keys():
            plan = plan_cycle(self.state, self.config, now=t, explain_waiting=False)
            cycles += 1
            stamp = t if self.freed_at is None else min(t, self._on_grid(self.freed_at))
            self.freed_at = None
            nxt: float | None
            if plan.decisions:
                self._apply(plan, t, stamp, wanted)
                nxt = self._on_grid(t + max(follow, self._stride(t)))
            elif cycles == 1 and plan.reservations:  # GPUs already being released are free by the next cycle
                self.state = finish_releases(self.state)
                nxt = self._on_grid(t + self.h.cycle_seconds)
            else:
                end = _earliest(self._next_end(), self._settled(t))
                nxt = None if end is None else self._on_grid(max(end, t + self._stride(t)))
            if nxt is None:
                break
            t = nxt
            self._finish_until(t)
        return self.seen

    def _settled(self, t: float) -> float | None:
        """When the next job resized before ``t`` stops settling (R7; R18: longer for a costly resize): it may
        grow or shrink from then."""
        settle, state = self.config.settle_seconds, self.state
        projects = {p.name: p for p in state.projects}
        costs = resize_cost.costs(state.jobs, projects, {d.name: d for d in state.departments}, self.config)
        longer = resize_cost.settle_ends(state.jobs, costs, self.config) if costs else {}
        ends = [
            longer.get(j.key, j.last_resized_at + settle)
            for j in state.jobs
            if j.last_resized_at is not None and longer.get(j.key, j.last_resized_at + settle) > t
        ]
        return min(ends, default=None)

    def _stride(self, t: float) -> float:
        return (t - self.now) * self.h.step

    def _on_grid(self, t: float) -> float:
        step = self.h.cycle_seconds
        return self.now + math.ceil((t - self.now) / step - 1e-9) * step

    def _next_end(self) -> float | None:
        while self.ends and self.end_at.get(self.ends[0][1]) != self.ends[0][0]:
            heapq.heappop(self.ends)  # superseded by a resize
        return self.ends[0][0] if self.ends else None

    def _finish_until(self, t: float) -> None:
        done: set[Key] = set()
        while self.ends and self.ends[0][0] <= t:
            end, key = heapq.heappop(self.ends)
            if self.end_at.get(key) == end:
                done.add(key)
                del self.end_at[key]
                self.freed, self.freed_at = key, end
        if done:
            jobs = tuple(j for j in self.state.jobs if j.key not in done)
            self.state = ClusterState(self.state.nodes, self.state.projects, jobs, self.state.departments)

    def _apply(self, plan: Plan, t: float, stamp: float, wanted: set[Key]) -> None:
        """Apply ``plan`` (made at ``t``); what starts or grows is dated ``stamp`` (see the module docstring)."""
        self.state = apply_plan(self.state, plan, now=t)
        decided = dict.fromkeys((d.project, d.job) for d in plan.decisions)
        jobs = {j.key: j for j in self.state.jobs if j.key in decided}
        for key in decided:
            job = jobs[key]
            old, new = self.gpus.get(key, 0), _gpus(job.replicas)
            when = stamp if new > old else t
            self._resize(key, old, new, when)
            if key in wanted and key not in self.seen and new > old:
                self.seen[key] = _Seen(when, len(job.replicas), old > 0, self.freed)

    def _resize(self, key: Key, old: int, new: int, t: float) -> None:
        """The job keeps its work: seconds left at ``old`` GPUs become seconds left at ``new``."""
        self.gpus[key] = new
        left = self.left.get(key, math.inf)
        if old > 0:
            left = max(0.0, left - (t - self.since[key]))
            self.end_at.pop(key, None)
        else:
            old = self.evicted_at.pop(key, new)
        if new > 0:
            left = left * old / new
        else:
            self.evicted_at[key] = old
        self.left[key] = left
        if new > 0:
            self._schedule_end(key, t)


def _gpus(replicas: Iterable[Replica]) -> int:
    """What replicas hold for the run forward: their GPUs, a fractional replica (R20) counting as 1 (it holds
    no whole GPU, yet it runs, ends and frees its share like any replica)."""
    return sum(r.gpus or (1 if r.share is not None else 0) for r in replicas)


def _earliest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)
