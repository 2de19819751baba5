"""R15 minimum runtime: a job just started or resized is spared by reclaim until it has run a while.

Contract: pure functions of a snapshot. A project's minimum runtime is its own ``min_runtime_seconds``, else
its department's, else 0 (off). A running preemptible job is *young* while
``now < last_resized_at + min_runtime``; ``young`` maps each young job to the time its protection ends.

What it protects against (the victim search reads ``Ledger.young`` in ``preemption.Reclaimer.eligible``):
reclaim by another project of GPUs above the victim's fair share, and elastic shrink for another borrower.
It yields only to R2: a claim whose project is below its guarantee first tries every candidate set that
spares young jobs (``victims.searches``), and takes one only where no such set serves it; the release then
says so (``overridden``). In-project priority preemption (R10), limits (R11) and lost nodes ignore it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler.core.clock import clock
from scheduler.core.model import Department, Job, Project

__all__ = ["clock", "overridden", "seconds", "until_text", "young"]


def seconds(project: Project, departments: Mapping[str, Department]) -> float:
    """The project's minimum runtime: its own, else its department's, else 0."""
    if project.min_runtime_seconds is not None:
        return project.min_runtime_seconds
    dept = departments.get(project.department) if project.department else None
    return dept.min_runtime_seconds if dept is not None else 0.0


def young(
    jobs: Iterable[Job], projects: Mapping[str, Project], departments: Mapping[str, Department], now: float
) -> dict[tuple[str, str], float]:
    """Each running preemptible job still inside its minimum runtime, with the time its protection ends."""
    runtime = {name: seconds(p, departments) for name, p in projects.items()}
    if not any(v > 0 for v in runtime.values()):
        return {}
    out: dict[tuple[str, str], float] = {}
    for job in jobs:
        t, mr = job.last_resized_at, runtime.get(job.project, 0.0)
        if t is not None and mr > 0 and now < t + mr and job.preemptible and job.active:
            out[job.key] = t + mr
    return out


def overridden(young_jobs: Mapping[tuple[str, str], float], key: tuple[str, str], claimant: str) -> str:
    """The words a release of a young job adds (R2 won over R15); empty for any other job."""
    if key not in young_jobs:
        return ""
    return f"; minimum runtime overridden: project {claimant} is below its guarantee"


def until_text(young_jobs: Mapping[tuple[str, str], float], blocking: Iterable[str]) -> str:
    """For a waiting claim (R13): ``; jobs of project a are protected by their minimum runtime until 14:05 UTC``
    for the projects in ``blocking`` whose young jobs it might have taken (earliest end); empty if none."""
    names = set(blocking)
    ends = [(end, key[0]) for key, end in young_jobs.items() if key[0] in names]
    if not ends:
        return ""
    end, _ = min(ends)
    owners = sorted({p for _, p in ends})
    whose = f"project {owners[0]}" if len(owners) == 1 else "projects " + ", ".join(owners)
    return f"; jobs of {whose} are protected by their minimum runtime until {clock(end)}"
