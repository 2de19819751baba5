"""Serving claims for GPUs: starts (R8), growth up to fair share (R2, R9), restores, then idle growth (R4, R9).

Contract: ``serve_claims`` walks the claims in line order and tries, for each, the least disruptive step
first, stopping at the first that works:

1. place on idle GPUs (start/grow now);
2. wait for GPUs already being released (they are reserved for it);
3. reclaim from projects above their fair share (R5-R7) when the claimant's project stays within its own;
4. preempt lower-priority jobs of its own project (R10);
5. a start that is owed GPUs but blocked by fragmentation reserves the nodes closest to fitting it, so they
   drain for it instead of being refilled by small jobs (R12: the 8-GPU replica does not starve).

Line order: projects below their guarantee first, then those whose claim stays within fair share, then the
rest (borrowers); inside each, the lowest allocated/fair-share ratio, then the oldest project. Inside a
project: highest priority, starts before growth, oldest job. Projects are re-ranked after every claim.

``grow_idle`` then lends what is still idle to elastic jobs below ``max_replicas``, the project furthest
below its fair share first; each job takes all the replicas it can at once (every resize restarts workers).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from scheduler.core import explain
from scheduler.core.ledger import JobKey, Ledger
from scheduler.core.model import Job
from scheduler.core.plan import Cause
from scheduler.core.preemption import Unit, VictimOrder, preempt, reclaim


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


def restore_gangs(ledger: Ledger, claims: Claims) -> None:
    """A running job below ``min_replicas`` (a node was lost) gets its replicas back now, or goes back to
    pending whole, so that no gang sits below its minimum holding GPUs (R8)."""
    for key in sorted(ledger.jobs):
        job, act = ledger.jobs[key], ledger.active[key]
        if not act or len(act) >= job.min_replicas:
            continue
        missing = job.min_replicas - len(act)
        if ledger.free.slots(job.gpus_per_replica) >= missing and ledger.room(job) >= missing * job.gpus_per_replica:
            ledger.place(job, missing, reserve=False)
            claims.start_reasons[key] = f"restored {missing} lost replicas to reach min_replicas {job.min_replicas}"
        else:
            why = f"{len(act)} of min {job.min_replicas} replicas left and no GPUs to restore the rest"
            ledger.release(key, list(act), why, Cause.NODE, None)


def serve_claims(ledger: Ledger, order: VictimOrder, claims: Claims) -> None:
    queues = _queues(ledger)
    heap = [(_rank(ledger, queues[p][0]), p) for p in sorted(queues)]
    heapq.heapify(heap)
    head_of_line: set[str] = set()
    while heap:
        _, project = heapq.heappop(heap)
        job = queues[project].pop(0)
        if not ledger.active[job.key] and job.key not in ledger.released:
            _serve_start(ledger, order, claims, job, head_of_line)
            if ledger.config.elastic and 0 < len(ledger.active[job.key]) < job.max_replicas:
                queues[project].append(job)  # now running: its growth towards fair share is a later claim
        else:
            _serve_growth(ledger, order, claims, job)
        if queues[project]:
            heapq.heappush(heap, (_rank(ledger, queues[project][0]), project))


def _queues(ledger: Ledger) -> dict[str, list[Job]]:
    queues: dict[str, list[Job]] = {}
    for key, job in ledger.jobs.items():
        act = ledger.active[key]
        if key in ledger.released or key in ledger.started:
            continue  # touched already this cycle (limits, restores)
        if _stopping(job):
            continue  # resized again only once its stopping replicas have exited (no index reused)
        if act and (len(act) >= job.max_replicas or not ledger.config.elastic):
            continue
        queues.setdefault(job.project, []).append(job)
    for jobs in queues.values():
        jobs.sort(key=lambda j: (-j.priority, bool(ledger.active[j.key]), j.submitted_at, j.name))
    return queues


def _rank(ledger: Ledger, job: Job) -> tuple[int, float, float, str]:
    p = ledger.projects[job.project]
    alloc, share = ledger.alloc[p.name], ledger.shares.project[p.name]
    need = (job.min_replicas if not ledger.active[job.key] else 1) * job.gpus_per_replica
    if alloc + need > share:
        tier = 2  # a borrower: this claim would lift its project above fair share
    elif alloc < ledger.shares.guarantee[p.name]:
        tier = 0  # R2: owed its guarantee
    else:
        tier = 1
    ratio = alloc / share if share else float("inf")
    return (tier, ratio, p.created_at, p.name)


def _serve_start(ledger: Ledger, order: VictimOrder, claims: Claims, job: Job, head_of_line: set[str]) -> None:
    k, g = job.min_replicas, job.gpus_per_replica
    blocked = explain.blocked_by_caps(ledger, job, k * g)
    if blocked:
        _record(claims, job, blocked, waiting=True)
        return
    if ledger.free.slots(g) >= k:
        ledger.place(job, k, reserve=False)
        claims.start_reasons[job.key] = explain.started(ledger, job, k)
        return
    entitled = _entitled(ledger, job, k * g)
    units = _make_room(ledger, order, job, k, entitled=entitled)
    if units is not None:
        ledger.place(job, k, reserve=True)
        _record(claims, job, explain.waiting_for_release(ledger, job, k * g, units), waiting=True)
        return
    if _ahead_in_line(ledger, job) + k * g <= ledger.shares.project[job.project] and job.project not in head_of_line:
        mark = ledger.checkpoint()
        nodes = _drain_reservation(ledger, job, k)
        if nodes:
            head_of_line.add(job.project)
            _record(claims, job, explain.draining(ledger, job, nodes), waiting=True)
            return
        ledger.rollback(mark)
    _record(claims, job, explain.pending(ledger, job, k * g, entitled=entitled), waiting=True)


def _serve_growth(ledger: Ledger, order: VictimOrder, claims: Claims, job: Job) -> None:
    """Growth owed by fair share: up to the project's fair share, by reclaim if need be (R2, R9)."""
    g, act = job.gpus_per_replica, len(ledger.active[job.key])
    below_guarantee = ledger.alloc[job.project] < ledger.shares.guarantee[job.project]
    if ledger.settling(job) and not below_guarantee:
        return
    owed = ledger.shares.project[job.project] - ledger.alloc[job.project]
    k = min(job.max_replicas - act, owed // g, ledger.room(job) // g)
    if k <= 0:
        return
    if ledger.free.slots(g) >= k:
        ledger.place(job, k, reserve=False)
        claims.start_reasons[job.key] = explain.grown(ledger, job, k, owed=True)
        return
    units = _make_room(ledger, order, job, k, entitled=True, allow_preempt=False)
    if units is not None:
        ledger.place(job, k, reserve=True)
        _record(claims, job, explain.waiting_for_release(ledger, job, k * g, units), waiting=True)


def _make_room(
    ledger: Ledger, order: VictimOrder, job: Job, k: int, *, entitled: bool, allow_preempt: bool = True
) -> list[Unit] | None:
    """Steps 2-4 of the module contract; ``None`` when none of them makes ``k`` replicas fit."""
    g = job.gpus_per_replica
    if entitled and ledger.avail.slots(g) >= k:
        return []
    if entitled and ledger.config.reclaim:
        r2 = ledger.alloc[job.project] < ledger.shares.guarantee[job.project]
        units = reclaim(ledger, order, job, k, r2=r2)
        if units is not None:
            return units
    if allow_preempt:
        return preempt(ledger, order, job, k)
    return None


def _entitled(ledger: Ledger, job: Job, need: int) -> bool:
    """R7: a claim may take GPUs from others only while its project stays within its fair share."""
    return ledger.alloc[job.project] + need <= ledger.shares.project[job.project]


def _line_key(job: Job) -> tuple[int, float, str]:
    return (-job.priority, job.submitted_at, job.name)


def _ahead_in_line(ledger: Ledger, job: Job) -> int:
    """GPUs its project holds in jobs ahead of this one in the project's line (younger ones do not count)."""
    mine = _line_key(job)
    return sum(
        r.gpus
        for key, other in ledger.jobs.items()
        if key[0] == job.project and _line_key(other) < mine
        for r in ledger.active[key]
    )


def _drain_reservation(ledger: Ledger, job: Job, k: int) -> list[str]:
    """Hold what fits now and the nodes closest to fitting the rest, so they drain for this job."""
    g = job.gpus_per_replica
    fit = min(ledger.avail.slots(g), k)
    nodes = [p.node for p in ledger.place(job, fit, reserve=True)] if fit else []
    if fit == k:
        return nodes
    for node in ledger.avail.most_available()[: k - fit]:
        if ledger.avail.value[node] > 0:
            ledger.reserve_node(job, node)
            nodes.append(node)
    return nodes


def _record(claims: Claims, job: Job, reason: str, *, waiting: bool) -> None:
    claims.outcomes[job.key] = Outcome(reason, waiting)
    if waiting:
        claims.line.append(job.key)


def grow_idle(ledger: Ledger, claims: Claims) -> None:
    """R4 + R9: idle GPUs go to elastic jobs below max, project furthest below its fair share first."""
    queues: dict[str, list[Job]] = {}
    for key, job in ledger.jobs.items():
        act = ledger.active[key]
        if not act or len(act) >= job.max_replicas or key in ledger.released or key in claims.outcomes:
            continue
        if ledger.settling(job) or not ledger.config.elastic or _stopping(job):
            continue
        queues.setdefault(job.project, []).append(job)
    for jobs in queues.values():
        jobs.sort(key=lambda j: (-j.priority, j.submitted_at, j.name))
    heap = [(_gap(ledger, p), p) for p in sorted(queues)]
    heapq.heapify(heap)
    while heap and ledger.free.total() > 0:
        _, project = heapq.heappop(heap)
        job = queues[project].pop(0)
        g = job.gpus_per_replica
        k = min(job.max_replicas - len(ledger.active[job.key]), ledger.room(job) // g, ledger.free.slots(g))
        if k > 0:
            ledger.place(job, k, reserve=False)
            total = len(ledger.started[job.key])
            if any(not r.releasing for r in job.replicas):
                claims.start_reasons[job.key] = explain.grown(ledger, job, total, owed=False)
            else:
                claims.start_reasons[job.key] = explain.started(ledger, job, total)
        if queues[project]:
            heapq.heappush(heap, (_gap(ledger, project), project))


def _stopping(job: Job) -> bool:
    return any(r.releasing for r in job.replicas)


def _gap(ledger: Ledger, project: str) -> tuple[int, float, str]:
    p = ledger.projects[project]
    return (ledger.alloc[project] - ledger.shares.project[project], p.created_at, project)
