"""Event-driven replay of a workload through the real ``plan_cycle`` on a virtual clock.

Contract: ``Simulator(...).run()`` returns a ``RunResult``; the same inputs always give the same result (no
wall clock, no randomness here). The policy is the core's: every cycle builds a ``ClusterState`` from the
jobs alive, calls ``scheduler.core.plan_cycle`` and applies the plan with ``scheduler.core.apply_plan``
(decisions take effect instantly; the restart cost is charged as lost progress, see ``progress``).

Clock: the live loop plans every ``cycle_seconds``; the simulator jumps from event to event instead of
ticking. Events are job arrivals, job completions and cycles. A cycle is scheduled at the next multiple of
``cycle_seconds`` after anything changed (arrivals in between are batched, as in the live loop); after a
cycle that changed something, another one follows once the settle time has passed (R7: a job just resized
may grow then), and one when the longer settle time of R18 ends (every job carries the resize cost the
replay charges, ``restart_seconds``, as its ``Job.resize_cost_seconds``); when a project falls below its guarantee, one follows after the grace period (R2). No
other cycle runs: nothing ticks. ``max_busy_cycles`` consecutive cycles that all change something with
no arrival or completion in between stop the follow-ups and are reported as a ping-pong warning.

Checkpoints (R5's least-work-lost tie-break, ``config.least_work_lost``): a running job saves one every
``checkpoint_seconds`` of its segment (``progress``); at each planned cycle the jobs whose checkpoint came
due since carry it in the snapshot (``Job.checkpointed_at``), as a live job reports it. A checkpoint alone
does not bring a cycle: it changes only which of equal victims a claim takes, not whether one is taken
(an assumption of the cycle skipping below, as for the other inputs).

Fair share over time (R14, ``config.usage_half_life``): each project's usage above quota accrues exactly
between events (allocations change only at events) and enters every cycle's snapshot; a cycle with nothing
new is skipped only if the fair shares that usage gives are also unchanged.
"""

from __future__ import annotations

import bisect
import gc
import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from scheduler.core import (
    Action,
    ClusterState,
    Config,
    Job,
    Node,
    Plan,
    Project,
    apply_plan,
    plan_cycle,
    resize_cost,
)
from scheduler.core.fairshare import fair_shares
from scheduler.core.invariants import check_invariants
from scheduler.core.usage import accrue
from scheduler.simulator.metrics import ProjectSample, Recorder
from scheduler.simulator.progress import Run
from scheduler.simulator.workload import JobSpec

FINISH, ARRIVE, CYCLE = 0, 1, 2  # order of events at the same instant

Key = tuple[str, str]
ProgressHook = Callable[[float, int], None]


@dataclass(frozen=True, slots=True)
class SimOptions:
    """Shell knobs of the replay (the policy's knobs live in ``scheduler.core.Config``)."""

    cycle_seconds: float = 10.0
    restart_seconds: float = 30.0
    checkpoint_seconds: float = 1800.0
    efficiency: float = 0.9
    grace_seconds: float = 60.0
    check_invariants: bool = False
    max_busy_cycles: int = 200
    skip_unchanged: bool = True


class InvariantViolation(AssertionError):
    """``check_invariants`` reported a violation during a simulated cycle."""


@dataclass(slots=True)
class Counters:
    cycles: int = 0
    skipped_cycles: int = 0
    busy_cycles: int = 0
    resizes: int = 0
    evictions: int = 0
    churn: int = 0
    restart_loss: float = 0.0
    eviction_loss: float = 0.0
    multi_node_starts: int = 0  # gangs started on more than one node (R17)
    one_domain_starts: int = 0  # ... of which all inside one topology domain
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one replay produced; ``jobs`` holds every job's run record (finished or not)."""

    runs: tuple[Run, ...]
    recorder: Recorder
    counters: Counters
    end_time: float
    domains: bool = False  # the nodes carry topology domains (R17)


class Simulator:
    """One replay of ``specs`` on ``nodes`` for ``projects`` under ``config``."""

    def __init__(
        self,
        nodes: Sequence[Node],
        projects: Sequence[Project],
        specs: Sequence[JobSpec],
        config: Config,
        options: SimOptions | None = None,
    ) -> None:
        self.nodes, self.projects = tuple(nodes), tuple(projects)
        self.opts = options or SimOptions()
        # the core plans again after at least a cycle here (decision 71 weighs that against the settle time)
        self.config = replace(config, next_plan_seconds=self.opts.cycle_seconds)
        self.capacity = sum(n.gpus for n in nodes if n.schedulable)
        self.domain_of = {n.name: n.domain for n in nodes}  # R17
        self.deserved = {p.name: p.deserved_gpus for p in projects}
        weights = {p.name: p.over_quota_weight for p in projects}
        self.recorder = Recorder.for_projects(self.capacity, self.deserved, weights)
        self.counters = Counters()
        self.runs = {s.key: Run(s) for s in specs}
        self.jobs: dict[Key, Job] = {}
        self.by_project: dict[str, dict[Key, None]] = {p: {} for p in self.deserved}
        self.alloc = dict.fromkeys(self.deserved, 0)
        self.demand = dict.fromkeys(self.deserved, 0)
        self.fair = dict(self.deserved)
        self.held: dict[str, int] = {}
        self.usage = dict.fromkeys(self.deserved, 0.0)  # R14: decayed GPU-seconds above quota
        self.usage_at = 0.0
        self.shares_seen: tuple[object, ...] = ()  # the fair shares the last planned cycle used
        self.events: list[tuple[float, int, int, Key | None, int]] = []
        self.seq = 0
        self.wanted: set[float] = set()
        self.now = 0.0
        # cycle skipping: the core's input is (jobs, settling jobs); unchanged input gives the same empty plan
        self.changed = True  # an arrival, a completion or an applied plan since the last cycle planned
        self.last_cycle = -math.inf
        self.settle_ends: list[float] = []  # when jobs resized by applied plans stop settling (ascending)
        self.settle_cycles: set[float] = set()  # cycles wanted only for R18's longer settle times
        # R5's least-work-lost: (when, seq, job, run version) of each running job's next periodic checkpoint
        self.checkpoints: list[tuple[float, int, Key, int]] = []
        for spec in specs:
            self._push(spec.submit, ARRIVE, spec.key, 0)

    def _push(self, when: float, kind: int, key: Key | None, version: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, kind, self.seq, key, version))

    def _want_cycle(self, after: float) -> None:
        step = self.opts.cycle_seconds
        when = math.ceil(after / step - 1e-9) * step
        if when not in self.wanted:
            self.wanted.add(when)
            self._push(when, CYCLE, None, 0)

    def run(self, on_progress: ProgressHook | None = None, every: int = 500) -> RunResult:
        """Replay until no event is left; ``on_progress(now, finished_jobs)`` every ``every`` batches."""
        # The workload (specs, runs, events) lives as long as the replay: moved out of the cyclic garbage
        # collector's sight, it is not walked again at every full collection.
        gc.collect()
        gc.freeze()
        try:
            return self._run(on_progress, every)
        finally:
            gc.unfreeze()

    def _run(self, on_progress: ProgressHook | None, every: int) -> RunResult:
        finished, batches = 0, 0
        while self._drop_stale():
            self.now = self.events[0][0]
            self._accrue(self.now)
            finished += self._batch(self.now)
            self._observe()
            batches += 1
            if on_progress is not None and batches % every == 0:
                on_progress(self.now, finished)
        self.recorder.close(self.now)
        if on_progress is not None:
            on_progress(self.now, finished)
        domains = any(d is not None for d in self.domain_of.values())
        return RunResult(tuple(self.runs.values()), self.recorder, self.counters, self.now, domains)

    def _drop_stale(self) -> bool:
        """Pop superseded events at the head (so the clock never moves for them); False when none is left."""
        while self.events:
            when, kind, _, key, version = self.events[0]
            stale = kind == FINISH and key is not None and self.runs[key].version != version
            # R18: a cycle only for a settle time's end, with no job left, would change nothing (and would
            # only stretch the replay's end)
            idle = kind == CYCLE and when in self.settle_cycles and not self.jobs
            if not (stale or idle):
                return True
            heapq.heappop(self.events)
            if idle:
                self.wanted.discard(when)
                self.settle_cycles.discard(when)
        return False

    def _accrue(self, now: float) -> None:
        """R14: usage above quota over ``[usage_at, now)``, during which allocations did not change."""
        half_life = self.config.usage_half_life
        if half_life <= 0 or now <= self.usage_at:
            return
        dt = now - self.usage_at
        for p, q in self.deserved.items():
            self.usage[p] = accrue(self.usage[p], max(self.alloc[p] - q, 0), dt, half_life)
        self.usage_at = now

    def _batch(self, now: float) -> int:
        """Handle every event at ``now``; returns how many jobs finished."""
        finished, cycle_due = 0, False
        while self.events and self.events[0][0] <= now:
            _, kind, _, key, version = heapq.heappop(self.events)
            if kind == CYCLE:
                cycle_due = True
                self.wanted.discard(now)
            elif key is not None and kind == ARRIVE:
                self._arrive(self.runs[key].spec)
            elif key is not None and self._finish(key, version, now):
                finished += 1
        if cycle_due:
            self._cycle(now)
        return finished

    def _arrive(self, spec: JobSpec) -> None:
        job = Job(
            spec.project,
            spec.name,
            spec.min_replicas,
            spec.max_replicas,
            gpus_per_replica=spec.gpus_per_replica,
            interactive=spec.interactive,
            submitted_at=spec.submit,
            # R18: the core weighs each resize against what the replay charges for it, as the service does
            # with its measured estimate
            resize_cost_seconds=self.opts.restart_seconds,
        )
        self.jobs[spec.key] = job
        self.by_project[spec.project][spec.key] = None
        self.demand[spec.project] += job.demand_gpus
        self.counters.busy_cycles = 0
        self.changed = True
        self._want_cycle(self.now)

    def _finish(self, key: Key, version: int, now: float) -> bool:
        run = self.runs[key]
        if run.version != version or run.finished_at is not None:
            return False
        self.counters.restart_loss += run.restart_loss(now)
        run.finished_at = now
        job = self.jobs.pop(key)
        del self.by_project[job.project][key]
        self.demand[job.project] -= job.demand_gpus
        self.alloc[job.project] -= run.gpus
        run.gpus = 0
        self.counters.busy_cycles = 0
        self.changed = True
        self._want_cycle(now)
        return True

    def _unchanged_since_last_cycle(self, now: float) -> bool:
        """Whether the core would see what it saw at the last cycle, whose plan was empty: no arrival, no
        completion, no plan applied since, and no job stopped settling in between (``now`` enters
        ``plan_cycle`` only through which jobs are settling). ``plan_cycle`` is pure, so it would return the same
        empty plan: the cycle is skipped."""
        ends = self.settle_ends
        while ends and ends[0] <= self.last_cycle:
            ends.pop(0)
        return not self.changed and not (ends and ends[0] <= now)

    def _cycle(self, now: float) -> None:
        unchanged = self.opts.skip_unchanged and self._unchanged_since_last_cycle(now)
        if unchanged and self.config.usage_half_life <= 0:
            self.counters.skipped_cycles += 1
            return
        self._checkpoints(now)
        state = ClusterState(self.nodes, self._projects(), tuple(self.jobs.values()))
        if self.config.usage_half_life > 0:
            shares = fair_shares(state, self.config)
            seen = (shares.project, shares.department)
            if unchanged and seen == self.shares_seen:
                self.counters.skipped_cycles += 1
                return
            self.shares_seen = seen
        plan = plan_cycle(state, self.config, now=now, explain_waiting=False)  # notes (R13) are not read here
        self.counters.cycles += 1
        self.changed, self.last_cycle = False, now
        self.fair = {s.project: s.fair_share_gpus for s in plan.shares} or self.fair
        self.held = {}  # GPUs the plan holds back for each project (R2 counts them as given: see metrics)
        for r in plan.reservations:
            self.held[r.project] = self.held.get(r.project, 0) + r.gpus
        if self.opts.check_invariants:
            problems = check_invariants(state, plan, self.config, now=now)
            if problems:
                raise InvariantViolation(f"t={now:.0f}s: " + "; ".join(problems))
        if not plan.decisions:
            return
        self._apply(plan, now)
        self.changed = True
        settled = now + resize_cost.settle(self.opts.restart_seconds, self.config)  # R18: every job's cost
        bisect.insort(self.settle_ends, now + self.config.settle_seconds)
        if settled > now + self.config.settle_seconds:
            bisect.insort(self.settle_ends, settled)
            when = math.ceil(settled / self.opts.cycle_seconds - 1e-9) * self.opts.cycle_seconds
            if when not in self.wanted:
                self.settle_cycles.add(when)
            self._want_cycle(settled)
        self.counters.busy_cycles += 1
        if self.counters.busy_cycles < self.opts.max_busy_cycles:
            self._want_cycle(now + self.config.settle_seconds)
        elif self.counters.busy_cycles == self.opts.max_busy_cycles:
            self.counters.warnings.append(
                f"t={now:.0f}s: {self.counters.busy_cycles} consecutive cycles changed something with no "
                "arrival or completion in between (ping-pong?); follow-up cycles stopped until the next event"
            )

    def _checkpoints(self, now: float) -> None:
        """The jobs whose periodic checkpoint came due by ``now`` report it (with the tie-break on)."""
        heap, every = self.checkpoints, self.opts.checkpoint_seconds
        while heap and heap[0][0] <= now:
            _, _, key, version = heapq.heappop(heap)
            run = self.runs[key]
            if run.version != version or run.finished_at is not None:
                continue  # resized, evicted or finished since: its new segment has its own
            last = run.last_checkpoint(now, every)
            self.jobs[key] = replace(self.jobs[key], checkpointed_at=last)
            self.seq += 1
            heapq.heappush(heap, (last + every, self.seq, key, version))

    def _projects(self) -> tuple[Project, ...]:
        if self.config.usage_half_life <= 0:
            return self.projects
        return tuple(replace(p, usage_gpu_seconds=self.usage[p.name]) for p in self.projects)

    def _apply(self, plan: Plan, now: float) -> None:
        """``apply_plan`` on the jobs the plan touches (it changes no other job: decisions are per job, and no
        replica is ever left releasing here, since releases are instant)."""
        touched = list(dict.fromkeys((d.project, d.job) for d in plan.decisions))
        self._count_domains(plan)
        before = ClusterState(self.nodes, self.projects, tuple(self.jobs[k] for k in touched))
        for new in apply_plan(before, plan, now=now).jobs:
            self.jobs[new.key] = new
        for key in touched:
            self._resize(self.runs[key], sum(r.gpus for r in self.jobs[key].active), now)

    def _count_domains(self, plan: Plan) -> None:
        """R17: how many gangs started on several nodes, and how many of those inside one domain."""
        for d in plan.decisions:
            if d.action != Action.START:
                continue
            nodes = {p.node for p in d.replicas}
            if len(nodes) > 1:
                self.counters.multi_node_starts += 1
                domains = {self.domain_of.get(n) for n in nodes}
                self.counters.one_domain_starts += len(domains) == 1 and None not in domains

    def _resize(self, run: Run, gpus: int, now: float) -> None:
        old = run.gpus
        if old == gpus:
            return
        opts, project = self.opts, run.spec.project
        self.alloc[project] += gpus - old
        if old > 0:
            self.counters.restart_loss += run.restart_loss(now)
            self._note_churn(run, gpus, now)
        if old > 0 and gpus == 0:
            base, wasted = run.rollback(now, opts.checkpoint_seconds)
            self.counters.evictions += 1
            self.counters.eviction_loss += wasted
        else:
            base = run.progress(now)
            self.counters.resizes += old > 0
        delay = opts.restart_seconds if (gpus > 0 and run.first_start is not None) else 0.0
        run.begin(now, gpus, base, delay, opts.efficiency)
        if gpus > 0:
            self._push(run.finish_time(), FINISH, run.spec.key, run.version)
            if self.config.least_work_lost:
                self.seq += 1
                heapq.heappush(
                    self.checkpoints, (now + opts.checkpoint_seconds, self.seq, run.spec.key, run.version)
                )

    def _note_churn(self, run: Run, gpus: int, now: float) -> None:
        """A job losing GPUs before its last restart even finished did no work with them: count it."""
        if gpus >= run.gpus or now - run.seg_start >= run.seg_delay:
            return
        self.counters.churn += 1
        if self.counters.churn == 1:
            self.counters.warnings.append(
                f"t={now:.0f}s: {run.spec.project}/{run.spec.name} lost GPUs {now - run.seg_start:.0f}s "
                "after a restart that had not finished (churn; counted in the 'churn' column)"
            )

    def _observe(self) -> None:
        sample = {}
        for p, q in self.deserved.items():
            held = self.held.get(p, 0)
            running = self._starving(p, self.alloc[p])
            starving = running and (not held or self._starving(p, self.alloc[p] + held))
            sample[p] = ProjectSample(
                self.alloc[p], self.demand[p], q, self.fair.get(p, q), starving, held, running
            )
        for _ in self.recorder.observe(self.now, sample):
            self._want_cycle(self.now + self.opts.grace_seconds)

    def _starving(self, project: str, has: int) -> bool:
        """R2 as measured: ``has`` below min(deserved, demand) with a job that could take a step within it."""
        room = min(self.deserved[project], self.demand[project]) - has
        if room <= 0:
            return False
        runs = self.runs
        for key in self.by_project[project]:
            job = self.jobs[key]
            active = runs[key].gpus // job.gpus_per_replica  # no replica is left releasing: see ``_apply``
            step = job.gpus_per_replica * (job.min_replicas if active == 0 else 1)
            if (active == 0 or active < job.max_replicas) and step <= room:
                return True
        return False
