"""Growth: restores after a lost node (R8, R16), growth owed by fair share (R2, R9), then idle growth (R4, R9).

Contract: ``restore_gangs`` runs before the claims: a running job below ``min_replicas`` (or, R16, at a count
it may not run at) gets its replicas back on idle GPUs or gives up the rest. ``serve_growth`` is a running
job's claim in the line: it grows towards its project's fair share, on idle GPUs, by reclaim (R2: for what
its guarantee needs, victims may drop below their share) or by preempting lower-priority jobs of its own
project (R10). ``grow_idle`` runs after the claims and lends what is still idle to elastic jobs below
``max_replicas``, the project furthest below its fair share first; each job takes all the replicas it can at
once (every resize restarts workers). R19 (``goodput``): inside a project, and among projects already at their
fair share, the job that turns a GPU into the most progress goes first (``scheduler.core.goodput``). R18: growth that is not owed to the guarantee happens only when it pays
for the restart of the replicas the job already runs (``resize_cost.pays``); a job held back says why.
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

from scheduler.core import goodput, jobindex, resize_cost, sizes
from scheduler.core.claims import Claims
from scheduler.core.ledger import JobKey, Ledger
from scheduler.core.model import Job, Replica
from scheduler.core.plan import Cause
from scheduler.core.room import make_room
from scheduler.core.starts import consolidate_for_guarantee, explain_start, place_in_room
from scheduler.core.victims import VictimOrder


def restore_gangs(ledger: Ledger, claims: Claims) -> None:
    """A running job below ``min_replicas`` (a node was lost) gets its replicas back now, or goes back to
    pending whole, so that no gang sits below its minimum holding GPUs (R8)."""
    for key in _short_or_released(ledger):  # in key order; limits (step 2) only took replicas away
        job, act = ledger.jobs[key], ledger.active[key]
        if not act or len(act) >= job.min_replicas:
            if act and job.allowed_replicas and not sizes.allowed(job, len(act)):
                _restore_size(ledger, claims, job, act)
            continue
        missing = job.min_replicas - len(act)
        if (
            ledger.slots_for(job, ledger.free) >= missing
            and ledger.room(job) >= missing * job.gpus_per_replica
        ):
            ledger.place(job, missing, reserve=False)
            claims.start_reasons[key] = (
                f"restored {missing} lost replicas to reach min_replicas {job.min_replicas}"
            )
        else:
            why = f"{len(act)} of min {job.min_replicas} replicas left and no GPUs to restore the rest"
            ledger.release(key, list(act), why, Cause.NODE, None)


def _short_or_released(ledger: Ledger) -> list[JobKey]:
    """The running jobs ``restore_gangs`` may act on, in key order: those the snapshot has below
    ``min_replicas`` or at a count their sizes do not allow (a lost node; kept with the snapshot's index), and
    those this cycle released replicas of. Every other running job is at an allowed count."""
    short = jobindex.short(ledger.index)
    if not ledger.released:
        return short
    return sorted({*short, *ledger.released})


def _restore_size(ledger: Ledger, claims: Claims, job: Job, act: list[Replica]) -> None:
    """R16: a job left at a count it may not run at (a node was lost) grows back to the next allowed count on
    idle GPUs, or else shrinks to the one below."""
    g, n = job.gpus_per_replica, len(act)
    up = sizes.grow_at_least(job, n, 1)
    if ledger.slots_for(job, ledger.free) >= up and ledger.room(job) >= up * g:
        ledger.place(job, up, reserve=False)
        claims.start_reasons[job.key] = (
            f"restored {up} lost replicas to reach {n + up} ({sizes.describe(job)})"
        )
        return
    lower = sizes.shrink_to(job, n)
    why = f"{n} replicas left after a lost node is not among its {sizes.describe(job)}: down to {lower}"
    ledger.release(job.key, act[lower:], why, Cause.NODE, None)


def serve_growth(ledger: Ledger, order: VictimOrder, claims: Claims, job: Job, rival: float = 0.0) -> None:
    """Growth owed by fair share: up to the project's fair share, by reclaim if need be (R2, R9), or by
    preempting lower-priority jobs of its own project within that share (R10, extras first).

    R2's power to take an indivisible gang from a project above its fair share serves only the part of the
    growth its guarantee needs; the rest is reclaimed only where victims stay at their fair share (R7).
    """
    g, act = job.gpus_per_replica, len(ledger.active[job.key])
    short = ledger.shares.guarantee[job.project] - ledger.committed(job.project)
    if ledger.settling(job) and short <= 0:
        return
    owed = ledger.shares.project[job.project] - ledger.committed(job.project)
    room = ledger.room(job)
    # what its own lower-priority jobs hold may make room too (they give way inside the fair share)
    lower = order.lower_gpus(ledger, job) if order.has_lower(job) else 0
    k = sizes.grow_by(job, act, min(job.max_replicas - act, (owed + lower) // g, (room + lower) // g))  # R16
    if ledger.config.goodput:
        k = goodput.cap(job, act, k, rival)  # R19: not past its peak speed, the rest to a better use
    if k <= 0:
        return
    cost = ledger.resize_costs.get(job.key, 0.0) if ledger.resize_costs else 0.0
    for count, for_guarantee in _growth_attempts(job, act, k, short):
        if not for_guarantee and cost and not resize_cost.pays(act, count, cost, ledger.config):
            claims.held_back[job.key] = resize_cost.held_back(act, count, cost, ledger.config)  # R18
            continue
        entitled = count * g <= min(owed, room)
        if entitled and ledger.slots_for(job, ledger.free) >= count:
            ledger.place(job, count, reserve=False)
            explain_start(ledger, claims, job, owed=True)
            return
        units = make_room(
            ledger, order, job, count, entitled=entitled, below_guarantee=for_guarantee, growth=True
        )
        if units is not None:
            place_in_room(ledger, claims, job, count, units)
            return
        if for_guarantee and consolidate_for_guarantee(ledger, order, claims, job, count):
            return


class Attempt(NamedTuple):
    """One try at growing a job by ``replicas``. ``below_guarantee``: with R2's powers (victims may drop
    below their fair share, consolidation), for growth its project's guarantee needs."""

    replicas: int
    below_guarantee: bool


def _growth_attempts(job: Job, act: int, k: int, short: int) -> list[Attempt]:
    """The growths ``serve_growth`` tries, in order, for a job of ``act`` replicas owed ``k`` more, its
    project ``short`` GPUs below its guarantee; the first that works is kept:

    1. all ``k``, victims staying at their fair share (R7);
    2. the part of it the guarantee needs, with R2's powers;
    3. when that is several replicas and none could be made room for, the smallest step, with R2's powers:
       part of what is owed now beats all of it later (node-targeted reclaim is for one replica);
    4. the smallest step, victims staying at their fair share.
    """
    step = sizes.grow_at_least(job, act, 1)
    attempts = [Attempt(k, below_guarantee=False)]
    if short > 0:
        guaranteed = min(k, sizes.grow_at_least(job, act, -(-short // job.gpus_per_replica)))
        attempts.append(Attempt(guaranteed, below_guarantee=True))
        if guaranteed > step:
            attempts.append(Attempt(step, below_guarantee=True))
    if k > step:
        attempts.append(Attempt(step, below_guarantee=False))
    return attempts


def grow_idle(ledger: Ledger, claims: Claims) -> None:
    """R4 + R9: idle GPUs go to elastic jobs below max, project furthest below its fair share first."""
    queues: dict[str, list[Job]] = {}
    if not ledger.config.elastic or not ledger.free.total():
        return  # no idle GPU (a full cluster): nothing to grow into
    # the jobs running now: those running in the snapshot and those started this cycle, in key order
    last = None
    for key in heapq.merge(ledger.running, sorted(ledger.started)):
        if key == last:
            continue
        last = key
        job, act = ledger.jobs[key], ledger.active[key]
        if not act or len(act) >= job.max_replicas or key in ledger.released or key in claims.outcomes:
            continue
        if ledger.settling(job) or key in ledger.stopping:
            continue
        queues.setdefault(job.project, []).append(job)
    use_gain = ledger.config.goodput
    for jobs in queues.values():
        jobs.sort(key=lambda j: (-j.priority, j.submitted_at, j.name), reverse=True)  # served from the end
        if use_gain and any(j.throughput is not None for j in jobs):  # R19: the most progress per GPU first
            jobs.sort(key=lambda j: (-j.priority, -goodput.gain(j, len(ledger.active[j.key]))), reverse=True)
    heap = [(_gap(ledger, p, queues[p]), p) for p in sorted(queues)]
    heapq.heapify(heap)
    while heap and ledger.free.total() > 0:
        _, project = heapq.heappop(heap)
        job = queues[project].pop()
        g = job.gpus_per_replica
        n = len(ledger.active[job.key])
        k = sizes.grow_by(
            job, n, min(job.max_replicas - n, ledger.room(job) // g, ledger.slots_for(job, ledger.free))
        )
        if use_gain and job.throughput is not None:  # R19: never past its peak speed (work-conserving below)
            k = goodput.cap(job, n, k, rival=0.0)
        cost = ledger.resize_costs.get(job.key, 0.0) if ledger.resize_costs else 0.0
        if k > 0 and cost and not resize_cost.pays(n, k, cost, ledger.config):
            claims.held_back[job.key] = resize_cost.held_back(n, k, cost, ledger.config)  # R18
        elif k > 0:
            ledger.place(job, k, reserve=False)
            claims.held_back.pop(job.key, None)
            explain_start(ledger, claims, job, owed=False)
        if queues[project]:
            heapq.heappush(heap, (_gap(ledger, project, queues[project]), project))


def _gap(ledger: Ledger, project: str, queue: list[Job]) -> tuple[int, float, int, float, str]:
    """The project furthest below its fair share first (R4); among projects at or beyond it (R19, where goodput
    is on), the one whose next job makes the most of a GPU, then as before."""
    p = ledger.projects[project]
    gap = ledger.committed(project) - ledger.shares.project[project]
    if gap < 0 or not ledger.config.goodput or not queue:
        return (0, 0.0, gap, p.created_at, project)
    head = queue[-1]
    return (1, -goodput.gain(head, len(ledger.active[head.key])), gap, p.created_at, project)
