"""Victim ordering: which running work may make room for a claim, and which candidate sets are tried first.

Contract: pure ordering, no ledger mutation (it only tells the ledger, through ``Ledger.before``, until
when a plan that took a unit in its order holds). Three pieces, each meant to be extended in one place:

- ``Unit`` is what one eviction step takes: one elastic extra (the highest-index worker above
  ``min_replicas``; with allowed sizes, the step down to the next allowed count, R16) or, once a job has
  no extras left, the whole job (master included: R5).
- ``VictimOrder`` lists each project's preemptible jobs once per cycle in R5 order: lowest priority first;
  inside a priority, elastic extras before whole jobs; the job that loses the least work first
  (``lost_work``: GPU-seconds since its last checkpoint or restart, with ``Config.least_work_lost``), then
  the newest (then name); inside a job the highest replica index first. With resize costs (R18, decision
  48) a priority tier's units go by what taking each costs its job (``unit_cost``): a shrink restarts the
  replicas the job keeps, an eviction loses the work since its checkpoint and restarts the whole job later,
  so an eviction that costs less than a shrink goes first. ``r5_sorted`` is that order over a
  project's jobs: a tie-break added there changes reclaim, in-project preemption and elastic shrink at
  once, which all walk units through ``VictimOrder`` (node-targeted reclaim, ``Reclaimer.units_on``, reads
  the same ``VictimOrder.lost``).
- ``searches`` is the order in which candidate victim *sets* are tried for one claim (R2, R7 and R10 where
  they conflict; docs/rules.md decisions 19-24). Each ``Search`` says whether the claimant's own
  lower-priority jobs give first (R10) and how far other projects may drop (``Floor``); the first search
  that makes the claimant fit wins, with what it did not need given back (R6, in ``preemption``):

  1. victims stay at or above their fair share (R7);
  2. a victim drops below its fair share but not below its guarantee (only for a claim below its own
     guarantee, R2: an indivisible unit);
  3. a victim drops below its guarantee (the same, when no other set serves the claim).

  At each level a claim that its fair share already covers first tries other projects alone (its own
  lower-priority jobs keep running: the project reaches its share with both), then with its own
  lower-priority jobs first; a claim its share does not cover can only make room with its own jobs first
  (R7: a reclaim never lifts the claimant above its share). So no victim project goes below its guarantee
  while a set that spares it serves the claim.

  Jobs of other projects inside their minimum runtime (R15, ``Ledger.young``) are spared by every set
  (``Search.spare``) except, for a claim below its own guarantee (R2 wins), sets tried after all sparing ones
  at the same or a gentler floor: levels 1 and 2 sparing them, then 1 and 2 not, then 3 sparing, then 3 not.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from scheduler.core import sizes
from scheduler.core.ledger import JobKey, Ledger
from scheduler.core.model import UNLIMITED, Job, Replica


@dataclass(frozen=True, slots=True)
class Unit:
    key: JobKey
    replicas: tuple[Replica, ...]
    whole: bool

    @property
    def gpus(self) -> int:
        return sum(r.gpus for r in self.replicas)


def r5_sorted(jobs: list[Job], lost: Mapping[JobKey, float]) -> list[Job]:
    """One project's preemptible jobs in R5 order, first victim first: lowest priority, then the least work
    lost (``lost``: GPU-seconds by job; all 0 with the tie-break off), then newest, then name descending (a
    stable tie-break). Extras before whole jobs and the highest replica index first are applied within this
    order by ``VictimOrder.next_unit`` and ``preemption.Reclaimer.units_on``."""
    out = sorted(jobs, key=_name, reverse=True)  # stable sorts: names descending break the ties below
    out.sort(key=lambda job: (job.priority, lost[job.key], -job.submitted_at))
    return out


def restarted_at(job: Job) -> float:
    """When the job last (re)started: its last resize (every resize restarts it from its checkpoint), or,
    for a snapshot that does not say, its submission (the earliest it can have started)."""
    return job.submitted_at if job.last_resized_at is None else job.last_resized_at


def work_since(job: Job) -> float:
    """Since when the job's work is not saved: its last checkpoint or its last (re)start, whichever is later
    (a restart resumes from the checkpoint). A job that never reported a checkpoint: since it (re)started."""
    since = restarted_at(job)
    if job.checkpointed_at is not None and job.checkpointed_at > since:
        return job.checkpointed_at
    return since


def lost_work(job: Job, gpus: int, now: float) -> float:
    """GPU-seconds of work ``job``, running on ``gpus`` GPUs, loses if it is stopped at ``now`` (evicted, or
    shrunk: every resize restarts it from its checkpoint): ``gpus x (now - work_since(job))``."""
    since = work_since(job)
    return gpus * (now - since) if now > since else 0.0


ORDER_STEP = 10.0  # seconds: R5's least-work-lost order weighs the work lost as of the start of each step


def order_time(now: float) -> float:
    """The time R5's least-work-lost order weighs each job's work lost at: the last multiple of ``ORDER_STEP``
    (ten seconds) at or before ``now`` (the order the exact one had then), so that the order, and a plan that
    relied on it, holds for the rest of that step (decision 73)."""
    return math.floor(now / ORDER_STEP) * ORDER_STEP


class VictimOrder:
    """Each project's preemptible jobs in R5 order (``r5_sorted``), grouped by priority; built once per cycle.
    ``lost``: the GPU-seconds each would lose (R5's least-work-lost tie-break; 0 with it off)."""

    def __init__(self, ledger: Ledger) -> None:
        by_project: dict[str, list[Job]] = {}
        for key in ledger.running:
            job = ledger.jobs[key]
            if job.preemptible:
                by_project.setdefault(job.project, []).append(job)
        # R5's least-work-lost tie-break: GPU-seconds each job would lose (0 for all when it is off)
        # each job's work lost as a line in time, at the start of the step (below 0 for one resized or
        # checkpointed since: the order of those lines then, with no ties at nothing lost)
        at, held = order_time(ledger.now), ledger.held_gpus
        # the step it was built for (``victim_order``)
        self.at = at if ledger.config.least_work_lost else None
        self.lost: dict[JobKey, float] = (
            {j.key: held[j.key] * (at - work_since(j)) for jobs in by_project.values() for j in jobs}
            if ledger.config.least_work_lost
            else {j.key: 0.0 for jobs in by_project.values() for j in jobs}
        )
        # the order, and ``unit_cost``'s ranks, change with the step: a plan that took a unit by them holds
        # until the step ends (``taken``)
        self.changes_at = at + ORDER_STEP if ledger.config.least_work_lost else math.inf
        self._tiers: dict[str, list[list[JobKey]]] = {}
        for project, jobs in by_project.items():
            tiers: list[list[JobKey]] = []
            for j in r5_sorted(jobs, self.lost):
                if tiers and ledger.jobs[tiers[-1][0]].priority == j.priority:
                    tiers[-1].append(j.key)
                else:
                    tiers.append([j.key])
            self._tiers[project] = tiers
        self.lowest = {p: ledger.jobs[tiers[0][0]].priority for p, tiers in self._tiers.items() if tiers}
        # R18 (decision 48): with resize costs, a tier's units go cheapest restart first (``unit_cost``)
        self.costs = ledger.resize_costs

    def taken(self, ledger: Ledger) -> None:
        """A search took a unit in this order (which the step's work lost decides): the plan holds until the
        step ends at most. A search that found nothing the rules let go did not depend on the order."""
        ledger.before(self.changes_at)

    def next_unit(
        self,
        ledger: Ledger,
        project: str,
        eligible: Callable[[Job], bool],
        *,
        fits: int = 0,
        most: int = UNLIMITED,
        within: str | None = None,
        largest: int = UNLIMITED,
    ) -> Unit | None:
        """The next unit of ``project`` in R5 order; a job started or grown this cycle is not a victim.

        ``fits``: skip units with no replica on a node of at least that many GPUs (they cannot help a
        claimant whose replicas need that much). ``most``: skip whole jobs holding more GPUs than that.
        ``within``: with ``fits``, count only nodes of that R17 domain (a claimant that must fit in it).
        ``largest``: skip jobs whose unit holds more GPUs than that (their whole job too, which holds more).
        A unit returned is taken by the order (``taken``).
        """
        unit = self._next_unit(
            ledger, project, eligible, fits=fits, most=min(most, largest), within=within, largest=largest
        )
        if unit is not None:
            self.taken(ledger)
        return unit

    def _next_unit(
        self,
        ledger: Ledger,
        project: str,
        eligible: Callable[[Job], bool],
        *,
        fits: int,
        most: int,
        within: str | None,
        largest: int,
    ) -> Unit | None:
        for tier in self._tiers.get(project, ()):
            if self.costs:
                unit = self._cheapest(
                    ledger, tier, eligible, fits=fits, most=most, within=within, largest=largest
                )
                if unit is not None:
                    return unit
                continue
            for key in tier:
                job, act = ledger.jobs[key], ledger.active[key]
                if len(act) <= job.min_replicas or key in ledger.started or not eligible(job):
                    continue
                if not job.allowed_replicas:
                    extra = Unit(key, (act[-1],), False) if _helps(ledger, act[-1:], fits, within) else None
                else:
                    extra = _step_down(ledger, job, act, fits, within)
                if extra is not None and extra.gpus <= largest:
                    return extra
            for key in tier:
                job, act = ledger.jobs[key], ledger.active[key]
                whole = act and key not in ledger.started and eligible(job)
                if whole and _helps(ledger, act, fits, within) and _gpus(act) <= most:
                    return Unit(key, tuple(act), True)
        return None

    def _cheapest(
        self,
        ledger: Ledger,
        tier: list[JobKey],
        eligible: Callable[[Job], bool],
        *,
        fits: int,
        most: int,
        within: str | None,
        largest: int = UNLIMITED,
    ) -> Unit | None:
        """R18 (decision 48): the tier's unit whose taking costs its job the least (``unit_cost``), an eviction
        against a shrink; R5 order (the tier's) among equal costs. ``largest``: as in ``next_unit``."""
        best: Unit | None = None
        best_rank = 0.0
        for key in tier:
            job, act = ledger.jobs[key], ledger.active[key]
            if not act or key in ledger.started or not eligible(job):
                continue
            unit: Unit | None = None
            if len(act) > job.min_replicas:
                if not job.allowed_replicas:
                    unit = Unit(key, (act[-1],), False) if _helps(ledger, act[-1:], fits, within) else None
                else:
                    unit = _step_down(ledger, job, act, fits, within)
            if unit is None and _helps(ledger, act, fits, within) and _gpus(act) <= most:
                unit = Unit(key, tuple(act), True)  # (an extra costs less than its whole job, if it helps)
            if unit is None or unit.gpus > largest:
                continue
            rank = unit_cost(ledger, unit, self.lost[key], self.costs.get(key, 0.0))
            if best is None or rank < best_rank:
                best, best_rank = unit, rank
        return best

    def outranks(self, claim: Job, job: Job) -> bool:
        """R10: whether ``claim`` may preempt ``job`` of its own project: lower priority, or equal priority
        when the claim is interactive (inside its quota, R3) and the job is training (decision 8)."""
        return job.priority < claim.priority or (claim.interactive and job.priority == claim.priority)

    def has_lower(self, claim: Job) -> bool:
        """Whether anything preemptible in the claimant's project ranks below it (R10)."""
        lowest = self.lowest.get(claim.project)
        return lowest is not None and (
            lowest < claim.priority or (lowest == claim.priority and claim.interactive)
        )

    def lower_gpus(self, ledger: Ledger, claim: Job) -> int:
        """GPUs the claimant's project holds in running jobs it outranks (what R10 could free for it)."""
        return sum(
            _gpus(ledger.active[key])
            for tier in self._tiers.get(claim.project, ())
            for key in tier
            if key != claim.key and self.outranks(claim, ledger.jobs[key])
        )


def victim_order(ledger: Ledger) -> VictimOrder:
    """The cycle's ``VictimOrder``: with a carry, the last cycle's where it was built from the same inputs (the
    running jobs the very same objects in the same order, the same config and step of R5's order, no resize
    costs), else built and kept. It reads nothing else, and a pass only reads it: a cycle whose snapshot changed
    only by jobs that do not run (a submit, a claim) does not sort every project's running jobs again."""
    carry = ledger.carry
    if carry is None or ledger.resize_costs:
        return VictimOrder(ledger)
    jobs = ledger.jobs
    inputs = (ledger.config, *(jobs[key] for key in ledger.running))  # each compared by identity
    order = carry.reuse("victims", inputs, lambda: VictimOrder(ledger))
    if order.at != (order_time(ledger.now) if ledger.config.least_work_lost else None):
        order = VictimOrder(ledger)  # a new step of R5's order
        carry.keep("victims", inputs, order)
    return order


def unit_cost(ledger: Ledger, unit: Unit, lost: float, cost: float) -> float:
    """R18 (decision 48): GPU-seconds that taking ``unit`` costs its job, whose resize costs ``cost`` seconds
    and which would lose ``lost`` GPU-seconds of work since its last checkpoint (R5, decision 26).

    A shrink restarts the replicas the job keeps: ``cost x`` the GPUs left after it, nothing more when the
    job already shrinks this cycle (its restart is paid; one more replica makes it smaller). An eviction loses
    the work since the checkpoint and restarts all the job's GPUs when it runs again."""
    held = _gpus(ledger.active[unit.key])
    if unit.whole:
        return lost + cost * held
    if unit.key in ledger.released:
        return 0.0
    return cost * (held - unit.gpus)


class Floor(IntEnum):
    """How far a reclaim may take a victim project down (R7, with R2's power for indivisible units)."""

    SHARE = 0  # stays at or above its fair share
    GUARANTEE = 1  # may drop below its fair share, never below its guarantee
    ANY = 2  # may drop below its guarantee too, for a unit that cannot be split


@dataclass(frozen=True, slots=True)
class Search:
    """One candidate victim set: ``own``: the claimant's own lower-priority jobs give first (R10);
    ``floor``: how far other projects may drop, or ``None`` for no reclaim (own jobs only); ``spare``: other
    projects' jobs inside their minimum runtime are not taken (R15)."""

    own: bool
    floor: Floor | None
    spare: bool = True


def searches(
    *, entitled: bool, below_guarantee: bool, may_reclaim: bool, may_preempt: bool, young: bool = False
) -> list[Search]:
    """The candidate victim sets for one claim, most preferred first (the module contract).

    ``entitled``: its fair share covers the claim as its project stands; ``below_guarantee``: its project is
    below its guarantee (R2 may drop victims below their share); ``may_reclaim``: reclaim is on and its
    project lost nothing to a reclaim this cycle; ``may_preempt``: it outranks running jobs of its own
    project; ``young``: some job is inside its minimum runtime (R15: R2 may take it after every set that spares it)."""
    if not may_reclaim:
        return [Search(own=True, floor=None)] if may_preempt else []
    if not below_guarantee:
        levels = [(Floor.SHARE, True)]
    elif not young:
        levels = [(Floor.SHARE, True), (Floor.GUARANTEE, True), (Floor.ANY, True)]
    else:
        gentle = (Floor.SHARE, Floor.GUARANTEE)
        levels = (
            [(f, True) for f in gentle]
            + [(f, False) for f in gentle]
            + [(Floor.ANY, True), (Floor.ANY, False)]
        )
    out: list[Search] = []
    for floor, spare in levels:
        if entitled:
            out.append(Search(own=False, floor=floor, spare=spare))
        if may_preempt:
            out.append(Search(own=True, floor=floor, spare=spare))
    return out


def _step_down(
    ledger: Ledger, job: Job, act: list[Replica], fits: int, within: str | None = None
) -> Unit | None:
    """R16: a job with allowed sizes gives up its extras one allowed count at a time (8 -> 4, not 8 -> 7);
    ``None`` when none of them is on a node of at least ``fits`` GPUs (in domain ``within``, if given)."""
    lower = sizes.shrink_to(job, len(act))
    tail = act[lower:]
    if not _helps(ledger, tail, fits, within):
        return None
    return Unit(job.key, tuple(tail), False)


def _helps(ledger: Ledger, replicas: list[Replica], fits: int, within: str | None) -> bool:
    """Whether one of ``replicas`` is on a node of at least ``fits`` GPUs (in domain ``within``, if given
    and ``fits`` is)."""
    if fits and within is not None:
        of = ledger.domains.of
        return any(ledger.capacity(r.node) >= fits and of.get(r.node) == within for r in replicas)
    return any(ledger.capacity(r.node) >= fits for r in replicas)


def _name(job: Job) -> str:
    return job.name


def _gpus(replicas: list[Replica]) -> int:
    return sum(r.gpus for r in replicas)
