"""The cycle's scratch copy of the cluster, with undo (KAI's Statement, Kueue's simulate-then-undo).

Contract: a ``Ledger`` is built from a snapshot and its fair shares, mutated only through its methods, and
every mutation can be rolled back to a ``checkpoint()``. Trial changes (a reclaim that may fail) are made here
and kept only when a whole gang fits. Nothing outside the core sees a ledger; ``cycle`` turns what it
records into a ``Plan``.

Glossary: how many GPUs a project has, from the snapshot's count to what its next claim is measured by:

- ``held``: in active replicas in the snapshot (``held_gpus`` per job, ``held_by_project`` per project: the
  plan's "allocated"); fixed for the cycle;
- ``alloc``: in its active replicas as the cycle stands: held on nodes still in the snapshot, less what the
  cycle released, plus what it started (``top_alloc``: the same per top-level entity, ``fairshare.Top``);
- ``claimed``: ``alloc`` plus the GPUs firmly reserved for it this cycle (it starts there next cycle): what
  caps (R11) and R7 measure it by (``top_claimed`` per top-level entity);
- ``committed``: ``claimed`` plus the GPUs held for its drains (which may come to nothing): what its own
  further claims are measured by.

Per node it keeps ``free`` GPUs (neither held nor reserved) and ``avail`` ones: free plus ``rel``, GPUs of
replicas being released that are not yet promised to anyone. What the cycle found cannot work is in ``memo``
(``memo.CycleMemo``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from scheduler.core import jobindex, minruntime, resize_cost
from scheduler.core.carry import Carry, JobChanges
from scheduler.core.fairshare import Shares, Top
from scheduler.core.jobindex import Index, JobKey
from scheduler.core.memo import CycleMemo
from scheduler.core.model import UNLIMITED, ClusterState, Config, Department, Job, Project, Replica
from scheduler.core.placement import NodeIndex, node_sort_key
from scheduler.core.plan import Cause, Placement, Reservation
from scheduler.core.topology import Domains

__all__ = ["JobKey", "Ledger"]


@dataclass(slots=True)
class Release:
    """Replicas of one job told to stop this cycle, and why."""

    replicas: list[Replica]
    reason: str
    cause: Cause
    for_job: JobKey | None
    whole: bool = False


@dataclass(slots=True)
class Ledger:
    state: ClusterState
    shares: Shares
    config: Config
    now: float
    projects: dict[str, Project] = field(default_factory=dict)
    departments: dict[str, Department] = field(default_factory=dict)
    jobs: dict[JobKey, Job] = field(default_factory=dict)
    active: dict[JobKey, list[Replica]] = field(default_factory=dict)
    alloc: dict[str, int] = field(default_factory=dict)
    top_alloc: dict[Top, int] = field(default_factory=dict)
    interactive: dict[str, int] = field(default_factory=dict)
    dept_interactive: dict[str, int] = field(default_factory=dict)
    released: dict[JobKey, Release] = field(default_factory=dict)
    release_log: list[str] = field(default_factory=list)  # the project of each release this cycle, in order
    # jobs with a release caused by a reclaim this cycle, per project (R7: ``preemption.lost_to_reclaim``)
    reclaimed: dict[str, int] = field(default_factory=dict)
    started: dict[JobKey, list[Placement]] = field(default_factory=dict)
    reservations: list[Reservation] = field(default_factory=list)
    reserved: dict[str, int] = field(default_factory=dict)
    draining: dict[str, int] = field(default_factory=dict)  # GPUs held for drains (not firm), per project
    drain_holder: dict[str, JobKey] = field(default_factory=dict)  # the one job each node drains for
    top_reserved: dict[Top, int] = field(default_factory=dict)
    dipped: set[str] = field(default_factory=set)  # nodes where a hold took GPUs still being released
    _undo: list[Callable[[], None]] = field(default_factory=list)
    _capacity: dict[str, int] = field(default_factory=dict)
    _cluster_slots: dict[int, int] = field(default_factory=dict)
    _top: dict[str, Top] = field(default_factory=dict)
    by_project: dict[str, list[JobKey]] = field(default_factory=dict)
    # jobs with an active replica in the snapshot, key order
    running: list[JobKey] = field(default_factory=list)
    young: dict[JobKey, float] = field(default_factory=dict)  # R15: protected jobs, when protection ends
    resize_costs: dict[JobKey, float] = field(default_factory=dict)  # R18: each job's resize cost above 0
    settle_ends: dict[JobKey, float] = field(
        default_factory=dict
    )  # R18: settle times longer than the plain one
    largest_node: int = 0
    memo: CycleMemo = field(default_factory=CycleMemo)  # what this cycle found cannot work
    carry: Carry | None = None  # what the last cycles computed, reused where unchanged (``carry.Carry``)
    stopping: set[JobKey] = field(default_factory=set)
    held_gpus: dict[JobKey, int] = field(default_factory=dict)
    # GPUs each project's active replicas held in the snapshot (nodes gone included): the plan's "allocated"
    held_by_project: dict[str, int] = field(default_factory=dict)
    _rollbacks: int = 0
    # per project, how many changes its jobs' replicas went through this cycle, undos included: the same count
    # means the same replicas (``preemption``'s memory of projects that had no unit to give)
    touched: dict[str, int] = field(default_factory=dict)
    project_names: list[str] = field(default_factory=list)  # every project, sorted
    index: Index = field(init=False)  # the snapshot's jobs indexed (``jobindex``), what it keeps with them
    free: NodeIndex = field(init=False)
    avail: NodeIndex = field(init=False)
    domains: Domains = field(init=False)  # R17
    # the plan made from this ledger holds for the same snapshot at any time before this (``before``)
    holds_until: float = field(default=math.inf, init=False)

    def __post_init__(self) -> None:
        self.projects = {p.name: p for p in self.state.projects}
        self.departments = {d.name: d for d in self.state.departments}
        nodes = {n.name: n for n in self.state.nodes if n.schedulable}
        known = {n.name for n in self.state.nodes}
        self._capacity = {name: n.gpus for name, n in nodes.items()}
        self.largest_node = max(self._capacity.values(), default=0)
        rank = {name: i for i, name in enumerate(sorted(nodes, key=node_sort_key))}
        held_on, rel = self._load(known, nodes)
        self.project_names = sorted(self.alloc)
        free = {n: max(nodes[n].gpus - held_on[n] - rel[n], 0) for n in nodes}
        self.free = NodeIndex(free, rank)
        self.avail = NodeIndex({n: free[n] + rel[n] for n in nodes}, rank)
        self.domains = Domains.build(list(nodes.values()), self.free.nodes, on=self.config.topology)
        self.young = minruntime.young(self.state.jobs, self.projects, self.departments, self.now)
        if self.young:  # R15: a job's protection ends
            self.holds_until = min(self.young.values())
        self.resize_costs = resize_cost.costs(self.state.jobs, self.projects, self.departments, self.config)
        if self.resize_costs:
            self.settle_ends = resize_cost.settle_ends(self.state.jobs, self.resize_costs, self.config)

    def _load(self, known: set[str], schedulable: Iterable[str]) -> tuple[dict[str, int], dict[str, int]]:
        """Index the snapshot's jobs (``jobindex``), or with a carry take the index it kept of the same snapshot
        objects under the same rules, patched where only jobs changed: what the cycle only reads is shared
        with the carry, what it changes is copied. Returns the GPUs held and releasing per schedulable node."""
        state, rigid = self.state, not self.config.elastic

        def build() -> Index:
            return jobindex.build(state.jobs, self.projects, self.top_key, known, schedulable, rigid=rigid)

        carry = self.carry
        if carry is None:
            index = build()
        else:

            def patch(changes: JobChanges, kept: Index) -> Index:
                return jobindex.patch(
                    kept, changes, projects=self.projects, top_key=self.top_key, known=known, rigid=rigid
                )

            inputs = (state.jobs, state.projects, state.nodes, state.departments, self.config)
            index = carry.reuse("ledger", inputs, build, patch)
        self.index = index
        self.jobs, self.by_project, self.running = index.jobs, index.by_project, index.running
        self.stopping, self.held_gpus, self.held_by_project = (
            index.stopping,
            index.held_gpus,
            index.held_by_project,
        )
        if carry is None:  # an index of its own
            self.active, self.alloc, self.interactive = index.active, index.alloc, index.interactive
            self.top_alloc, self.dept_interactive = index.top_alloc, index.dept_interactive
        else:  # the carry's: what a cycle changes is copied
            self.active, self.alloc = dict(index.active), dict(index.alloc)
            self.interactive, self.top_alloc = dict(index.interactive), dict(index.top_alloc)
            self.dept_interactive = dict(index.dept_interactive)
        return index.held_on, index.rel

    # -- reading -------------------------------------------------------------------------------------
    def top_key(self, project: str) -> Top:
        key = self._top.get(project)
        if key is None:
            key = self._top[project] = self.shares.top(self.projects[project])[0]
        return key

    def cluster_slots(self, g: int) -> int:
        """Replicas of ``g`` GPUs the schedulable nodes could hold all empty (each replica on one node)."""
        slots = self._cluster_slots.get(g)
        if slots is None:
            slots = self._cluster_slots[g] = sum(c // g for c in self._capacity.values())
        return slots

    def capacity(self, node: str) -> int:
        """GPUs of a schedulable node (0 for a cordoned or missing one)."""
        return self._capacity.get(node, 0)

    def room(self, job: Job, freed: int = 0, siblings: int = 0) -> int:
        """GPUs the job's project may still take: limits (R11), quota without borrowing, R3 for interactive.
        GPUs firmly reserved for it this cycle count as held (``claimed``: they start there next cycle).
        ``freed``: as if its project held that many GPUs fewer (training GPUs it could preempt: R10);
        ``siblings``: as if the other projects of its department held that many fewer (a reclaim inside the
        department: its caps only)."""
        p = self.projects[job.project]
        borrowing = self.config.borrowing
        caps = []
        if p.limit_gpus is not None or not p.allow_over_quota or not borrowing:
            alloc = self.claimed(p.name) - freed
            if p.limit_gpus is not None:
                caps.append(p.limit_gpus - alloc)
            if not p.allow_over_quota or not borrowing:
                caps.append(p.deserved_gpus - alloc)
        if job.interactive:
            caps.append(p.deserved_gpus - self.interactive[p.name])
        dept = self.departments.get(p.department or "")
        if dept is not None:
            if dept.limit_gpus is not None or not borrowing:  # (most departments have neither cap)
                top_alloc = self.top_claimed(self.top_key(p.name)) - freed - siblings
                if dept.limit_gpus is not None:
                    caps.append(dept.limit_gpus - top_alloc)
                if not borrowing:
                    caps.append(dept.deserved_gpus - top_alloc)
            if job.interactive:
                caps.append(dept.deserved_gpus - self.dept_interactive.get(dept.name, 0))
        return min(caps) if caps else UNLIMITED

    def slots_for(self, job: Job, index: NodeIndex) -> int:
        """Replicas of ``job`` that fit on ``index`` where it may go (R17: one domain if it requires it)."""
        if not self.domains.required(job):
            return index.slots(job.gpus_per_replica)
        return self.domains.slots(job, index, self.home(job))

    def home(self, job: Job) -> str | None:
        """R17: the domain of the job's master, if it runs."""
        act = self.active[job.key]
        return self.domains.of.get(act[0].node) if act else None  # its master's domain (R17)

    def settling(self, job: Job) -> bool:
        t = job.last_resized_at
        if t is None or job.key in self.started:
            return False
        end = self.settle_ends.get(job.key) if self.settle_ends else None  # R18
        return self.before(t + self.config.settle_seconds if end is None else end)

    def just_resized(self, job: Job) -> bool:
        """Inside the plain settle time (``Config.settle_seconds``), whatever R18 adds to it."""
        t = job.last_resized_at
        return t is not None and job.key not in self.started and self.before(t + self.config.settle_seconds)

    def before(self, t: float) -> bool:
        """Whether the cycle's time is before ``t``: every comparison with the clock that can change the plan
        goes through here (``VictimOrder.taken`` too, for its order's step), so the plan holds until the
        earliest such ``t`` ahead (``holds_until``; the carry keeps the plan for an unchanged snapshot until
        then)."""
        if self.now < t:
            self.holds_until = min(self.holds_until, t)
            return True
        return False

    def plan_holds_until(self, decided: bool) -> float:
        """Until when the plan made from this ledger holds for the same snapshot; a plan that decided
        something holds only now (what it decided changes the snapshot the next plan is made from)."""
        return self.now if decided else self.holds_until

    def settled_at(self, job: Job) -> float:
        """When a job resized at ``last_resized_at`` stops settling (R7, R18: longer for a costly resize)."""
        end = self.settle_ends.get(job.key)
        return end if end is not None else (job.last_resized_at or 0.0) + self.config.settle_seconds

    # -- mutations (all undoable) --------------------------------------------------------------------
    def checkpoint(self) -> int:
        return len(self._undo)

    def rollback(self, mark: int) -> None:
        if len(self._undo) > mark:
            self._rollbacks += 1
        while len(self._undo) > mark:
            self._undo.pop()()

    def cheapest(
        self,
        options: Iterable[str],
        attempt: Callable[[str], tuple[float, ...] | None],
        floor: Callable[[str], tuple[float, ...]] | None = None,
    ) -> str | None:
        """The option whose trial change costs least: ``attempt(option)`` changes the ledger and returns its
        cost, or ``None`` when it fails; each trial is rolled back; ties go to the first option. ``floor``: a
        cost no trial of that option can go below; an option whose floor is not below the best cost found is
        not tried (it could not be chosen: the same option wins, at a fraction of the trials)."""
        best: tuple[tuple[float, ...], str] | None = None
        for option in options:
            if floor is not None and best is not None and best[0] <= floor(option):
                continue
            mark = self.checkpoint()
            cost = attempt(option)
            self.rollback(mark)
            if cost is not None and (best is None or cost < best[0]):
                best = (cost, option)
        return None if best is None else best[1]

    def end(self) -> None:
        """The cycle is over: forget the undo log. Its closures hold the ledger, so a ledger that kept them
        would be freed only by the cyclic garbage collector, with all it refers to (at 10,240 GPUs tens of
        thousands of objects a cycle, and a collection of them took 80 ms)."""
        self._undo.clear()

    def version(self) -> tuple[int, int]:
        """Equal versions mean an unchanged ledger: every mutation logs an undo, every rollback is counted."""
        return (len(self._undo), self._rollbacks)

    def place(self, job: Job, count: int, *, reserve: bool, firm: bool = True) -> list[Placement]:
        """Best-fit ``count`` replicas (R12). ``reserve``: on free+releasing GPUs, held back, not started;
        ``firm``: the job will start there (not a speculative drain hold), so the GPUs count as its project's."""
        g = job.gpus_per_replica
        index = self.avail if reserve else self.free
        taken = {r.index for r in self.active[job.key]} | {p.index for p in self.started.get(job.key, [])}
        out: list[Placement] = []
        next_index = 0
        domain = None
        if self.domains.members:
            domain = self.domains.target(job, index, count, self.home(job), starts=not reserve)
        for _ in range(count):
            # R17: inside the chosen domain first; a preferred job spills over (a required one fits: slots_for)
            node = self.domains.best_fit(domain, index, g) if domain is not None else None
            node = node or index.best_fit(g)
            if node is None:
                raise AssertionError("place() called without checking slots()")
            while next_index in taken:
                next_index += 1
            taken.add(next_index)
            out.append(Placement(next_index, node, g))
            self._take(node, g)
        if reserve:
            for pl in out:
                self._reserve(Reservation(job.project, job.name, pl.node, pl.gpus, firm))
        else:
            self._start(job, out)
        return out

    def reserve_on(self, job: Job, node: str, gpus: int) -> None:
        """Hold ``gpus`` free or releasing GPUs of ``node`` for ``job``."""
        if gpus > 0:
            self._take(node, gpus)
            self._reserve(Reservation(job.project, job.name, node, gpus))

    def on_node(self, node: str) -> list[JobKey]:
        """Jobs that had an active replica on ``node`` in the snapshot, in key order (``jobindex.jobs_on_node``:
        made on first use, kept with the index)."""
        return jobindex.jobs_on_node(self.index).get(node, [])

    def reserve_node(self, job: Job, node: str, most: int) -> int:
        """Hold back what a node has towards one replica of ``job``, at most ``most`` GPUs (a draining
        reservation); returns the GPUs held."""
        g = min(self.avail.value[node], job.gpus_per_replica, most)
        self._take(node, g)
        self._reserve(Reservation(job.project, job.name, node, g, firm=False))
        before = self.drain_holder.get(node)
        self.drain_holder[node] = job.key

        def undo() -> None:
            if before is None:
                del self.drain_holder[node]
            else:
                self.drain_holder[node] = before

        self._undo.append(undo)
        return g

    def release(
        self, key: JobKey, replicas: list[Replica], reason: str, cause: Cause, for_job: JobKey | None
    ) -> None:
        """Tell ``replicas`` of a job to stop: their GPUs become releasing."""
        job = self.jobs[key]
        before = list(self.active[key])
        rel = self.released.get(key)
        prev = (list(rel.replicas), rel.whole) if rel is not None else ([], False)
        gone = {r.index for r in replicas}  # a job's active replicas have distinct indices
        self.active[key] = [r for r in before if r.index not in gone]
        whole = not self.active[key]
        if rel is None:
            self.released[key] = Release(list(replicas), reason, cause, for_job, whole)
            self._count_reclaimed(key[0], cause, 1)
        else:
            rel.replicas.extend(replicas)
            rel.whole = whole
        self.release_log.append(key[0])
        for r in replicas:
            self._set(r.node, 0, r.gpus)
        self._count(job, -sum(r.gpus for r in replicas))

        def undo() -> None:
            self.active[key] = before
            self.release_log.pop()
            if rel is None:
                del self.released[key]
                self._count_reclaimed(key[0], cause, -1)
            else:
                rel.replicas, rel.whole = prev

        self._undo.append(undo)

    def unrelease(self, key: JobKey, replicas: list[Replica]) -> None:
        """Give back replicas released earlier in this cycle (R6 fill-back)."""
        job = self.jobs[key]
        rel = self.released[key]
        before, prev = self.active[key], (list(rel.replicas), rel.whole)
        self.active[key] = sorted(before + replicas, key=lambda r: r.index)
        back = {r.index for r in replicas}
        rel.replicas = [r for r in rel.replicas if r.index not in back]
        rel.whole = False
        gone = not rel.replicas
        if gone:
            del self.released[key]
            self._count_reclaimed(key[0], rel.cause, -1)
        for r in replicas:
            self._set(r.node, 0, -r.gpus)
        self._count(job, sum(r.gpus for r in replicas))

        def undo() -> None:
            self.active[key] = before
            rel.replicas, rel.whole = prev
            self.released[key] = rel
            if gone:
                self._count_reclaimed(key[0], rel.cause, 1)

        self._undo.append(undo)

    def _count_reclaimed(self, project: str, cause: Cause, n: int) -> None:
        """Keep ``reclaimed`` in step with ``released`` (its undo is that of the caller)."""
        if cause == Cause.RECLAIM:
            self.reclaimed[project] = self.reclaimed.get(project, 0) + n

    def _count(self, job: Job, gpus: int) -> None:
        """Every change of a job's active, started or released replicas comes through here (and its undo): so
        does ``touched``'s count of its project's changes."""
        p = self.projects[job.project]
        top = self.top_key(p.name)
        touched = self.touched
        touched[p.name] = touched.get(p.name, 0) + 1
        self.alloc[p.name] += gpus
        self.top_alloc[top] = self.top_alloc.get(top, 0) + gpus
        if job.interactive:
            self.interactive[p.name] += gpus
            if p.department is not None:
                self.dept_interactive[p.department] = self.dept_interactive.get(p.department, 0) + gpus

        def undo() -> None:
            touched[p.name] += 1  # the state before is not the one at the count before: never seen again
            self.alloc[p.name] -= gpus
            self.top_alloc[top] -= gpus
            if job.interactive:
                self.interactive[p.name] -= gpus
                if p.department is not None:
                    self.dept_interactive[p.department] -= gpus

        self._undo.append(undo)

    def _take(self, node: str, g: int) -> None:
        """Take ``g`` GPUs on ``node``: free ones first, then releasing ones."""
        from_free = min(self.free.value[node], g)
        self._set(node, -from_free, -(g - from_free))
        if g > from_free and node not in self.dipped:
            self.dipped.add(node)
            self._undo.append(lambda: self.dipped.discard(node))

    def _set(self, node: str, d_free: int, d_rel: int) -> None:
        if node not in self.free.value:
            return  # a node that is gone or cordoned: its GPUs come back to nobody
        f, a = self.free.value[node], self.avail.value[node]
        self.free.set(node, f + d_free)
        self.avail.set(node, a + d_free + d_rel)

        def undo() -> None:
            self.free.set(node, f)
            self.avail.set(node, a)

        self._undo.append(undo)

    def _start(self, job: Job, placements: list[Placement]) -> None:
        key = job.key
        existed = key in self.started
        self.started.setdefault(key, []).extend(placements)
        new = [Replica(p.index, p.node, p.gpus) for p in placements]
        before = self.active[key]
        self.active[key] = sorted(before + new, key=lambda r: r.index)
        self._count(job, sum(p.gpus for p in placements))
        n = len(placements)

        def undo() -> None:
            self.active[key] = before
            if existed:
                del self.started[key][-n:]
            else:
                del self.started[key]

        self._undo.append(undo)

    def defer_start(self, job: Job) -> None:
        """Turn the replicas ``job`` starts this cycle into firm holds on the same GPUs: it starts next cycle
        (decision 62). Called once the cycle's claims are served (it keeps no undo)."""
        placements = self.started.pop(job.key)
        self.active[job.key] = [
            r for r in self.active[job.key] if r.index not in {p.index for p in placements}
        ]
        self._count(job, -sum(p.gpus for p in placements))
        for p in placements:
            self._reserve(Reservation(job.project, job.name, p.node, p.gpus))

    def claimed(self, project: str) -> int:
        """GPUs the project holds plus those firmly reserved for it this cycle: what R7 measures it by."""
        return self.alloc[project] + self.reserved.get(project, 0)

    def committed(self, project: str) -> int:
        """``claimed`` plus the GPUs held for its drains: what its own further claims are measured by."""
        return self.claimed(project) + self.draining.get(project, 0)

    def top_claimed(self, top: Top) -> int:
        return self.top_alloc.get(top, 0) + self.top_reserved.get(top, 0)

    def _reserve(self, r: Reservation) -> None:
        """Hold GPUs; firm holds count as the project's (``claimed``), drain holds only in ``committed``."""
        top = self.top_key(r.project)
        gpus, drain = (r.gpus, 0) if r.firm else (0, r.gpus)
        self.reservations.append(r)
        self.reserved[r.project] = self.reserved.get(r.project, 0) + gpus
        self.top_reserved[top] = self.top_reserved.get(top, 0) + gpus
        self.draining[r.project] = self.draining.get(r.project, 0) + drain

        def undo() -> None:
            self.reservations.pop()
            self.reserved[r.project] -= gpus
            self.top_reserved[top] -= gpus
            self.draining[r.project] -= drain

        self._undo.append(undo)
