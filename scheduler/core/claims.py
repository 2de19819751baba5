"""Claims and their order: what the claim pass records per job, and the line it serves claims in.

Contract: a claim is a pending job that wants to start (R8) or a running elastic job below ``max_replicas``
that wants to grow. ``project_queues`` lines up each project's claims: highest priority first; at equal
priority interactive jobs, then starts before growth, then (R19, ``goodput``) the growth that adds the most
progress per GPU, then the oldest job. ``rank`` orders the projects:
below their guarantee first (R2), then the lowest allocated/fair-share ratio, then the oldest; the pass
re-ranks a project after each of its claims. ``is_owed`` tells the claims that keep their project within its
fair share (served first, and allowed to reclaim: R7) from the borrowers'. ``Claims`` gathers what the pass
decides: each waiting claim's reason and place in line (R13) and each start's reason. Nothing here changes
the ledger.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from scheduler.core import goodput, jobindex
from scheduler.core.ledger import JobKey, Ledger
from scheduler.core.model import Job


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
    # whether the plan explains waiting jobs (R13 notes); if not, outcomes that only notes read are not kept
    explain: bool = True
    # whether failed starts are kept for another turn (``CycleMemo.retry``; not in the last one)
    owed_phase: bool = True
    # R18: running jobs whose growth would not pay for its restart, with why (R13)
    held_back: dict[JobKey, str] = field(default_factory=dict)


def record(claims: Claims, job: Job, reason: str, *, waiting: bool) -> None:
    """What happened to a claim; a waiting one takes the next place in line (R13)."""
    claims.outcomes[job.key] = Outcome(reason, waiting)
    if waiting:
        claims.line.append(job.key)


def project_queues(ledger: Ledger) -> dict[str, deque[Job]]:
    """Each project's claims in line order (the module contract); jobs touched already this cycle, or with
    replicas still stopping, claim nothing."""
    active, released, started = ledger.active, ledger.released, ledger.started
    claimants = _claimants(ledger)
    if released or started:  # touched already this cycle (limits, restores)
        queues = {}
        for project, jobs in claimants.items():
            left = [j for j in jobs if j.key not in released and j.key not in started]
            if left:
                queues[project] = left
    else:
        queues = {project: list(jobs) for project, jobs in claimants.items()}
    goodput_on = ledger.config.goodput

    def order(jobs: list[Job]) -> None:
        jobs.sort(key=lambda j: (-j.priority, not j.interactive, bool(active[j.key]), j.submitted_at, j.name))
        if goodput_on and any(j.throughput is not None for j in jobs):
            # R19: growth claims of equal priority, the most progress per GPU first (nobody reports: no sort)
            jobs.sort(key=lambda j: -goodput.gain(j, len(active[j.key])) if active[j.key] else 0.0)
            jobs.sort(key=lambda j: (-j.priority, not j.interactive, bool(active[j.key])))

    if ledger.carry is None:
        for jobs in queues.values():
            order(jobs)
    else:  # only the projects whose claimants changed are sorted again
        ledger.carry.lines(ledger.state, ledger.config, queues, order)
    return {p: deque(jobs) for p, jobs in queues.items()}


def _claimants(ledger: Ledger) -> dict[str, list[Job]]:
    """Per project, in key order, the snapshot's jobs that claim (pending, or running elastic below
    ``max_replicas``), but for those with replicas still stopping (resized again only once they exited: no
    index reused). Kept with the snapshot's index while it is reused."""
    return jobindex.claimants(ledger.index, elastic=ledger.config.elastic)


def rank(ledger: Ledger, project: str) -> tuple[int, float, float, str]:
    """Projects below their guarantee first (R2), then the lowest allocated/fair-share ratio, then the oldest."""
    p = ledger.projects[project]
    alloc, share = ledger.committed(project), ledger.shares.project[project]
    tier = 0 if alloc < ledger.shares.guarantee[project] else 1
    ratio = alloc / share if share else float("inf")
    return (tier, ratio, p.created_at, project)


def is_owed(ledger: Ledger, job: Job) -> bool:
    """Whether serving this claim keeps its project within fair share (so it may reclaim, R7)."""
    if job.key in ledger.released:
        return True  # dropped when served
    if ledger.active[job.key]:
        return ledger.shares.project[job.project] - ledger.committed(job.project) >= job.gpus_per_replica
    return entitled_to(ledger, job, job.min_replicas * job.gpus_per_replica)


def entitled_to(ledger: Ledger, job: Job, need: int) -> bool:
    """R7: a claim may take GPUs from others only while its project stays within its fair share."""
    return ledger.committed(job.project) + need <= ledger.shares.project[job.project]


def below_guarantee(ledger: Ledger, project: str) -> bool:
    """R2: the project holds less than ``min(deserved, demand)`` (with what is held for it)."""
    return ledger.committed(project) < ledger.shares.guarantee[project]
