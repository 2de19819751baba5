"""R18 resize cost: elastic decisions that pay for themselves.

Contract: pure functions of a snapshot. Every resize of a running job restarts all its replicas (checkpoint
load, rendezvous, warm-up), pausing its training for its **resize cost** ``c`` seconds. A job's cost is its
own measured estimate (``Job.resize_cost_seconds``, which the service keeps from the pauses it measured),
else its project's ``resize_cost_seconds``, else its department's, else ``Config.resize_cost_seconds``
(0 by default: free resizes, the rules as before R18).

- **Settle time** (R7, decision 13, extended by decision 40): a job just started or resized is left alone
  for ``settle(j) = max(Config.settle_seconds, Config.settle_restarts x c)``: it is not grown, and not shrunk
  for anything but a guarantee (R2) or a higher priority in its own project (R10). With ten restarts per
  settle time, resizes other than R2's and R10's cost a job at most a tenth of its time.
- **Growth pays** (decision 41): a running job of ``n`` replicas grows by ``k`` only when the progress the
  ``k`` new replicas add before its next possible shrink, ``k x (H - c)`` replica-seconds with
  ``H = settle(j)`` (the shortest time it keeps them: R2 and R10 aside, nothing shrinks it earlier), exceeds
  what the restart costs the ``n`` replicas it already runs, ``n x c``. Growth owed by the project's
  guarantee (R2) is never held back. A job with cost 0 always pays (the rule is off).

``settle_ends`` gives the jobs whose settle time is longer than the plain one, with its end (the ledger and
the invariants read it); ``pays`` and ``smallest_paying`` answer for growth; ``held_back`` words R13's reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from operator import attrgetter

from scheduler.core.model import Config, Department, Job, Project

JobKey = tuple[str, str]


def cost(
    job: Job, projects: Mapping[str, Project], departments: Mapping[str, Department], config: Config
) -> float:
    """Seconds one resize pauses ``job``: its measured estimate, else its project's, department's, config's."""
    if job.resize_cost_seconds is not None:
        return job.resize_cost_seconds
    project = projects.get(job.project)
    if project is not None:
        if project.resize_cost_seconds is not None:
            return project.resize_cost_seconds
        dept = departments.get(project.department) if project.department else None
        if dept is not None and dept.resize_cost_seconds is not None:
            return dept.resize_cost_seconds
    return config.resize_cost_seconds


def settle(c: float, config: Config) -> float:
    """The settle time of a job whose resize costs ``c`` seconds."""
    return max(config.settle_seconds, config.settle_restarts * c)


def any_cost(
    jobs: Iterable[Job],
    projects: Mapping[str, Project],
    departments: Mapping[str, Department],
    config: Config,
) -> bool:
    """Whether any job may cost anything (otherwise R18 changes nothing and is skipped)."""
    cost = attrgetter("resize_cost_seconds")  # C-level scans: this runs every cycle, for every job
    return (
        config.resize_cost_seconds > 0
        or any(map(cost, projects.values()))
        or any(map(cost, departments.values()))
        or any(map(cost, jobs))
    )


def costs(
    jobs: Iterable[Job],
    projects: Mapping[str, Project],
    departments: Mapping[str, Department],
    config: Config,
) -> dict[JobKey, float]:
    """Each job's resize cost where it is above 0 (empty when every resize is free)."""
    jobs = tuple(jobs)
    if not any_cost(jobs, projects, departments, config):
        return {}
    out: dict[JobKey, float] = {}
    for job in jobs:
        c = cost(job, projects, departments, config)
        if c > 0:
            out[job.key] = c
    return out


def settle_ends(
    jobs: Iterable[Job], job_costs: Mapping[JobKey, float], config: Config
) -> dict[JobKey, float]:
    """When each job resized at ``last_resized_at`` stops settling, where R18 makes that later than the
    plain settle time."""
    out: dict[JobKey, float] = {}
    for job in jobs:
        c = job_costs.get(job.key, 0.0)
        if c > 0 and job.last_resized_at is not None:
            s = settle(c, config)
            if s > config.settle_seconds:
                out[job.key] = job.last_resized_at + s
    return out


def pays(n: int, k: int, c: float, config: Config) -> bool:
    """Whether growing a job of ``n`` running replicas by ``k`` pays for its restart of ``c`` seconds."""
    if c <= 0 or n <= 0:
        return True
    return k * (settle(c, config) - c) > n * c


def smallest_paying(n: int, c: float, config: Config) -> int:
    """The fewest replicas a job of ``n`` must grow by at once for the growth to pay (1 when free)."""
    if c <= 0 or n <= 0:
        return 1
    gain = settle(c, config) - c
    if gain <= 0:
        return 1 << 30
    return math.floor(n * c / gain) + 1


def held_back(n: int, k: int, c: float, config: Config) -> str:
    """R13: why a job that could grow by ``k`` now does not: ``grows when it pays: +3 replicas would add 810 s of
    progress before it may next be shrunk against a restart of all 32 (960 replica-seconds)``."""
    h = settle(c, config)
    return (
        f"grows when it pays: +{k} replica{'s' if k != 1 else ''} would add {k * (h - c):g} replica-seconds "
        f"of progress in its next {h:g} s (its settle time) against a restart of {c:g} s for the {n} it runs "
        f"({n * c:g} replica-seconds); it grows once {smallest_paying(n, c, config)} can be added at once"
    )
