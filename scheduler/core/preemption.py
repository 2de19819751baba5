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

from scheduler.core import sizes
from scheduler.core.explain import counted
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
        self,
        ledger: Ledger,
        project: str,
        eligible: Callable[[Job], bool],
        fits: int = 0,
        most: int = 1 << 30,
    ) -> Unit | None:
        """The next unit of ``project`` in R5 order; a job started or grown this cycle is not a victim.

        ``fits``: skip units with no replica on a node of at least that many GPUs (they cannot help a
        claimant whose replicas need that much). ``most``: skip whole jobs holding more GPUs than that.
        """
        for tier in self._tiers.get(project, ()):
            for key in tier:
                job, act = ledger.jobs[key], ledger.active[key]
                extra = len(act) > job.min_replicas and key not in ledger.started and eligible(job)
                if extra and not job.allowed_replicas and ledger.capacity(act[-1].node) >= fits:
                    return Unit(key, (act[-1],), False)
                if extra and job.allowed_replicas and (step := _step_down(ledger, job, act, fits)):
                    return step
            for key in tier:
                job, act = ledger.jobs[key], ledger.active[key]
                whole = act and key not in ledger.started and eligible(job)
                if whole and any(ledger.capacity(r.node) >= fits for r in act) and _gpus(act) <= most:
                    return Unit(key, tuple(act), True)
        return None


def _step_down(ledger: Ledger, job: Job, act: list[Replica], fits: int) -> Unit | None:
    """R16: a job with allowed sizes gives up its extras one allowed count at a time (8 -> 4, not 8 -> 7);
    ``None`` when none of them is on a node of at least ``fits`` GPUs."""
    lower = sizes.shrink_to(job, len(act))
    tail = tuple(act[lower:])
    if not any(ledger.capacity(r.node) >= fits for r in tail):
        return None
    return Unit(job.key, tail, False)


def _name(job: Job) -> str:
    return job.name


def _gpus(replicas: list[Replica]) -> int:
    return sum(r.gpus for r in replicas)


def _on(node: str, units: list[Unit]) -> int:
    """GPUs the units hold on ``node`` (an extra and its whole job both count: an upper bound)."""
    return sum(r.gpus for u in units for r in u.replicas if r.node == node)


class Reclaimer:
    """R5-R7 for one claimant: which projects may lose what to it (``over``, ``allowed``, ``eligible``).

    A victim is measured by what it holds plus what is already promised to it this cycle (``claimed``);
    ``r2``: the claimant's project is below its guarantee, so a victim may drop below its fair share for a
    unit that cannot be split, and settling jobs are not spared.
    """

    def __init__(self, ledger: Ledger, order: VictimOrder, claim: Job, count: int, *, r2: bool) -> None:
        self.ledger, self.order, self.claim, self.r2 = ledger, order, claim, r2
        self.c_top = ledger.top_key(claim.project)
        need = count * claim.gpus_per_replica
        self.c_top_ok = ledger.top_claimed(self.c_top) + need <= _top_share(ledger, claim.project)
        self.reason = f"reclaimed for {claim.project}/{claim.name}"

    def over(self, project: str) -> int:
        return self.ledger.claimed(project) - self.ledger.shares.project[project]

    def allowed(self, project: str, unit: Unit) -> bool:
        ledger, r2 = self.ledger, self.r2
        if not _keeps_share(ledger.claimed(project), ledger.shares.project[project], unit.gpus, r2=r2):
            return False
        v_top = ledger.top_key(project)
        if v_top == self.c_top:
            return True
        top_held = ledger.top_claimed(v_top)
        return self.c_top_ok and _keeps_share(top_held, _top_share(ledger, project), unit.gpus, r2=r2)

    def eligible(self, job: Job) -> bool:
        return job.key != self.claim.key and (self.r2 or not self.ledger.settling(job))

    def until(
        self, done: Callable[[], bool], node_min: int, most: int = 1 << 30, avoid: str | None = None
    ) -> list[Unit] | None:
        """Take units, projects furthest above their fair share first, until ``done()`` (R6 fill-back);
        ``most``: no whole job holding more GPUs than that; ``avoid``: no job with a replica on that node."""
        ledger, claim = self.ledger, self.claim
        eligible = self.eligible
        if avoid is not None:

            def eligible(job: Job) -> bool:
                return self.eligible(job) and all(r.node != avoid for r in ledger.active[job.key])

        over = self.over
        heap = [(-over(p), p) for p in sorted(ledger.alloc) if p != claim.project and over(p) > 0]
        heapq.heapify(heap)
        return _take_until_fits(
            ledger,
            claim,
            done,
            heap,
            node_min=node_min,
            most=most,
            order=self.order,
            eligible=eligible,
            allowed=self.allowed,
            over=over,
            reason=self.reason,
            cause=Cause.RECLAIM,
        )

    def by_node(self, count: int) -> list[Unit] | None:
        """For replicas too big for victims scattered across nodes: one node at a time, until ``count``
        replicas fit (a rigid 2 x 8-GPU gang needs two whole nodes); all or nothing."""
        ledger, g = self.ledger, self.claim.gpus_per_replica
        mark = ledger.checkpoint()
        taken: list[Unit] = []
        while ledger.avail.slots(g) < count:
            # the node that fits one more replica after the fewest GPUs evicted there, then the fewest whole
            # jobs (R5: extras before whole jobs), each node taking what the rules allow in R5 order
            node = ledger.cheapest(ledger.avail.nodes, self._one_more_replica)
            if node is None:
                ledger.rollback(mark)
                return None
            taken += self.on_node(node, self._one_more(node))
        return taken

    def _one_more(self, node: str) -> int:
        """The GPUs ``node`` must have available to fit one more replica of the claimant."""
        g = self.claim.gpus_per_replica
        return (self.ledger.avail.value[node] // g + 1) * g

    def _one_more_replica(self, node: str) -> tuple[int, int] | None:
        """Take on ``node`` what makes room for one more replica: (GPUs, whole jobs) taken, or ``None``."""
        ledger, target = self.ledger, self._one_more(node)
        if ledger.capacity(node) < target:
            return None
        units = self.units_on(node)
        if ledger.avail.value[node] + _on(node, units) < target:
            return None
        taken = self._take_on(node, target, units)
        if ledger.avail.value[node] < target:
            return None
        return (sum(u.gpus for u in taken), sum(u.whole for u in taken))

    def units_on(self, node: str, *, local: bool = False) -> list[Unit]:
        """Units with a replica on ``node``, in R5 order: lowest priority; extras (highest index first) before
        whole jobs; newest job first. ``local``: only whole jobs with every replica on ``node``."""
        ledger = self.ledger
        keyed: list[tuple[tuple[int, int, float, str, int], Unit]] = []
        for key in ledger.on_node(node):
            job, act = ledger.jobs[key], ledger.active[key]
            if (
                not act
                or not job.preemptible
                or key in ledger.started
                or not self.eligible(job)
                or self.over(job.project) <= 0
            ):
                continue
            # one replica each, highest index first; with allowed sizes only the step down to the next one
            # (R16: taking a later step without it would leave the job off its sizes)
            steps = sizes.extras(job, act)
            for tail in steps[:1] if job.allowed_replicas else steps:
                if any(r.node == node for r in tail):
                    keyed.append(
                        (
                            (job.priority, 0, -job.submitted_at, job.name, -tail[0].index),
                            Unit(key, tail, False),
                        )
                    )
            if not local or all(r.node == node for r in act):
                keyed.append(((job.priority, 1, -job.submitted_at, job.name, 0), Unit(key, tuple(act), True)))
        keyed.sort(key=lambda ku: ku[0])
        return [u for _, u in keyed]

    def takeable_on(self, node: str, *, local: bool = False) -> int:
        """At most what the rules could free on ``node`` (a quick bound before trying)."""
        return _on(node, self.units_on(node, local=local))

    def on_node(self, node: str, target: int, *, local: bool = False) -> list[Unit]:
        """Take what the rules allow on ``node`` in R5 order until it has ``target`` GPUs available (or the
        units run out: the caller checks). ``local``: no whole job with replicas on other nodes."""
        return self._take_on(node, target, self.units_on(node, local=local))

    def _take_on(self, node: str, target: int, units: list[Unit]) -> list[Unit]:
        ledger, claim = self.ledger, self.claim
        taken: list[Unit] = []
        for unit in units:
            if ledger.avail.value[node] >= target:
                break
            # a whole job's unit is what is left of it after its extras here went (its master always is)
            still = {r.index for r in ledger.active[unit.key]}
            left = [r for r in unit.replicas if r.index in still]
            unit = Unit(unit.key, tuple(left), unit.whole)  # noqa: PLW2901
            if not self.allowed(unit.key[0], unit):
                continue
            why = f"{self.reason}: {_why(ledger, unit.key[0])} (on {node}, to make room for one replica)"
            ledger.release(unit.key, left, why, Cause.RECLAIM, claim.key)
            taken.append(unit)
        return taken


def reclaim(ledger: Ledger, order: VictimOrder, claim: Job, count: int, *, r2: bool) -> list[Unit] | None:
    """Take units from projects above their fair share until ``count`` replicas of ``claim`` fit."""
    g = claim.gpus_per_replica
    rules = Reclaimer(ledger, order, claim, count, r2=r2)
    # Within a cycle's owed phase the victims only dwindle, so a reclaim that failed for ``count`` replicas of
    # ``g`` GPUs fails for every later claim at least as big with the same powers (KAI's signatures).
    c_top = rules.c_top
    memo = (g, r2, c_top if c_top.startswith("dept:") else None, rules.c_top_ok)
    if count >= ledger.failed_reclaims.get(memo, 1 << 30):
        return None
    taken = rules.until(_fits(ledger, g, count), g)
    if taken is None and g > 1:
        taken = rules.by_node(count)
    if taken is None:
        ledger.failed_reclaims[memo] = min(count, ledger.failed_reclaims.get(memo, count))
    return taken


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
        _fits(ledger, claim.gpus_per_replica, count),
        heap,
        node_min=claim.gpus_per_replica,
        order=order,
        eligible=eligible,
        allowed=lambda p, u: True,
        over=lambda p: 1,
        reason=reason,
        cause=Cause.PREEMPT,
    )


def _fits(ledger: Ledger, g: int, count: int) -> Callable[[], bool]:
    return lambda: ledger.avail.slots(g) >= count


def _take_until_fits(
    ledger: Ledger,
    claim: Job,
    done: Callable[[], bool],
    heap: list[tuple[int, str]],
    *,
    node_min: int,
    most: int = 1 << 30,
    order: VictimOrder,
    eligible: Callable[[Job], bool],
    allowed: Callable[[str, Unit], bool],
    over: Callable[[str], int],
    reason: str,
    cause: Cause,
) -> list[Unit] | None:
    mark = ledger.checkpoint()
    taken: list[Unit] = []
    too_big: set[JobKey] = set()  # jobs whose next unit may not be taken: try the project's smaller ones
    while not done():
        if not heap:
            ledger.rollback(mark)
            return None
        _, project = heapq.heappop(heap)
        unit = order.next_unit(
            ledger, project, lambda j: j.key not in too_big and eligible(j), fits=node_min, most=most
        )
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
    return _fill_back(ledger, taken, done)


def _fill_back(ledger: Ledger, taken: list[Unit], done: Callable[[], bool]) -> list[Unit]:
    """R6: give back every victim the claimant turns out not to need, least preferred victims first."""
    kept: list[Unit] = []
    for unit in reversed(taken):
        if not unit.whole and (not ledger.active[unit.key] or not _gives_back_allowed(ledger, unit)):
            kept.append(unit)  # evicted whole (a worker never stays without its master), or R16's sizes
            continue
        mark = ledger.checkpoint()
        ledger.unrelease(unit.key, list(unit.replicas))
        if not done():
            ledger.rollback(mark)
            kept.append(unit)
    kept.reverse()
    return kept


def _gives_back_allowed(ledger: Ledger, unit: Unit) -> bool:
    """R16: giving this extra back (R6 fill-back) leaves its job at a count it may run at."""
    job = ledger.jobs[unit.key]
    return not job.allowed_replicas or sizes.allowed(job, len(ledger.active[unit.key]) + len(unit.replicas))


def _keeps_share(alloc: int, share: int, gpus: int, *, r2: bool) -> bool:
    """R7: a victim stays at or above its fair share, unless R2 needs an indivisible unit of it."""
    return alloc - gpus >= share or (r2 and alloc > share)


def _top_share(ledger: Ledger, project: str) -> int:
    return ledger.shares.top(ledger.projects[project])[1]


def _why(ledger: Ledger, project: str) -> str:
    promised = ledger.reserved.get(project, 0)
    more = f" and is promised {promised} this cycle" if promised else ""
    return (
        f"project {project} holds {counted(ledger.alloc[project], 'GPU')}{more}, "
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
            why = f"project {name} holds {counted(ledger.alloc[name], 'GPU')}, above its limit of {cap}"
            ledger.release(unit.key, list(unit.replicas), why, Cause.LIMIT, None)
