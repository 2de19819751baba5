"""Consolidation: make a whole node for a claim owed its guarantee (R2) when idle GPUs are scattered.

Contract: ``consolidate(ledger, claim, count, rules=None)`` runs after reclaim has failed. For each replica
still missing it tries the candidate nodes (big enough; those with the most GPUs available, or available and
takeable under ``rules``), and keeps the one whose freeing disrupts the fewest GPUs: it holds what that node
has for the claimant and moves small preemptible replicas off it, each stopped and GPUs held for it on
another node, so it restarts there next cycle. Single replicas move first (elastic extras, one-replica
jobs), then whole jobs (master and workers together) of at most the claimant's replica size: those whose
every replica is on that node, then those spread over other nodes too. A moved job's project keeps its GPU
count (GPUs released = GPUs held), so no project drops below its fair share (R7); it moves only jobs that
are not settling and not interactive (R3), and never a master without its whole job (R5). The GPUs held
for a moved replica are free or being released and promised to nobody.

With ``rules`` (a ``preemption.Reclaimer``: R5-R7 for this claimant) it also reclaims from projects above
their fair share: what the rules allow on the node being freed (extras, and whole jobs that live only
there), and, for a replica that must move and has nowhere to go, units elsewhere (no whole job bigger than
that replica, none with a replica on the node being freed). On failure the ledger is rolled back and
``None`` is returned (and remembered for the cycle: available GPUs and victims only dwindle); on success
the ``Moves`` made.

KAI-Scheduler's consolidation action does the same (victims must all be re-placed); here it serves only the
guarantee, as the last resort before a drain reservation.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from functools import partial

from scheduler.core import minruntime
from scheduler.core.ledger import JobKey, Ledger
from scheduler.core.memo import Consolidation, fails, note_failure
from scheduler.core.model import Job, Replica
from scheduler.core.plan import Cause
from scheduler.core.preemption import Reclaimer
from scheduler.core.victims import Unit

CANDIDATE_NODES = 8  # nodes tried per missing replica: bounds the search on big clusters


@dataclass(slots=True)
class Moves:
    """What a consolidation did: replicas moved, and units reclaimed (only with ``rules``)."""

    moved: list[Replica] = field(default_factory=list)
    reclaimed: list[Unit] = field(default_factory=list)


def consolidate(ledger: Ledger, claim: Job, count: int, *, rules: Reclaimer | None = None) -> Moves | None:
    """Make room for ``count`` replicas of ``claim`` (the contract above); ``rules``: also reclaim, R5-R7,
    from projects above their fair share, on the node being freed first, then elsewhere for the moved
    replicas to land on when no GPUs are available for them."""
    g = claim.gpus_per_replica
    memo = Consolidation(g, rules is not None)
    if fails(ledger.memo.consolidations, memo, count):  # what failed for fewer fails for more
        return None
    mark = ledger.checkpoint()
    fit = min(ledger.avail.slots(g), count)
    if fit:
        ledger.place(claim, fit, reserve=True)
    moves = Moves()
    for _ in range(count - fit):
        if not _free_one_node(ledger, claim, rules, moves):
            ledger.rollback(mark)
            note_failure(ledger.memo.consolidations, memo, count)
            return None
    return moves


def _free_one_node(ledger: Ledger, claim: Job, rules: Reclaimer | None, moves: Moves) -> bool:
    g = claim.gpus_per_replica

    def candidate(node: str) -> bool:
        return ledger.capacity(node) >= g and ledger.avail.value[node] < g

    if rules is None:
        nodes = ledger.avail.most_available(CANDIDATE_NODES, candidate)
    else:  # the nodes with the most GPUs available or takeable from projects above their fair share
        scored = [
            (-(ledger.avail.value[n] + rules.takeable_on(n, local=True)), i, n)
            for i, n in enumerate(ledger.avail.nodes)
            if candidate(n)
        ]
        nodes = [n for _, _, n in heapq.nsmallest(CANDIDATE_NODES, scored)]

    def attempt(node: str) -> tuple[int, int] | None:
        """(GPUs moved or reclaimed, GPUs reclaimed) to free ``node``, or ``None``."""
        trial = Moves()
        if not _move_off(ledger, claim, node, rules, trial):
            return None
        lost = sum(u.gpus for u in trial.reclaimed)
        return (sum(r.gpus for r in trial.moved) + lost, lost)

    # the candidate that disrupts the fewest GPUs, then reclaims fewest
    best = ledger.cheapest(nodes, attempt)
    return best is not None and _move_off(ledger, claim, best, rules, moves)


def _move_off(ledger: Ledger, claim: Job, node: str, rules: Reclaimer | None, moves: Moves) -> bool:
    g = claim.gpus_per_replica
    if rules is not None:
        moves.reclaimed += rules.on_node(node, g, local=True)
    held = _grab(ledger, claim, node, 0)
    for key, replicas in _movable(ledger, node, g):
        if held >= g:
            break
        # a whole job's unit is what is left of it after its extras here moved
        still = {r.index for r in ledger.active[key]}
        left = [r for r in replicas if r.index in still]
        after = _move(ledger, claim, node, key, left, held=held)
        if after is None and rules is not None:
            # room elsewhere for it: reclaim from jobs with nothing on this node (whose GPUs are held)
            need, big = sum(r.gpus for r in left), max(r.gpus for r in left)
            fits = partial(_moves, ledger, claim, node, key, left, held=held)
            taken = rules.until(fits, big, need, avoid=node)
            if taken is not None:
                moves.reclaimed += taken
                after = _move(ledger, claim, node, key, left, held=held)
        if after is not None:
            held = after
            moves.moved += left
    return held >= g


def _move(
    ledger: Ledger, claim: Job, node: str, key: JobKey, left: list[Replica], *, held: int
) -> int | None:
    """Stop ``left`` (replicas of one job), hold for the claimant what that frees on ``node``, and hold GPUs
    elsewhere for each of them; the GPUs now held on ``node``, or ``None`` (rolled back) if one fits nowhere.
    The job's own replicas elsewhere free their GPUs first (a job moving whole may land where it was)."""
    mark = ledger.checkpoint()
    why = f"moved off {node} to make a whole node for {claim.project}/{claim.name}, owed its guarantee"
    why += minruntime.overridden(ledger.young, key, claim.project)
    ledger.release(key, left, why, Cause.CONSOLIDATE, claim.key)
    held = _grab(ledger, claim, node, held)
    if not _hold_elsewhere(ledger, ledger.jobs[key], left):
        ledger.rollback(mark)
        return None
    return held


def _moves(ledger: Ledger, claim: Job, node: str, key: JobKey, left: list[Replica], *, held: int) -> bool:
    """Whether ``_move`` would succeed now (tried, then rolled back)."""
    mark = ledger.checkpoint()
    ok = _move(ledger, claim, node, key, left, held=held) is not None
    ledger.rollback(mark)
    return ok


def _grab(ledger: Ledger, claim: Job, node: str, held: int) -> int:
    """Hold for the claimant what ``node`` has available, up to one replica; returns the GPUs held there."""
    gpus = min(ledger.avail.value[node], claim.gpus_per_replica - held)
    ledger.reserve_on(claim, node, gpus)
    return held + gpus


def _hold_elsewhere(ledger: Ledger, job: Job, replicas: list[Replica]) -> bool:
    """Hold GPUs free or being released (and promised to nobody) on other nodes for each of these replicas
    (best fit, R12); False if one fits nowhere. (The node being freed has nothing available: ``_grab``.)"""
    for r in replicas:
        dest = ledger.avail.best_fit(r.gpus)
        if dest is None:
            return False
        ledger.reserve_on(job, dest, r.gpus)
    return True


def _movable(ledger: Ledger, node: str, g: int) -> list[tuple[JobKey, list[Replica]]]:
    """Units on ``node`` that may move: replicas of preemptible jobs that are not settling, not resized this
    cycle and smaller than the claimant's. First single replicas (an elastic extra, or a one-replica job),
    then whole jobs (a master moves only with its whole job, R5) of at most the claimant's replica size:
    those with every replica on ``node`` first, then those with replicas elsewhere too (they move whole:
    any move restarts a job), smallest first."""
    singles: list[tuple[JobKey, Replica]] = []
    wholes: list[tuple[bool, int, JobKey, list[Replica]]] = []
    for key in ledger.on_node(node):
        job, act = ledger.jobs[key], ledger.active[key]
        # R18's longer settle time does not hold up a guarantee: only the plain one spares a job here
        if job.interactive or ledger.just_resized(job) or key in ledger.started or key in ledger.released:
            continue
        # a job with allowed sizes (R16) moves whole only: a single replica's move would leave it off its sizes
        extras = act[job.min_replicas :] if len(act) > job.min_replicas and not job.allowed_replicas else []
        if extras and key in ledger.resize_costs and sum(r.gpus for r in act) > g:
            extras = []  # R18: an extra's move restarts its whole job: never many replicas to place one
        choices = extras if extras else (act if len(act) == 1 else [])
        singles += [(key, r) for r in choices if r.node == node and r.gpus < g]
        gpus, spread = sum(r.gpus for r in act), any(r.node != node for r in act)
        if len(act) > 1 and (gpus <= g or not spread) and all(r.gpus < g for r in act):
            wholes.append((spread, gpus, key, list(act)))
    singles.sort(key=lambda kr: (-kr[1].gpus, kr[0], -kr[1].index))
    wholes.sort(key=lambda w: (w[0], w[1], w[2]))
    return [(key, [r]) for key, r in singles] + [(key, replicas) for _, _, key, replicas in wholes]
