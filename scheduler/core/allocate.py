"""Serving claims for GPUs: starts (R8), growth up to fair share (R2, R9), restores, then idle growth (R4, R9).

Contract: ``serve_claims`` walks the claims in line order and tries, for each, the least disruptive step
first, stopping at the first that works:

1. place on idle GPUs (start/grow now);
2. wait for GPUs already being released (they are reserved for it);
3. reclaim from projects above their fair share (R5-R7) when the claimant's project stays within its own;
4. preempt lower-priority jobs of its own project (R10);
5. a claim owed its guarantee moves small replicas to make a whole node, reclaiming if need be (R2);
6. a start blocked by fragmentation reserves the nodes closest to fitting it, so they drain for it instead of
   being refilled by small jobs (R12: the 8-GPU replica does not starve), holding at most what its project is
   owed (GPUs held beyond its fair share would be other projects').

Line order: first every claim that keeps its project within its fair share ("owed"), then the others
(borrowers, who may only use idle GPUs or preempt inside their own project). In each phase: projects below
their guarantee first, then the lowest allocated/fair-share ratio, then the oldest project; inside a project,
highest priority, starts before growth, oldest job. Projects are re-ranked after every claim.

A blocked start that is not owed gets one chance per cycle, in the owed phase (preempt lower priority in its
project, else hold nodes draining): if that fails it is not tried again in the borrowing phase, which only
records why it waits. (Trying again could only use GPUs released by that cycle's reclaims beyond what their
claimants needed; they are idle in the next cycle anyway. This halves the work per pending job.)

``grow_idle`` then lends what is still idle to elastic jobs below ``max_replicas``, the project furthest
below its fair share first; each job takes all the replicas it can at once (every resize restarts workers).
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from dataclasses import dataclass, field

from scheduler.core import explain, sizes
from scheduler.core.consolidate import consolidate
from scheduler.core.ledger import JobKey, Ledger
from scheduler.core.model import Job, Replica
from scheduler.core.plan import Cause
from scheduler.core.preemption import Reclaimer, lost_to_reclaim
from scheduler.core.room import make_room
from scheduler.core.victims import Unit, VictimOrder


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to a claim. ``waiting`` claims get a place in line (R13)."""

    reason: str
    waiting: bool


@dataclass(slots=True)
class Claims:
    """Per-cycle bookkeeping shared by the passes."""

    outcomes: dict[JobKey, Outcome]
    start_reasons: dict[JobKey, str]
    line: list[JobKey]
    # blocked starts whose one chance (preempt, drain) failed in the owed phase
    held_in_vain: set[JobKey] = field(default_factory=set)
    # (start shape, ledger version) of starts that failed, with whether they were entitled; see ``_shape``
    failed_starts: dict[tuple[tuple[str, int, int, int, bool, str], tuple[int, int]], bool] = field(
        default_factory=dict
    )
    failed_holds: set[tuple[tuple[str, int, int, int, bool, str], tuple[int, int]]] = field(
        default_factory=set
    )
    # whether the plan explains waiting jobs (R13 notes); if not, outcomes that only notes read are not kept
    explain: bool = True
    # starts that failed: tried again after the owed phase and after the borrowing phase if a later claim
    # released GPUs of their own project or department (a preemption inside it may have made room under its
    # share or limit)
    owed_phase: bool = True  # whether failed starts are kept for another turn (not in the last one)
    retry: list[tuple[Job, int]] = field(default_factory=list)  # with how many releases the ledger had then


def restore_gangs(ledger: Ledger, claims: Claims) -> None:
    """A running job below ``min_replicas`` (a node was lost) gets its replicas back now, or goes back to
    pending whole, so that no gang sits below its minimum holding GPUs (R8)."""
    for key in ledger.running:  # in key order; limits (step 2) only took replicas away
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


def serve_claims(ledger: Ledger, order: VictimOrder, claims: Claims) -> None:
    """Owed claims first (those that keep their project within fair share), then borrowers'."""
    queues = _queues(ledger)
    borrowers: dict[str, deque[Job]] = {}
    head_of_line: set[str] = set()
    heap = [(_rank(ledger, p), p) for p in sorted(queues)]
    heapq.heapify(heap)
    while heap:
        _, project = heapq.heappop(heap)
        queue = queues[project]
        while queue and not _owed(ledger, queue[0]):
            job = queue.popleft()
            if _blocked_start(ledger, job):
                if (_shape(job), ledger.version()) not in claims.failed_holds and _hold_place(
                    ledger, order, claims, job, head_of_line
                ):
                    continue  # it keeps its place in its project's line: younger jobs do not take its GPUs
                claims.failed_holds.add((_shape(job), ledger.version()))
                claims.held_in_vain.add(job.key)
            waiting = borrowers.setdefault(project, deque())
            waiting.append(job)  # its turn comes in the borrowing phase
            # pending jobs of the same shape right behind it go the same way on this unchanged ledger: not owed,
            # and blocked with a hold that failed for their shape, or not blocked (``_shape``)
            if not ledger.active[job.key]:
                held = job.key in claims.held_in_vain
                while queue and _same_pending(ledger, job, queue[0]):
                    nxt = queue.popleft()
                    if held and not claims.explain:
                        continue  # its turn would only record why it waits, which nobody reads
                    waiting.append(nxt)
                    if held:
                        claims.held_in_vain.add(nxt.key)
        if not queue:
            continue
        _serve(ledger, order, claims, queue, head_of_line)
        if queue:
            heapq.heappush(heap, (_rank(ledger, project), project))
    _retry_failed_starts(ledger, claims, borrowers)
    _serve_borrowers(ledger, order, claims, borrowers, head_of_line)
    again: dict[str, deque[Job]] = {}
    _retry_failed_starts(ledger, claims, again)
    claims.owed_phase = False  # one more turn at most: the cycle stays bounded
    _serve_borrowers(ledger, order, claims, again, head_of_line)


def _serve_borrowers(
    ledger: Ledger,
    order: VictimOrder,
    claims: Claims,
    borrowers: dict[str, deque[Job]],
    head_of_line: set[str],
) -> None:
    heap = [(_rank(ledger, p), p) for p in sorted(borrowers)]
    heapq.heapify(heap)
    while heap:
        _, project = heapq.heappop(heap)
        _serve(ledger, order, claims, borrowers[project], head_of_line)
        if borrowers[project]:
            heapq.heappush(heap, (_rank(ledger, project), project))


def _retry_failed_starts(ledger: Ledger, claims: Claims, borrowers: dict[str, deque[Job]]) -> None:
    """Starts that failed before a later claim released GPUs of their project, or of their department (its
    limit counts them all), get another turn, ahead of its borrowers (they keep their place in its line):
    e.g. a higher-priority training job that found its project at its fair share, before the project's
    interactive job preempted a big low-priority job; or a job that found its department at its limit, before
    another project of that department preempted its own low-priority job."""
    released_last: dict[str, int] = {}  # project -> position of its newest release this cycle
    top_last: dict[str, int] = {}  # the same for its department (ledger.top_key)
    for position, project in enumerate(ledger.release_log):  # a job released twice counts twice
        released_last[project] = top_last[ledger.top_key(project)] = position
    again: dict[str, list[Job]] = {}
    later: list[tuple[Job, int]] = []  # nothing freed for them yet: a release in the next phase may
    for job, seen in claims.retry:
        if ledger.active[job.key] or job.key in ledger.released:
            continue
        newest = max(released_last.get(job.project, -1), top_last.get(ledger.top_key(job.project), -1))
        if newest >= seen:
            again.setdefault(job.project, []).append(job)
        else:
            later.append((job, seen))
    claims.retry[:] = later
    if not again:
        return
    keys = {job.key for jobs in again.values() for job in jobs}
    claims.line[:] = [key for key in claims.line if key not in keys]
    for project, jobs in again.items():
        borrowers[project] = deque([*jobs, *borrowers.get(project, ())])


def _serve(
    ledger: Ledger, order: VictimOrder, claims: Claims, queue: deque[Job], head_of_line: set[str]
) -> None:
    job = queue.popleft()
    if job.key in ledger.released:
        return  # a victim of this cycle claims again in the next one, once its replicas have stopped
    if not ledger.active[job.key]:
        _serve_start(ledger, order, claims, job, head_of_line, queue=queue)
        if ledger.config.elastic and 0 < len(ledger.active[job.key]) < job.max_replicas:
            _queue_growth(queue, job)
    else:
        _serve_growth(ledger, order, claims, job)


def _queue_growth(queue: deque[Job], job: Job) -> None:
    """A job that just started claims its growth towards fair share later, after the starts of its priority
    but ahead of every lower-priority job still in line (the line's order, ``_queues``). Put at the very back,
    its growth came after lower-priority starts that took the room it was owed, and then preempted (R10) a job
    of a priority between the two that those starts could have spared."""
    behind = 0
    while behind < len(queue) and queue[-1 - behind].priority < job.priority:
        behind += 1
    queue.rotate(behind)
    queue.append(job)
    queue.rotate(-behind)


def _owed(ledger: Ledger, job: Job) -> bool:
    """Whether serving this claim keeps its project within fair share (so it may reclaim, R7)."""
    if job.key in ledger.released:
        return True  # dropped when served
    if ledger.active[job.key]:
        return ledger.shares.project[job.project] - ledger.committed(job.project) >= job.gpus_per_replica
    return _entitled(ledger, job, job.min_replicas * job.gpus_per_replica)


def _queues(ledger: Ledger) -> dict[str, deque[Job]]:
    queues: dict[str, list[Job]] = {}
    active, released, started, stopping = ledger.active, ledger.released, ledger.started, ledger.stopping
    elastic = ledger.config.elastic
    for key, job in ledger.jobs.items():
        if key in released or key in started:
            continue  # touched already this cycle (limits, restores)
        if key in stopping:
            continue  # resized again only once its stopping replicas have exited (no index reused)
        act = active[key]
        if act and (len(act) >= job.max_replicas or not elastic):
            continue
        queues.setdefault(job.project, []).append(job)
    for jobs in queues.values():
        jobs.sort(key=lambda j: (-j.priority, not j.interactive, bool(active[j.key]), j.submitted_at, j.name))
    return {p: deque(jobs) for p, jobs in queues.items()}


def _rank(ledger: Ledger, project: str) -> tuple[int, float, float, str]:
    """Projects below their guarantee first (R2), then the lowest allocated/fair-share ratio, then the oldest."""
    p = ledger.projects[project]
    alloc, share = ledger.committed(project), ledger.shares.project[project]
    tier = 0 if alloc < ledger.shares.guarantee[project] else 1
    ratio = alloc / share if share else float("inf")
    return (tier, ratio, p.created_at, project)


def _serve_start(
    ledger: Ledger, order: VictimOrder, claims: Claims, job: Job, head_of_line: set[str], *, queue: deque[Job]
) -> None:
    k, g = job.min_replicas, job.gpus_per_replica
    blocked = _blocked(ledger, order, job, k * g)
    if blocked:
        # the same-shape pending jobs right behind it are blocked alike on this unchanged ledger (and, being
        # owed or not alike, would be served next in the same phase)
        _record_alike(ledger, claims, job, queue, blocked)
        return
    if job.key in claims.held_in_vain:
        _record_alike(ledger, claims, job, queue, explain.pending(ledger, job, k * g, entitled=False))
        return
    entitled_before = claims.failed_starts.get((_shape(job), ledger.version()))
    if entitled_before is not None:  # failed before on this ledger: so do the same-shape jobs behind it
        _record_alike(
            ledger, claims, job, queue, explain.pending(ledger, job, k * g, entitled=entitled_before)
        )
        return
    if ledger.slots_for(job, ledger.free) >= k and ledger.room(job) >= k * g:
        ledger.place(job, k, reserve=False)
        claims.start_reasons[job.key] = explain.started(ledger, job, k)
        return
    entitled = _entitled(ledger, job, k * g)
    units = make_room(ledger, order, job, k, entitled=entitled, r2=_below_guarantee(ledger, job.project))
    if units is not None:
        _place_in_room(ledger, claims, job, k, units)
        return
    if entitled and _consolidate(ledger, order, claims, job, k):
        return
    if _try_drain(ledger, claims, job, head_of_line):
        _may_retry(ledger, claims, job)  # it holds GPUs as they drain; room made later may start it now
        return
    claims.failed_starts[(_shape(job), ledger.version())] = entitled
    _record(claims, job, explain.pending(ledger, job, k * g, entitled=entitled), waiting=True)
    _may_retry(ledger, claims, job)


def _record_alike(ledger: Ledger, claims: Claims, job: Job, queue: deque[Job], reason: str) -> None:
    """A start that fails with ``reason``, and the pending jobs of the same shape right behind it in its
    project's line that are held in vain as it is or not: they would each fail the same way, one after the
    other (a failure changes neither the ledger nor the project's rank, so the project stays first in turn),
    so they are taken from the line at once (and their reasons recorded when the plan explains)."""
    _record(claims, job, reason, waiting=True)
    _may_retry(ledger, claims, job)
    held = job.key in claims.held_in_vain
    while queue and _same_pending(ledger, job, nxt := queue[0]) and (nxt.key in claims.held_in_vain) == held:
        queue.popleft()
        _may_retry(ledger, claims, nxt)
        if claims.explain:
            _record(claims, nxt, reason, waiting=True)


def _may_retry(ledger: Ledger, claims: Claims, job: Job) -> None:
    if claims.owed_phase:
        claims.retry.append((job, len(ledger.release_log)))


def _same_pending(ledger: Ledger, job: Job, other: Job) -> bool:
    """Whether ``other`` (behind ``job`` in the same project's line) is a pending job of the same ``_shape``."""
    return (
        other.gpus_per_replica == job.gpus_per_replica
        and other.min_replicas == job.min_replicas
        and other.priority == job.priority
        and other.interactive == job.interactive
        and other.topology == job.topology
        and not ledger.active[other.key]
        and other.key not in ledger.released
    )


def _shape(job: Job) -> tuple[str, int, int, int, bool, str]:
    """What a failed start or hold depends on besides the ledger, the job's place in line and whether it was
    a victim this cycle (neither of which lets a later job succeed: a victim is served in the next cycle, and
    a job further back in its project's line has at least as many GPUs ahead of it). So a start of this shape
    that failed on an unchanged ledger (same ``Ledger.version``) fails again: it is not searched again."""
    return (job.project, job.gpus_per_replica, job.min_replicas, job.priority, job.interactive, job.topology)


def _serve_growth(ledger: Ledger, order: VictimOrder, claims: Claims, job: Job) -> None:
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
    if k <= 0:
        return
    # the guarantee's share of the growth, then (when that is several replicas and none could be made room
    # for) the smallest step: part of what is owed now beats all of it later (node-targeted reclaim is for one)
    r2_count = min(k, sizes.grow_at_least(job, act, -(-short // g)))
    step = sizes.grow_at_least(job, act, 1)
    for count, r2 in (
        (k, False),
        (r2_count, True),
        (step if r2_count > step else 0, True),
        (step if k > step else 0, False),
    ):
        if count <= 0 or (r2 and short <= 0):
            continue
        entitled = count * g <= min(owed, room)
        if entitled and ledger.slots_for(job, ledger.free) >= count:
            ledger.place(job, count, reserve=False)
            _explain_start(ledger, claims, job, owed=True)
            return
        units = make_room(ledger, order, job, count, entitled=entitled, r2=r2, growth=True)
        if units is not None:
            _place_in_room(ledger, claims, job, count, units)
            return
        if r2 and _consolidate(ledger, order, claims, job, count):
            return


def _place_in_room(ledger: Ledger, claims: Claims, job: Job, count: int, units: list[Unit]) -> None:
    """Place ``count`` replicas where ``make_room`` made room: on GPUs being released (held for it), or at once
    on idle GPUs when what blocked it was a cap (its limit or quota) that its preempted jobs made room under."""
    if units and ledger.slots_for(job, ledger.free) >= count:
        ledger.place(job, count, reserve=False)
        _explain_start(ledger, claims, job, owed=True)
        return
    ledger.place(job, count, reserve=True)
    reason = explain.waiting_for_release(ledger, job, count * job.gpus_per_replica, units)
    _record(claims, job, reason, waiting=True)


def _consolidate(ledger: Ledger, order: VictimOrder, claims: Claims, job: Job, count: int) -> bool:
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
        moves = consolidate(ledger, job, count, rules=Reclaimer(ledger, order, job, count, r2=True))
    if moves is None:
        return False
    reason = explain.consolidating(ledger, job, count * g, moves.moved, moves.reclaimed)
    _record(claims, job, reason, waiting=True)
    return True


def _below_guarantee(ledger: Ledger, project: str) -> bool:
    return ledger.committed(project) < ledger.shares.guarantee[project]


def _blocked(ledger: Ledger, order: VictimOrder, job: Job, need: int) -> str | None:
    """Why caps keep ``need`` more GPUs from this job, counting what preempting the lower-priority jobs of its
    own project would free under its limit (R10 at a limit, R11); ``None`` when nothing blocks it."""
    reason = explain.blocked_by_caps(ledger, job, need)
    if reason is None or reason.startswith(explain.BEYOND) or not order.has_lower(job):
        return reason
    freed = order.lower_gpus(ledger, job)
    return reason if explain.blocked_by_caps(ledger, job, need, freed=freed) else None


def _entitled(ledger: Ledger, job: Job, need: int) -> bool:
    """R7: a claim may take GPUs from others only while its project stays within its fair share."""
    return ledger.committed(job.project) + need <= ledger.shares.project[job.project]


def _blocked_start(ledger: Ledger, job: Job) -> bool:
    """A pending job whose gang does not fit on idle GPUs."""
    return not ledger.active[job.key] and ledger.slots_for(job, ledger.free) < job.min_replicas


def _hold_place(ledger: Ledger, order: VictimOrder, claims: Claims, job: Job, head_of_line: set[str]) -> bool:
    """A blocked start ahead of owed claims of its own project: preempt lower priority (R10), else drain."""
    k = job.min_replicas
    if _blocked(ledger, order, job, k * job.gpus_per_replica) is None:
        units = make_room(ledger, order, job, k, entitled=False, r2=_below_guarantee(ledger, job.project))
        if units is not None:
            _place_in_room(ledger, claims, job, k, units)
            return True
    return _try_drain(ledger, claims, job, head_of_line)


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
    _record(claims, job, explain.draining(ledger, job, nodes), waiting=True)
    return True


def _line_key(job: Job) -> tuple[int, bool, float, str]:
    """A project's line: highest priority first; at equal priority interactive jobs (which may preempt
    training ones, R10) before training jobs, so the jobs they preempted cannot take the GPUs back first."""
    return (-job.priority, not job.interactive, job.submitted_at, job.name)


def _ahead_in_line(ledger: Ledger, job: Job) -> int:
    """GPUs its project held at the start of the cycle in jobs ahead of this one in the project's line
    (younger ones do not count). Prefix sums per project, built once per cycle."""
    line = ledger.line_cache.get(job.project)
    if line is None:  # only jobs that held GPUs count: pending ones add nothing to the sums
        held = ledger.held_gpus
        jobs = sorted((ledger.jobs[k] for k in ledger.by_project[job.project] if held.get(k)), key=_line_key)
        prefix = [0]
        for j in jobs:
            prefix.append(prefix[-1] + held[j.key])
        line = ([_line_key(j) for j in jobs], prefix)
        ledger.line_cache[job.project] = line
    return line[1][bisect.bisect_left(line[0], _line_key(job))]


def _drain_reservation(ledger: Ledger, job: Job, k: int) -> list[str]:
    """Hold what fits now and the nodes closest to fitting the rest, so they drain for this job."""
    g = job.gpus_per_replica
    # at most what its project is owed: GPUs held beyond its fair share would be other projects' (R2)
    budget = max(0, ledger.shares.project[job.project] - ledger.committed(job.project))
    fit = min(ledger.avail.slots(g), k, budget // g)
    nodes = [p.node for p in ledger.place(job, fit, reserve=True, firm=False)] if fit else []
    budget -= fit * g

    # a node with nothing free yet is still worth marking for a multi-GPU replica (fragmentation), not for
    # 1-GPU replicas, which any freed GPU serves
    def big_enough(n: str) -> bool:
        return ledger.capacity(n) >= g

    for node in ledger.avail.most_available(k - fit, big_enough, min_value=0 if g > 1 else 1):
        budget -= ledger.reserve_node(job, node, budget)
        nodes.append(node)
    return nodes


def _record(claims: Claims, job: Job, reason: str, *, waiting: bool) -> None:
    claims.outcomes[job.key] = Outcome(reason, waiting)
    if waiting:
        claims.line.append(job.key)


def grow_idle(ledger: Ledger, claims: Claims) -> None:
    """R4 + R9: idle GPUs go to elastic jobs below max, project furthest below its fair share first."""
    queues: dict[str, list[Job]] = {}
    if not ledger.config.elastic:
        return
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
    for jobs in queues.values():
        jobs.sort(key=lambda j: (-j.priority, j.submitted_at, j.name), reverse=True)  # served from the end
    heap = [(_gap(ledger, p), p) for p in sorted(queues)]
    heapq.heapify(heap)
    while heap and ledger.free.total() > 0:
        _, project = heapq.heappop(heap)
        job = queues[project].pop()
        g = job.gpus_per_replica
        n = len(ledger.active[job.key])
        k = sizes.grow_by(
            job, n, min(job.max_replicas - n, ledger.room(job) // g, ledger.slots_for(job, ledger.free))
        )
        if k > 0:
            ledger.place(job, k, reserve=False)
            _explain_start(ledger, claims, job, owed=False)
        if queues[project]:
            heapq.heappush(heap, (_gap(ledger, project), project))


def _explain_start(ledger: Ledger, claims: Claims, job: Job, *, owed: bool) -> None:
    """The reason of the job's one start or grow decision this cycle, for all the replicas it got."""
    total = len(ledger.started[job.key])
    if any(not r.releasing for r in job.replicas):
        claims.start_reasons[job.key] = explain.grown(ledger, job, total, owed=owed)
    else:
        claims.start_reasons[job.key] = explain.started(ledger, job, total)


def _gap(ledger: Ledger, project: str) -> tuple[int, float, str]:
    p = ledger.projects[project]
    return (ledger.committed(project) - ledger.shares.project[project], p.created_at, project)
