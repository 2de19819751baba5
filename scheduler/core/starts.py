"""Starts and holds: a pending gang starts whole (R8), by reclaim or preemption if need be, or holds nodes.

Contract: ``serve_start`` tries, for one pending job, the least disruptive step first and stops at the first
that works:

1. place on idle GPUs;
2. wait for GPUs already being released (they are reserved for it);
3. reclaim from projects above their fair share (R5-R7) when its project stays within its own, or preempt
   lower-priority jobs of its own project (R10): ``room.make_room``;
4. a start owed its guarantee moves small replicas to make a whole node, reclaiming if need be (R2);
5. a start blocked by fragmentation reserves the nodes closest to fitting it, so they drain for it instead of
   being refilled by small jobs (R12: the 8-GPU replica does not starve), holding at most what its project is
   owed (GPUs held beyond its fair share would be other projects'), only nodes with GPUs free or being
   released (a multi-GPU replica owed its guarantee may mark a full node), and each node for one job at most.

A failure is recorded (a reason, a place in line) and remembered for the cycle (``memo``): the same-shape
pending jobs right behind it in its project's line fail alike and are taken from the line at once.
``hold_place`` is a blocked start's one chance when it is not owed (preempt lower priority in its project,
else drain). ``place_in_room``, ``consolidate_for_guarantee`` and ``explain_start`` serve growth as well.
"""

from __future__ import annotations

import bisect
from collections import deque

from scheduler.core import explain, jobindex
from scheduler.core.claims import Claims, Outcome, below_guarantee, entitled_to, record
from scheduler.core.consolidate import consolidate
from scheduler.core.ledger import Ledger
from scheduler.core.memo import shape_of
from scheduler.core.model import Job
from scheduler.core.preemption import Reclaimer, from_siblings, lost_to_reclaim
from scheduler.core.room import make_room
from scheduler.core.victims import Unit, VictimOrder


def serve_start(
    ledger: Ledger, order: VictimOrder, claims: Claims, job: Job, head_of_line: set[str], *, queue: deque[Job]
) -> None:
    k, g = job.min_replicas, job.gpus_per_replica
    blocked = _blocked(ledger, order, job, k * g)
    if blocked:
        # the same-shape pending jobs right behind it are blocked alike on this unchanged ledger (and, being
        # owed or not alike, would be served next in the same phase)
        _record_alike(ledger, claims, job, queue, blocked)
        return
    memo = ledger.memo
    if job.key in memo.held_in_vain:
        _record_alike(ledger, claims, job, queue, explain.pending(ledger, job, k * g, entitled=False))
        return
    shape = shape_of(job)
    failed = memo.starts.get(shape)
    if failed is not None and failed[0] == ledger.version():
        # failed before on this ledger (``FailedStart``): so do the same-shape jobs behind it
        _record_alike(ledger, claims, job, queue, explain.pending(ledger, job, k * g, entitled=failed[1]))
        return
    if ledger.slots_for(job, ledger.free) >= k and ledger.room(job) >= k * g:
        ledger.place(job, k, reserve=False)
        claims.start_reasons[job.key] = explain.started(ledger, job, k)
        return
    entitled = entitled_to(ledger, job, k * g)
    units = make_room(
        ledger, order, job, k, entitled=entitled, below_guarantee=below_guarantee(ledger, job.project)
    )
    if units is not None:
        place_in_room(ledger, claims, job, k, units)
        return
    if entitled and consolidate_for_guarantee(ledger, order, claims, job, k):
        return
    if _try_drain(ledger, claims, job, head_of_line):
        _may_retry(ledger, claims, job)  # it holds GPUs as they drain; room made later may start it now
        return
    memo.starts[shape] = (ledger.version(), entitled)
    record(claims, job, explain.pending(ledger, job, k * g, entitled=entitled), waiting=True)
    _may_retry(ledger, claims, job)


def _record_alike(ledger: Ledger, claims: Claims, job: Job, queue: deque[Job], reason: str) -> None:
    """A start that fails with ``reason``, and the pending jobs of the same shape right behind it in its
    project's line that are held in vain as it is or not: they would each fail the same way, one after the
    other (a failure changes neither the ledger nor the project's rank, so the project stays first in turn),
    so they are taken from the line at once (and their reasons recorded when the plan explains)."""
    record(claims, job, reason, waiting=True)
    _may_retry(ledger, claims, job)
    held_in_vain = ledger.memo.held_in_vain
    held = job.key in held_in_vain
    while queue and same_pending(ledger, job, nxt := queue[0]) and (nxt.key in held_in_vain) == held:
        queue.popleft()
        _may_retry(ledger, claims, nxt)
        if claims.explain:
            record(claims, nxt, reason, waiting=True)


def _may_retry(ledger: Ledger, claims: Claims, job: Job) -> None:
    if claims.owed_phase:
        ledger.memo.retry.append((job, len(ledger.release_log)))


def same_pending(ledger: Ledger, job: Job, other: Job) -> bool:
    """Whether ``other`` (behind ``job`` in the same project's line) is a pending job of the same ``Shape``."""
    return (
        other.gpus_per_replica == job.gpus_per_replica
        and other.min_replicas == job.min_replicas
        and other.priority == job.priority
        and other.interactive == job.interactive
        and other.topology == job.topology
        and not ledger.active[other.key]
        and other.key not in ledger.released
    )


def _blocked(ledger: Ledger, order: VictimOrder, job: Job, need: int) -> str | None:
    """Why caps keep ``need`` more GPUs from this job, counting what preempting the lower-priority jobs of its
    own project would free under its limit (R10 at a limit, R11) and, for a claim its fair share covers, what
    a reclaim from the other projects of its department would free under the department's (decision 36);
    ``None`` when nothing blocks it."""
    reason = explain.blocked_by_caps(ledger, job, need)
    if reason is None or reason.startswith(explain.BEYOND):
        return reason
    freed = order.lower_gpus(ledger, job) if order.has_lower(job) else 0
    siblings = (
        from_siblings(ledger, job, below_guarantee=below_guarantee(ledger, job.project))
        if entitled_to(ledger, job, need)
        else 0
    )
    if not freed and not siblings:
        return reason
    return reason if explain.blocked_by_caps(ledger, job, need, freed=freed, siblings=siblings) else None


def blocked_start(ledger: Ledger, job: Job) -> bool:
    """A pending job whose gang does not fit on idle GPUs."""
    return not ledger.active[job.key] and ledger.slots_for(job, ledger.free) < job.min_replicas


def hold_place(ledger: Ledger, order: VictimOrder, claims: Claims, job: Job, head_of_line: set[str]) -> bool:
    """A blocked start ahead of owed claims of its own project: preempt lower priority (R10), else drain."""
    k = job.min_replicas
    if _blocked(ledger, order, job, k * job.gpus_per_replica) is None:
        units = make_room(
            ledger, order, job, k, entitled=False, below_guarantee=below_guarantee(ledger, job.project)
        )
        if units is not None:
            place_in_room(ledger, claims, job, k, units)
            return True
    return _try_drain(ledger, claims, job, head_of_line)


def place_in_room(ledger: Ledger, claims: Claims, job: Job, count: int, units: list[Unit]) -> None:
    """Place ``count`` replicas where ``make_room`` made room: on GPUs being released (held for it), or at once
    on idle GPUs when what blocked it was a cap (its limit or quota) that its preempted jobs made room under."""
    if units and ledger.slots_for(job, ledger.free) >= count:
        ledger.place(job, count, reserve=False)
        explain_start(ledger, claims, job, owed=True)
        return
    ledger.place(job, count, reserve=True)
    reason = explain.waiting_for_release(ledger, job, count * job.gpus_per_replica, units)
    record(claims, job, reason, waiting=True)


def consolidate_for_guarantee(
    ledger: Ledger, order: VictimOrder, claims: Claims, job: Job, count: int
) -> bool:
    """Last resort for a claim owed its guarantee (R2): move small replicas to make whole nodes, onto the GPUs
    available now, else also reclaiming (R5-R7) on the node being freed and for the moved replicas, when what
    projects above their fair share hold is scattered in small replicas on nodes shared with others."""
    g = job.gpus_per_replica
    if ledger.committed(job.project) >= ledger.shares.guarantee[job.project] or ledger.domains.required(job):
        return False  # (a job held to one domain: consolidation frees nodes, not domains; R17)
    if ledger.room(job) < count * g:
        return False  # its caps (limit, quota, department) would keep it from the node made whole
    moves = consolidate(ledger, job, count)
    if moves is None and g > 1 and ledger.config.reclaim and not lost_to_reclaim(ledger, job.project):
        moves = consolidate(
            ledger, job, count, rules=Reclaimer(ledger, order, job, count, below_guarantee=True)
        )
    if moves is None:
        return False
    reason = explain.consolidating(ledger, job, count * g, moves.moved, moves.reclaimed)
    record(claims, job, reason, waiting=True)
    return True


def start_whole(ledger: Ledger, claims: Claims) -> None:
    """R18 (decisions 62, 71): a job that would start now and grow into GPUs being released for it starts
    once, at its full size, when they are free. With a resize cost, growing a job that has just started
    restarts it (every replica pays the restart again) for one cycle's head start. Without one, a job that
    has just started may not grow for its settle time unless its project is below its guarantee (R2), so the
    GPUs released for it would go to other claims meanwhile and more of its project's jobs be preempted when
    it may grow. Its started replicas become firm holds on the same GPUs, beside those it waits for; with
    neither a resize cost nor a settle time longer than until the next plan nothing changes. Only GPUs being
    released make it wait: when all that is held for it is idle now, it starts at once."""
    costs, settle = ledger.resize_costs, ledger.config.settle_seconds
    if not costs and settle <= ledger.config.next_plan_seconds:
        return
    waiting = {(r.project, r.job) for r in ledger.reservations if r.firm}
    for key in [k for k in ledger.started if k in waiting]:
        job, cost = ledger.jobs[key], costs.get(key, 0.0) if costs else 0.0
        if any(not r.releasing for r in job.replicas):
            continue  # a running job's growth is a resize either way
        held_here = [r for r in ledger.reservations if r.firm and (r.project, r.job) == key]
        if not any(r.node in ledger.dipped for r in held_here):
            continue  # what is held for it is idle now, not being released: waiting would leave it idle
        growth = sum(r.gpus for r in held_here)
        if cost <= 0 and not waits_out_settle(ledger, job, growth):
            continue  # it grows in the next plan, at no cost: settled by then, or owed to its guarantee (R2)
        now = len(ledger.started[key])
        ledger.defer_start(job)
        claims.start_reasons.pop(key, None)
        held = sum(r.gpus for r in ledger.reservations if (r.project, r.job) == key)
        outcome = claims.outcomes.get(key)
        why = outcome.reason if outcome is not None else "GPUs are being released for it"
        replicas = f"{now} {'replica' if now == 1 else 'replicas'} now"
        reason = (
            f"starts with {held} GPUs once those being released are free, rather than with {replicas} and "
            + (
                f"a restart to grow at once (its resize costs {cost:g} s)"
                if cost > 0
                else f"{settle:g} s (its settle time) before it may grow into them"
            )
            + f"; {why}"
        )
        if outcome is None:
            record(claims, job, reason, waiting=True)
        else:
            claims.outcomes[key] = Outcome(reason, outcome.waiting)


def waits_out_settle(ledger: Ledger, job: Job, growth: int) -> bool:
    """Whether ``job`` (no resize cost), started now, could not grow by the ``growth`` GPUs held for it in the
    next plan: it still settles then (R7) and its project is at its guarantee without them (R2 would let it
    grow)."""
    config = ledger.config
    return (
        config.settle_seconds > config.next_plan_seconds
        and ledger.claimed(job.project) - growth >= ledger.shares.guarantee[job.project]
    )


def explain_start(ledger: Ledger, claims: Claims, job: Job, *, owed: bool) -> None:
    """The reason of the job's one start or grow decision this cycle, for all the replicas it got."""
    total = len(ledger.started[job.key])
    if any(not r.releasing for r in job.replicas):
        claims.start_reasons[job.key] = explain.grown(ledger, job, total, owed=owed)
    else:
        claims.start_reasons[job.key] = explain.started(ledger, job, total)


def _try_drain(ledger: Ledger, claims: Claims, job: Job, head_of_line: set[str]) -> bool:
    """Step 6: the first blocked start of a project holds the nodes closest to fitting it, if the jobs ahead
    of it in its project's line leave room for it in the project's fair share."""
    k, g = job.min_replicas, job.gpus_per_replica
    if (
        job.project in head_of_line
        or job.key in ledger.released
        or ledger.domains.required(job)  # drains hold nodes, not domains (R17)
        or explain.blocked_by_caps(ledger, job, k * g)
    ):
        return False
    if _ahead_in_line(ledger, job) + k * g > ledger.shares.project[job.project]:
        return False
    mark = ledger.checkpoint()
    nodes = _drain_reservation(ledger, job, k)
    if not nodes:
        ledger.rollback(mark)
        return False
    head_of_line.add(job.project)
    record(claims, job, explain.draining(ledger, job, nodes), waiting=True)
    return True


def _ahead_in_line(ledger: Ledger, job: Job) -> int:
    """GPUs its project held at the start of the cycle in jobs ahead of this one in the project's line
    (younger ones do not count; ``jobindex.line``)."""
    line = jobindex.line(ledger.index, job.project)
    return line.ahead[bisect.bisect_left(line.keys, jobindex.line_key(job))]


def _drain_reservation(ledger: Ledger, job: Job, k: int) -> list[str]:
    """Hold what fits now and the nodes closest to fitting the rest, so they drain for this job."""
    g = job.gpus_per_replica
    # at most what its project is owed: GPUs held beyond its fair share would be other projects' (R2)
    budget = max(0, ledger.shares.project[job.project] - ledger.committed(job.project))
    fit = min(ledger.avail.slots(g), k, budget // g)
    nodes = [p.node for p in ledger.place(job, fit, reserve=True, firm=False)] if fit else []
    budget -= fit * g

    if budget <= 0:
        return nodes  # nothing more could be held for it

    # a node is held for one job at most, and only where GPUs are free or being released: a hold on a node
    # where nothing will come free holds nothing (the job's reason then says what it waits for). Only a
    # multi-GPU replica owed its guarantee still marks a full node (R2 keeps it first in line for it).
    def open_to(n: str) -> bool:
        return ledger.capacity(n) >= g and ledger.drain_holder.get(n, job.key) == job.key

    owed = g > 1 and below_guarantee(ledger, job.project)
    for node in ledger.avail.most_available(k - fit, open_to, min_value=0 if owed else 1):
        if budget <= 0:
            break
        budget -= ledger.reserve_node(job, node, budget)
        nodes.append(node)
    return nodes
