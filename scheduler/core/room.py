"""Making room for one claim: the one ordered victim search of a start or of growth (R2, R7, R10, R6).

Contract: ``make_room(ledger, order, claim, count, ...)`` either leaves releases in the ledger that make
``count`` replicas of ``claim`` fit (on GPUs free or being released) and returns the units taken, or leaves
the ledger unchanged and returns ``None``. It tries the candidate victim sets of ``victims.searches`` in
order (reclaim from other projects down to a ``Floor``; the claimant's own lower-priority jobs first, R10)
and keeps the first that works, giving back what the claimant did not need (R6). A preemption inside a
project happens only when the preempting job then fits: on the nodes, under its project's caps (limit,
quota), and, for a training job, without dropping its own project below its guarantee (a reclaim that
spared the project's big low-priority job is not undone by the project's own priority). Other projects'
jobs inside their minimum runtime are spared unless the search says otherwise (R15, R2 wins); the
claimant's own lower-priority jobs are not (R10 is the project's own order).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from scheduler.core.ledger import JobKey, Ledger
from scheduler.core.model import Job
from scheduler.core.plan import Cause
from scheduler.core.preemption import (
    Reclaimer,
    fill_back,
    fits,
    from_siblings,
    lost_to_reclaim,
    reclaim,
    standing,
)
from scheduler.core.victims import Search, Unit, VictimOrder, searches


def make_room(
    ledger: Ledger,
    order: VictimOrder,
    claim: Job,
    count: int,
    *,
    entitled: bool,
    below_guarantee: bool,
    may_preempt: bool = True,
    growth: bool = False,
) -> list[Unit] | None:
    """Make room for ``count`` replicas of ``claim``: the first of ``victims.searches`` that works, else
    ``None`` (ledger unchanged). ``[]``: GPUs already being released serve it (they are held for it).

    ``entitled``: its project's fair share covers the claim as the project stands; ``below_guarantee``: the
    project is below its guarantee; ``growth``: a running job's growth, which must also end within its
    project's fair share when it preempts, and spares its project's jobs that are settling after a resize
    (R7)."""
    need = count * claim.gpus_per_replica
    if entitled and ledger.slots_for(claim, ledger.avail) >= count and ledger.room(claim) >= need:
        return []
    own_hopeless = False
    siblings = -1  # what a reclaim inside its department could free, where its caps leave too little room
    for search in searches(
        entitled=entitled,
        below_guarantee=below_guarantee,
        may_reclaim=ledger.config.reclaim and not lost_to_reclaim(ledger, claim.project),
        may_preempt=may_preempt and order.has_lower(claim),
        young=bool(ledger.young),
    ):
        if not search.own:
            short = ledger.room(claim) < need
            if short and siblings < 0:
                siblings = from_siblings(ledger, claim, below_guarantee=below_guarantee)
            # decision 36: a department at its limit still moves GPUs between its own projects
            if not short or ledger.room(claim, siblings=siblings) >= need:
                units = reclaim(
                    ledger,
                    order,
                    claim,
                    count,
                    below_guarantee=below_guarantee,
                    floor=search.floor,
                    spare=search.spare,
                    room=short,
                )
                if units is not None:
                    return units
            continue
        if own_hopeless:
            continue
        outcome = _own_first(
            ledger, order, claim, count, search, below_guarantee=below_guarantee, growth=growth
        )
        if outcome.units is not None:
            return outcome.units
        own_hopeless = outcome.hopeless
    return None


class OwnFirst(NamedTuple):
    """What a search with the claimant's own jobs first found: the units it took (R6's fill-back done), or
    ``None`` with the ledger rolled back; then ``hopeless``: its own jobs can neither make it fit nor bring its
    project within its fair share, so no other floor will help."""

    units: list[Unit] | None
    hopeless: bool = False


_NEXT_FLOOR = OwnFirst(None)
_HOPELESS = OwnFirst(None, hopeless=True)


def preempted_for(claim: Job, victim: Job) -> str:
    """R10's words: a lower-priority victim gives way to a higher-priority job; one of the same priority
    gives way only to an interactive job (decision 8), and is told so."""
    kind = "higher-priority" if victim.priority < claim.priority else "interactive"
    return f"preempted for {kind} job {claim.project}/{claim.name} of the same project"


def _own_first(
    ledger: Ledger,
    order: VictimOrder,
    claim: Job,
    count: int,
    search: Search,
    *,
    below_guarantee: bool,
    growth: bool,
) -> OwnFirst:
    """R10, then R2/R7 down to ``floor``: take the claimant's own lower-priority units (R5 order) until it
    fits; if they do not suffice, reclaim the rest from other projects, provided the claimant's project is
    then within its fair share."""
    g, p, floor = claim.gpus_per_replica, claim.project, search.floor
    need, share = count * g, ledger.shares.project[p]
    # a training job's preemption never drops its own project below its guarantee (what a reclaim spared)
    keep = 0 if claim.interactive else min(ledger.shares.guarantee[p], ledger.claimed(p))
    placeable = fits(ledger, claim, count)
    # R17: a running job that must stay in its master's domain is helped only by GPUs freed there
    home = ledger.home(claim) if ledger.domains.required(claim) else None
    mark = ledger.checkpoint()
    skipped: set[JobKey] = set()

    def within() -> bool:
        return ledger.committed(p) + need <= share

    def placed() -> bool:
        return placeable() and ledger.room(claim) >= need and (within() or not growth)

    def eligible(job: Job) -> bool:
        return job.key not in skipped and order.outranks(claim, job) and not (growth and ledger.settling(job))

    taken: list[Unit] = []
    while not placed():
        # any unit helps bring the project within its share; after that only units where a replica fits
        unit = order.next_unit(ledger, p, eligible, fits=g if within() else 0, within=home)
        if unit is None:
            break
        why = f"{preempted_for(claim, ledger.jobs[unit.key])}: {standing(ledger, p)}"
        if ledger.claimed(p) - unit.gpus + need < keep:
            # decision 37: the floor is judged on the set R6 keeps: units taken before this one that it
            # makes useless (an extra that freed nothing the claimant can use) are given back first
            kept = _with_fill_back(
                ledger, claim, unit, why=why, taken=taken, placed=placed, floor=keep - need
            )
            if kept is None:
                skipped.add(unit.key)
                continue
            taken = kept
            break
        ledger.release(unit.key, list(unit.replicas), why, Cause.PREEMPT, claim.key)
        taken.append(unit)
    if not placed():
        if floor is None or not within() or ledger.room(claim) < need:
            ledger.rollback(mark)
            return _HOPELESS
        # R5 order only: node-targeted reclaim (``Reclaimer.by_node``) serves claims of other projects' GPUs
        # alone; here the own units freed already shape where the claimant goes
        rules = Reclaimer(
            ledger, order, claim, count, below_guarantee=below_guarantee, floor=floor, spare=search.spare
        )
        more = rules.until(placeable, g)
        if more is None:
            ledger.rollback(mark)
            return _NEXT_FLOOR
        taken += more

    def done() -> bool:
        others = any(u.key[0] != p and u.key in ledger.released for u in taken)
        return placed() and (within() or not others)

    return OwnFirst(fill_back(ledger, taken, done))


def _with_fill_back(
    ledger: Ledger,
    claim: Job,
    unit: Unit,
    *,
    why: str,
    taken: list[Unit],
    placed: Callable[[], bool],
    floor: int,
) -> list[Unit] | None:
    """R6 before R10's floor: take ``unit``, which alone would drop the claimant's project below ``floor``
    after what is taken already; if the claimant then fits and R6 gives back enough of the earlier units to
    keep the project at ``floor`` (GPUs, the claim's need aside), the units kept; else ``None`` (ledger as
    before)."""
    mark = ledger.checkpoint()
    ledger.release(unit.key, list(unit.replicas), why, Cause.PREEMPT, claim.key)
    if placed():
        kept = fill_back(ledger, [*taken, unit], placed)
        if ledger.claimed(claim.project) >= floor:
            return kept
    ledger.rollback(mark)
    return None
