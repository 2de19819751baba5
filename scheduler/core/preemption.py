"""Victim search: R5 order, R6 minimal victims, R7 no ping-pong, R10 priority, R11 limits.

Contract: every function works on a ``Ledger`` and either leaves a consistent set of releases in it and
returns the units taken, or rolls the ledger back and returns ``None``. A *unit* is what one eviction step
takes: one elastic extra (the highest-index worker above ``min_replicas``) or, once a job has no extras left,
the whole job (master included: the master goes only with the whole job).

Order inside a project (R5): lowest priority first; inside a priority, elastic extras before whole jobs;
newest job first; inside a job the highest replica index first. Across projects (reclaim): the project
furthest above its fair share first, re-ranked after every unit.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from scheduler.core.ledger import JobKey, Ledger
from scheduler.core.model import Job, Replica
from scheduler.core.plan import Cause


@dataclass(frozen=True, slots=True)
class Unit:
    key: JobKey
    replicas: tuple[Replica, ...]
    whole: bool

    @property
    def gpus(self) -> int:
        return sum(r.gpus for r in self.replicas)


class VictimOrder:
    """Each project's preemptible jobs in R5 order, grouped by priority; computed once per cycle."""

    def __init__(self, ledger: Ledger) -> None:
        by_project: dict[str, list[Job]] = {}
        for key in ledger.running:
            job = ledger.jobs[key]
            if job.preemptible:
                by_project.setdefault(job.project, []).append(job)
        self._tiers: dict[str, list[list[JobKey]]] = {}
        for project, jobs in by_project.items():
            jobs.sort(key=_name, reverse=True)  # stable sorts: names descending break the ties below
            jobs.sort(key=lambda j: (j.priority, -j.submitted_at))
            tiers: list[list[JobKey]] = []
            for j in jobs:
                if tiers and ledger.jobs[tiers[-1][0]].priority == j.priority:
                    tiers[-1].append(j.key)
                else:
                    tiers.append([j.key])
            self._tiers[project] = tiers
        self.lowest = {p: ledger.jobs[tiers[0][0]].priority for p, tiers in self._tiers.items() if tiers}

    def next_unit(
        self, ledger: Ledger, project: str, eligible: Callable[[Job], bool], fits: int = 0
    ) -> Unit | None:
        """The next unit of ``project`` in R5 order; a job started or grown this cycle is not a victim.

        ``fits``: skip units with no replica on a node of at least that many GPUs (they cannot help a
        claimant whose replicas need that much).
        """
        for tier in self._tiers.get(project, ()):
            for key in tier:
                job, act = ledger.jobs[key], ledger.active[key]
                extra = len(act) > job.min_replicas and key not in ledger.started and eligible(job)
                if extra and ledger.capacity(act[-1].node) >= fits:
                    return Unit(key, (act[-1],), False)
            for key in tier:
                job, act = ledger.jobs[key], ledger.active[key]
                whole = act and key not in ledger.started and eligible(job)
                if whole and any(ledger.capacity(r.node) >= fits for r in act):
                    return Unit(key, tuple(act), True)
        return None


def _name(job: Job) -> str:
    return job.name


def reclaim(ledger: Ledger, order: VictimOrder, claim: Job, count: int, *, r2: bool) -> list[Unit] | None:
    """Take units from projects above their fair share until ``count`` replicas of ``claim`` fit."""
    g = claim.gpus_per_replica
    shares = ledger.shares
    c_top = ledger.top_key(claim.project)
    c_top_ok = ledger.top_claimed(c_top) + count * g <= _top_share(ledger, claim.project)
    # Within a cycle's owed phase the victims only dwindle, so a reclaim that failed for ``count`` replicas of
    # ``g`` GPUs fails for every later claim at least as big with the same powers (KAI's signatures).
    memo = (g, r2, c_top if c_top.startswith("dept:") else None, c_top_ok)
    if count >= ledger.failed_reclaims.get(memo, 1 << 30):
        return None

    # a victim is measured by what it holds plus what is already promised to it this cycle
    def over(project: str) -> int:
        return ledger.claimed(project) - shares.project[project]

    def allowed(project: str, unit: Unit) -> bool:
        if not _keeps_share(ledger.claimed(project), shares.project[project], unit.gpus, r2=r2):
            return False
        v_top = ledger.top_key(project)
        if v_top == c_top:
            return True
        top_held = ledger.top_claimed(v_top)
        return c_top_ok and _keeps_share(top_held, _top_share(ledger, project), unit.gpus, r2=r2)

    def eligible(job: Job) -> bool:
        return job.key != claim.key and (r2 or not ledger.settling(job))

    heap = [(-over(p), p) for p in sorted(ledger.alloc) if p != claim.project and over(p) > 0]
    heapq.heapify(heap)
    reason = f"reclaimed for {claim.project}/{claim.name}"
    taken = _take_until_fits(
        ledger,
        claim,
        count,
        heap,
        order=order,
        eligible=eligible,
        allowed=allowed,
        over=over,
        reason=reason,
        cause=Cause.RECLAIM,
    )
    if taken is None and count == 1 and g > 1:
        taken = _reclaim_one_node(ledger, claim, allowed=allowed, eligible=eligible, over=over, reason=reason)
    if taken is None:
        ledger.failed_reclaims[memo] = min(count, ledger.failed_reclaims.get(memo, count))
    return taken


def _reclaim_one_node(
    ledger: Ledger,
    claim: Job,
    *,
    allowed: Callable[[str, Unit], bool],
    eligible: Callable[[Job], bool],
    over: Callable[[str], int],
    reason: str,
) -> list[Unit] | None:
    """R5-R7 for one replica too big for victims scattered across nodes: on each node big enough, take
    what the rules allow there, in R5 order, and keep the node that needs the fewest GPUs evicted."""
    g = claim.gpus_per_replica
    best: tuple[int, str] | None = None
    for node in ledger.avail.nodes:
        if ledger.capacity(node) < g:
            continue
        units = _units_on(ledger, node, claim, eligible, over)
        if ledger.avail.value[node] + sum(r.gpus for u in units for r in u.replicas if r.node == node) < g:
            continue
        mark = ledger.checkpoint()
        taken = _take_on(ledger, node, claim, units, allowed=allowed, reason=reason)
        ledger.rollback(mark)
        cost = sum(u.gpus for u in taken) if taken is not None else None
        if cost is not None and (best is None or cost < best[0]):
            best = (cost, node)
    if best is None:
        return None
    units = _units_on(ledger, best[1], claim, eligible, over)
    return _take_on(ledger, best[1], claim, units, allowed=allowed, reason=reason)


def _units_on(
    ledger: Ledger, node: str, claim: Job, eligible: Callable[[Job], bool], over: Callable[[str], int]
) -> list[Unit]:
    """Units with a replica on ``node``, in R5 order: lowest priority; extras (highest index first) before
    whole jobs; newest job first."""
    keyed: list[tuple[tuple[int, int, float, str, int], Unit]] = []
    for key in ledger.on_node(node):
        job, act = ledger.jobs[key], ledger.active[key]
        if (
            not act
            or not job.preemptible
            or key in ledger.started
            or not eligible(job)
            or over(job.project) <= 0
        ):
            continue
        for r in act[job.min_replicas :]:
            if r.node == node:
                keyed.append(
                    ((job.priority, 0, -job.submitted_at, job.name, -r.index), Unit(key, (r,), False))
                )
        keyed.append(((job.priority, 1, -job.submitted_at, job.name, 0), Unit(key, tuple(act), True)))
    keyed.sort(key=lambda ku: ku[0])
    return [u for _, u in keyed]


def _take_on(
    ledger: Ledger,
    node: str,
    claim: Job,
    units: list[Unit],
    *,
    allowed: Callable[[str, Unit], bool],
    reason: str,
) -> list[Unit] | None:
    taken: list[Unit] = []
    for unit in units:
        if ledger.avail.value[node] >= claim.gpus_per_replica:
            break
        # a whole job's unit is what is left of it after its extras here went (its master always is)
        still = {r.index for r in ledger.active[unit.key]}
        left = [r for r in unit.replicas if r.index in still]
        unit = Unit(unit.key, tuple(left), unit.whole)  # noqa: PLW2901
        if not allowed(unit.key[0], unit):
            continue
        why = f"{reason}: {_why(ledger, unit.key[0])} (on {node}, to make room for one replica)"
        ledger.release(unit.key, left, why, Cause.RECLAIM, claim.key)
        taken.append(unit)
    return taken if ledger.avail.value[node] >= claim.gpus_per_replica else None


def preempt(ledger: Ledger, order: VictimOrder, claim: Job, count: int) -> list[Unit] | None:
    """R10: take from lower-priority preemptible jobs of the claimant's own project, extras first.

    An interactive claimant (inside its quota, R3) also outranks training jobs of equal priority.
    """

    def eligible(job: Job) -> bool:  # the claimant is pending, so never among the running candidates
        return job.priority < claim.priority or (claim.interactive and job.priority == claim.priority)

    lowest = order.lowest.get(claim.project)
    if lowest is None or lowest > claim.priority or (lowest == claim.priority and not claim.interactive):
        return None  # nothing in its project ranks below it

    heap = [(0, claim.project)]
    reason = f"preempted for higher-priority job {claim.project}/{claim.name}"
    return _take_until_fits(
        ledger,
        claim,
        count,
        heap,
        order=order,
        eligible=eligible,
        allowed=lambda p, u: True,
        over=lambda p: 1,
        reason=reason,
        cause=Cause.PREEMPT,
    )


def _take_until_fits(
    ledger: Ledger,
    claim: Job,
    count: int,
    heap: list[tuple[int, str]],
    *,
    order: VictimOrder,
    eligible: Callable[[Job], bool],
    allowed: Callable[[str, Unit], bool],
    over: Callable[[str], int],
    reason: str,
    cause: Cause,
) -> list[Unit] | None:
    g = claim.gpus_per_replica
    mark = ledger.checkpoint()
    taken: list[Unit] = []
    too_big: set[JobKey] = set()  # jobs whose next unit may not be taken: try the project's smaller ones
    while ledger.avail.slots(g) < count:
        if not heap:
            ledger.rollback(mark)
            return None
        _, project = heapq.heappop(heap)
        unit = order.next_unit(ledger, project, lambda j: j.key not in too_big and eligible(j), fits=g)
        if unit is None:
            continue
        if not allowed(project, unit):
            too_big.add(unit.key)
            heapq.heappush(heap, (-over(project), project))
            continue
        ledger.release(unit.key, list(unit.replicas), f"{reason}: {_why(ledger, project)}", cause, claim.key)
        taken.append(unit)
        if over(project) > 0:
            heapq.heappush(heap, (-over(project), project))
    return _fill_back(ledger, taken, g, count)


def _fill_back(ledger: Ledger, taken: list[Unit], g: int, count: int) -> list[Unit]:
    """R6: give back every victim the claimant turns out not to need, least preferred victims first."""
    kept: list[Unit] = []
    for unit in reversed(taken):
        if not unit.whole and not ledger.active[unit.key]:
            kept.append(unit)  # its job is evicted whole: a worker never stays without its master
            continue
        mark = ledger.checkpoint()
        ledger.unrelease(unit.key, list(unit.replicas))
        if ledger.avail.slots(g) < count:
            ledger.rollback(mark)
            kept.append(unit)
    kept.reverse()
    return kept


def _keeps_share(alloc: int, share: int, gpus: int, *, r2: bool) -> bool:
    """R7: a victim stays at or above its fair share, unless R2 needs an indivisible unit of it."""
    return alloc - gpus >= share or (r2 and alloc > share)


def _top_share(ledger: Ledger, project: str) -> int:
    return ledger.shares.top(ledger.projects[project])[1]


def _why(ledger: Ledger, project: str) -> str:
    promised = ledger.reserved.get(project, 0)
    more = f" and is promised {promised} this cycle" if promised else ""
    return (
        f"project {project} holds {ledger.alloc[project]} GPUs{more}, "
        f"above its fair share of {ledger.shares.project[project]}"
    )


def enforce_limits(ledger: Ledger, order: VictimOrder) -> None:
    """R11: a project above its limit (say, the limit was just lowered) gives back preemptible GPUs."""
    for name in sorted(ledger.projects):
        p = ledger.projects[name]
        cap = p.limit_gpus
        if not p.allow_over_quota or not ledger.config.borrowing:
            cap = p.deserved_gpus if cap is None else min(cap, p.deserved_gpus)
        while cap is not None and ledger.alloc[name] > cap:
            unit = order.next_unit(ledger, name, lambda j: True)
            if unit is None:
                break
            why = f"project {name} holds {ledger.alloc[name]} GPUs, above its limit of {cap}"
            ledger.release(unit.key, list(unit.replicas), why, Cause.LIMIT, None)
