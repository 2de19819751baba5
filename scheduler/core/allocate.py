"""The claim pass: starts (R8) and growth up to fair share (R2, R9), in line order, in two phases.

Contract: ``serve_claims`` walks the claims in line order (``claims``) and serves each: a pending job's start
(``starts.serve_start``), a running job's growth (``growth.serve_growth``); each tries the least disruptive
step first (idle GPUs, GPUs being released, reclaim or preemption, consolidation, a drain).

Line order: first every claim that keeps its project within its fair share ("owed"), then the others
(borrowers, who may only use idle GPUs or preempt inside their own project). In each phase: projects below
their guarantee first, then the lowest allocated/fair-share ratio, then the oldest project; inside a project,
highest priority, starts before growth, oldest job. Projects are re-ranked after every claim.

A blocked start that is not owed gets one chance per cycle, in the owed phase (preempt lower priority in its
project, else hold nodes draining): if that fails it is not tried again in the borrowing phase, which only
records why it waits. (Trying again could only use GPUs released by that cycle's reclaims beyond what their
claimants needed; they are idle in the next cycle anyway. This halves the work per pending job.)

Starts that failed get another turn after the owed phase and after the borrowing phase if a later claim
released GPUs of their project or department (a preemption inside it may have made room under its share or
limit); after the last turn none is kept, so the cycle stays bounded.
"""

from __future__ import annotations

import heapq
from collections import deque

from scheduler.core import goodput
from scheduler.core.claims import Claims, is_owed, project_queues, rank
from scheduler.core.fairshare import Top
from scheduler.core.growth import serve_growth
from scheduler.core.ledger import Ledger
from scheduler.core.memo import Retry, shape_of
from scheduler.core.model import Job
from scheduler.core.starts import blocked_start, hold_place, same_pending, serve_start
from scheduler.core.victims import VictimOrder

Rank = tuple[tuple[int, float, float, str], str]  # a project's ``rank`` and its name: its place in turn


def serve_claims(ledger: Ledger, order: VictimOrder, claims: Claims) -> None:
    """Owed claims first (those that keep their project within fair share), then borrowers'."""
    queues = project_queues(ledger)
    borrowers: dict[str, deque[Job]] = {}
    head_of_line: set[str] = set()
    memo = ledger.memo
    heap = [(rank(ledger, p), p) for p in sorted(queues)]
    heapq.heapify(heap)
    turn = _next(heap, None)
    while turn is not None:
        project = turn[1]
        queue = queues[project]
        while queue and not is_owed(ledger, queue[0]):
            job = queue.popleft()
            if blocked_start(ledger, job):
                shape = shape_of(job)
                if memo.holds.get(shape) != ledger.version() and hold_place(
                    ledger, order, claims, job, head_of_line
                ):
                    continue  # it keeps its place in its project's line: younger jobs do not take its GPUs
                memo.holds[shape] = ledger.version()  # the version after the failed hold
                memo.held_in_vain.add(job.key)
            waiting = borrowers.setdefault(project, deque())
            waiting.append(job)  # its turn comes in the borrowing phase
            # pending jobs of the same shape right behind it go the same way on this unchanged ledger: not owed,
            # and blocked with a hold that failed for their shape, or not blocked (``memo``)
            if not ledger.active[job.key]:
                held = job.key in memo.held_in_vain
                while queue and same_pending(ledger, job, queue[0]):
                    nxt = queue.popleft()
                    if held and not claims.explain:
                        continue  # its turn would only record why it waits, which nobody reads
                    waiting.append(nxt)
                    if held:
                        memo.held_in_vain.add(nxt.key)
        back = None  # this project, re-ranked, if it has claims left
        if queue:
            _serve(ledger, order, claims, queue, head_of_line)
            if queue:
                back = (rank(ledger, project), project)
        turn = _next(heap, back)
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
    heap = [(rank(ledger, p), p) for p in sorted(borrowers)]
    heapq.heapify(heap)
    turn = _next(heap, None)
    while turn is not None:
        project = turn[1]
        _serve(ledger, order, claims, borrowers[project], head_of_line)
        turn = _next(heap, (rank(ledger, project), project) if borrowers[project] else None)


def _next(heap: list[Rank], back: Rank | None) -> Rank | None:
    """The project whose turn is next: the first of ``heap`` with ``back`` (the project just served, re-ranked)
    pushed back in, or ``None`` when none is left. Pushing and popping in one step (``heappushpop``) leaves the
    heap untouched when the project just served is still first, the common case of a project whose waiting
    jobs are served one after another without a GPU changing hands."""
    if back is not None:
        return heapq.heappushpop(heap, back)
    return heapq.heappop(heap) if heap else None


def _retry_failed_starts(ledger: Ledger, claims: Claims, borrowers: dict[str, deque[Job]]) -> None:
    """Starts that failed before a later claim released GPUs of their project, or of their department (its
    limit counts them all), get another turn, ahead of its borrowers (they keep their place in its line):
    e.g. a higher-priority training job that found its project at its fair share, before the project's
    interactive job preempted a big low-priority job; or a job that found its department at its limit, before
    another project of that department preempted its own low-priority job."""
    if not ledger.release_log:
        return  # nothing released yet this cycle: no failed start has another turn (a settled cluster's case)
    released_last: dict[str, int] = {}  # project -> position of its newest release this cycle
    top_last: dict[Top, int] = {}  # the same for its department (ledger.top_key)
    for position, project in enumerate(ledger.release_log):  # a job released twice counts twice
        released_last[project] = top_last[ledger.top_key(project)] = position
    again: dict[str, list[Job]] = {}
    later: list[Retry] = []  # nothing freed for them yet: a release in the next phase may
    for retry in ledger.memo.retry:
        job, seen = retry
        if ledger.active[job.key] or job.key in ledger.released:
            continue
        newest = max(released_last.get(job.project, -1), top_last.get(ledger.top_key(job.project), -1))
        if newest >= seen:
            again.setdefault(job.project, []).append(job)
        else:
            later.append(retry)
    ledger.memo.retry[:] = later
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
        serve_start(ledger, order, claims, job, head_of_line, queue=queue)
        if ledger.config.elastic and 0 < len(ledger.active[job.key]) < job.max_replicas:
            _queue_growth(queue, job)
    else:  # R19: a job that reports its speed leaves what the next growth claim makes more of to it
        rival = goodput.rival(queue, ledger.active) if job.throughput and ledger.config.goodput else 0.0
        serve_growth(ledger, order, claims, job, rival)


def _queue_growth(queue: deque[Job], job: Job) -> None:
    """A job that just started claims its growth towards fair share later, after the starts of its priority
    but ahead of every lower-priority job still in line (the line's order, ``project_queues``). Put at the very back,
    its growth came after lower-priority starts that took the room it was owed, and then preempted (R10) a job
    of a priority between the two that those starts could have spared."""
    behind = 0
    while behind < len(queue) and queue[-1 - behind].priority < job.priority:
        behind += 1
    queue.rotate(behind)
    queue.append(job)
    queue.rotate(-behind)
