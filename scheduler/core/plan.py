"""The scheduling core's output: decisions as data, each with a reason a person can read.

Contract: ``plan_cycle`` returns one ``Plan``. Its ``decisions`` are ordered as they should be applied:
releases (shrink, evict) before starts and grows. No ``Start``/``Grow`` lands on GPUs that a release of this or a
previous plan frees only in a later cycle: a job owed GPUs that are still being released gets a
``Reservation`` instead, and starts in the first cycle after they are free (or, for a waiting job, as soon as
they are: ``scheduler.core.handoff`` makes the ``Start`` its firm reservations stand for). So every
``Start``/``Grow`` lands on GPUs that are free in the snapshot it was planned from. ``notes`` carries, for every job that is not
running at its wanted size, why not and its place in line (R13).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction


class Action(StrEnum):
    START = "start"  # a pending job starts with these replicas (at least min_replicas: R8)
    GROW = "grow"  # a running elastic job gets these extra replicas (R9)
    SHRINK = "shrink"  # a running elastic job loses these replicas, workers only, highest index first (R5)
    EVICT = "evict"  # a running job loses every replica and goes back to pending (master last)


class Cause(StrEnum):
    """Why a release happened, for metrics and the dashboard."""

    FAIR_SHARE = "fair-share"  # R1/R4: idle GPUs lent or grown into
    RECLAIM = "reclaim"  # R2/R5/R6/R7: taken back for another project
    PREEMPT = "preempt"  # R10: taken for a higher-priority (or interactive, R3) job of the same project
    LIMIT = "limit"  # R11: the project is above its limit (e.g. the limit was lowered)
    QUOTA = "quota"  # R3: an interactive job above the deserved quota (e.g. the quota was lowered)
    NODE = "node"  # the node went away or was cordoned below the job's needs
    CONSOLIDATE = "consolidate"  # moved to another node to make a whole node for a guaranteed claim


@dataclass(frozen=True, slots=True)
class Placement:
    """Replica ``index`` of a job on ``node`` with ``gpus`` GPUs; or, for a fractional job (R20), ``share`` of
    the node's shared GPU ``gpu`` (``gpus`` 0)."""

    index: int
    node: str
    gpus: int
    share: Fraction | None = None
    gpu: int | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """One change to one job. ``for_job`` names the job the GPUs are taken for, when there is one.

    ``lost_gpu_seconds``: for a shrink or an eviction, the work the job loses: the GPUs it ran on times the
    time since its last checkpoint or (re)start (a resize restarts it too); 0 for a start or a grow.
    """

    action: Action
    project: str
    job: str
    replicas: tuple[Placement, ...]
    reason: str
    cause: Cause = Cause.FAIR_SHARE
    for_job: tuple[str, str] | None = None
    lost_gpu_seconds: float = 0.0

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.replicas)


@dataclass(frozen=True, slots=True)
class JobNote:
    """R13: why a job is not at its wanted size, and its place in line (1 = next; None when not waiting)."""

    project: str
    job: str
    reason: str
    queue_position: int | None


@dataclass(frozen=True, slots=True)
class ProjectShare:
    """Per-project figures of this cycle, before the plan is applied. ``weight``: the over-quota weight the
    division used (R14 lowers it for a project with usage above quota; a department's is its own)."""

    project: str
    deserved_gpus: int
    fair_share_gpus: int
    allocated_gpus: int
    demand_gpus: int
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Reservation:
    """GPUs held back on ``node`` for a job that starts or grows once they are free (they stay idle).

    ``firm``: the job will start there, so the GPUs count as its project's (R7 measures a victim by what it
    holds plus its firm holds); a drain hold (an owed big replica waiting for a node to empty) is not firm.
    """

    project: str
    job: str
    node: str
    gpus: int
    firm: bool = True


@dataclass(frozen=True, slots=True)
class Plan:
    decisions: tuple[Decision, ...]
    notes: tuple[JobNote, ...]
    shares: tuple[ProjectShare, ...]
    department_shares: tuple[ProjectShare, ...] = ()
    reservations: tuple[Reservation, ...] = ()

    def for_job(self, project: str, job: str) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if d.project == project and d.job == job)

    def note(self, project: str, job: str) -> JobNote | None:
        return next((n for n in self.notes if n.project == project and n.job == job), None)

    def share(self, project: str) -> ProjectShare:
        return next(s for s in self.shares if s.project == project)
