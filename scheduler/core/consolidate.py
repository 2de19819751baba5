"""Consolidation: make a whole node for a claim owed its guarantee (R2) when idle GPUs are scattered.

Contract: ``consolidate(ledger, claim, count)`` runs after reclaim has failed. For each replica still
missing it picks the node closest to fitting one (most GPUs free or being released, big enough), holds what
that node has for the claimant, and moves small preemptible replicas off it: each is stopped and GPUs are
held for it on a free node elsewhere, so it restarts there next cycle. Single replicas move first (elastic
extras, one-replica jobs), then whole jobs whose every replica is on that node (master and workers
together). A moved job's project keeps its GPU count (GPUs released = GPUs held), so no project drops below
its fair share (R7); it moves only jobs that are not settling and not interactive (R3), and never a master
without its whole job (R5). On failure the
ledger is rolled back and ``None`` is returned; on success the replicas moved.

KAI-Scheduler's consolidation action does the same (victims must all be re-placed); here it serves only the
guarantee, as the last resort before a drain reservation.
"""

from __future__ import annotations

from scheduler.core.ledger import JobKey, Ledger
from scheduler.core.model import Job, Replica
from scheduler.core.plan import Cause

CANDIDATE_NODES = 8  # nodes tried per missing replica: bounds the search on big clusters


def consolidate(ledger: Ledger, claim: Job, count: int) -> list[Replica] | None:
    g = claim.gpus_per_replica
    if count >= ledger.failed_consolidations.get(g, 1 << 30):
        return None  # free GPUs only dwindle within a cycle: what failed for fewer fails for more
    mark = ledger.checkpoint()
    fit = min(ledger.avail.slots(g), count)
    if fit:
        ledger.place(claim, fit, reserve=True)
    moved: list[Replica] = []
    for _ in range(count - fit):
        step = _free_one_node(ledger, claim)
        if step is None:
            ledger.rollback(mark)
            ledger.failed_consolidations[g] = min(count, ledger.failed_consolidations.get(g, count))
            return None
        moved += step
    return moved


def _free_one_node(ledger: Ledger, claim: Job) -> list[Replica] | None:
    g = claim.gpus_per_replica

    def candidate(node: str) -> bool:
        return ledger.capacity(node) >= g and ledger.avail.value[node] < g

    for node in ledger.avail.most_available(CANDIDATE_NODES, candidate):
        mark = ledger.checkpoint()
        moved = _move_off(ledger, claim, node)
        if moved is not None:
            return moved
        ledger.rollback(mark)
    return None


def _move_off(ledger: Ledger, claim: Job, node: str) -> list[Replica] | None:
    g = claim.gpus_per_replica
    held = ledger.avail.value[node]
    ledger.reserve_on(claim, node, held)
    moved: list[Replica] = []
    for key, replicas in _movable(ledger, node, g):
        if held >= g:
            break
        # a whole job's unit is what is left of it after its extras here moved
        still = {r.index for r in ledger.active[key]}
        left = [r for r in replicas if r.index in still]
        mark = ledger.checkpoint()
        if not _hold_elsewhere(ledger, ledger.jobs[key], left):
            ledger.rollback(mark)
            continue
        why = f"moved off {node} to make a whole node for {claim.project}/{claim.name}, owed its guarantee"
        ledger.release(key, left, why, Cause.CONSOLIDATE, claim.key)
        gpus = sum(r.gpus for r in left)
        ledger.reserve_on(claim, node, min(gpus, g - held))
        held += gpus
        moved += left
    return moved if held >= g else None


def _hold_elsewhere(ledger: Ledger, job: Job, replicas: list[Replica]) -> bool:
    """Hold free GPUs on other nodes for each of these replicas (best fit, R12); False if one fits nowhere."""
    for r in replicas:
        dest = ledger.free.best_fit(r.gpus)
        if dest is None:
            return False
        ledger.reserve_on(job, dest, r.gpus)
    return True


def _movable(ledger: Ledger, node: str, g: int) -> list[tuple[JobKey, list[Replica]]]:
    """Units on ``node`` that may move: replicas of preemptible jobs that are not settling, not resized this
    cycle and smaller than the claimant's. First single replicas (an elastic extra, or a one-replica job),
    then whole jobs with every replica on ``node`` (a master moves only with its whole job, R5)."""
    singles: list[tuple[JobKey, Replica]] = []
    wholes: list[tuple[int, JobKey, list[Replica]]] = []
    for key in ledger.on_node(node):
        job, act = ledger.jobs[key], ledger.active[key]
        if job.interactive or ledger.settling(job) or key in ledger.started or key in ledger.released:
            continue
        extras = act[job.min_replicas :] if len(act) > job.min_replicas else []
        choices = extras if extras else (act if len(act) == 1 else [])
        singles += [(key, r) for r in choices if r.node == node and r.gpus < g]
        if len(act) > 1 and all(r.node == node and r.gpus < g for r in act):
            wholes.append((sum(r.gpus for r in act), key, list(act)))
    singles.sort(key=lambda kr: (-kr[1].gpus, kr[0], -kr[1].index))
    wholes.sort(key=lambda w: (w[0], w[1]))
    return [(key, [r]) for key, r in singles] + [(key, replicas) for _, key, replicas in wholes]
