"""Preemption notice: SIGUSR1 to a replica whose GPUs are reclaimed or preempted, some seconds before its
SIGTERM, so its training can checkpoint (docs/rules.md, "Preemption notice").

Contract:
- ``NOTICE_CAUSES``: the releases that give one: reclaim (R2/R5/R6/R7), in-project preemption (R10) and
  consolidation (a replica moved to make a whole node for a guaranteed claim). A job finishing, a delete,
  a lowered limit or quota, a failed or drained node stop replicas without one.
- ``project_notice``: a project's own ``preemption_notice_seconds``, else its department's, else 0.
- ``give(job, replica, grace)`` (called by ``persist`` for each replica a SHRINK or EVICT with such a cause
  releases): stores the notice on the replica, cut to its grace period, and returns it for the event.
- ``reaches(executor, job)``: whether the executor can deliver a notice to that job's replicas: one whose
  ``preemption_notices`` is true (local, memory), or a job whose pods run Tide's agent (Kubernetes
  in-place, ``scheduler.elastic.inplace``: the agent is told by its poll, ``api.server.routes.agent``).
- ``stop(executor, replica, grace, now)`` is how the engine asks a replica to stop. Without a notice:
  ``executor.stop(id, grace)`` at once. With one: ``executor.notify(id)`` (SIGUSR1) and ``noticed_at`` the
  first time, nothing more while the notice runs, then ``executor.stop(id, rest)``: the notice counts
  inside the grace, so the SIGKILL comes ``grace`` after the SIGUSR1, when it would have come without a
  notice. A master held back by R5 (it goes once its workers are gone) keeps ``grace - notice`` after its
  SIGTERM. Returns whether the SIGTERM (or the forced kill) was sent.
Every time comes from the caller (``now``); the timing is as fine as the loop, which looks again every
``RELEASE_POLL_SECONDS`` while replicas are stopping.
"""

from __future__ import annotations

from scheduler.core.plan import Cause
from scheduler.elastic.torchrun_argv import uses_torchrun
from scheduler.executors.base import Executor
from scheduler.store.models import JobRow, ProjectRow, ReplicaRow

NOTICE_CAUSES = frozenset({Cause.RECLAIM, Cause.PREEMPT, Cause.CONSOLIDATE})
LATE_S = 1.0  # a SIGTERM this late after its notice still keeps the SIGKILL at SIGUSR1 + grace


def project_notice(project: ProjectRow) -> int:
    """The project's own notice, else its department's, else 0 (none)."""
    if project.preemption_notice_seconds is not None:
        return project.preemption_notice_seconds
    department = project.department.preemption_notice_seconds if project.department else None
    return department or 0


def reaches(executor: Executor, job: JobRow) -> bool:
    capabilities = executor.capabilities
    if capabilities.preemption_notices:
        return True
    return capabilities.inplace_restarts and uses_torchrun(job.command)  # its agent


def give(replica: ReplicaRow, notice: float, grace: float) -> float:
    """Give ``replica`` a notice of ``notice`` seconds, cut to ``grace``; the notice it gets."""
    replica.notice_seconds = min(float(notice), max(grace, 0.0))
    return replica.notice_seconds


def words(notice: float, asked: float, grace: float) -> str:
    """What an event says of a notice: ``notice: 20 s before SIGTERM``."""
    if notice < asked:
        return (
            f"notice: SIGUSR1 {notice:g} s before SIGKILL (the {asked:g} s notice is cut to the grace period)"
        )
    return f"notice: SIGUSR1 {notice:g} s before SIGTERM"


def grace_of(job: JobRow, default: float) -> float:
    return job.grace_period if job.grace_period is not None else default


def stop(executor: Executor, replica: ReplicaRow, grace: float, now: float) -> bool:
    """Notice, then SIGTERM once it ran (see the module's contract); whether the SIGTERM was sent."""
    notice = replica.notice_seconds or 0.0
    if notice <= 0:
        executor.stop(replica.id, grace)
        return True
    noticed_at = announce(executor, replica, now)
    elapsed = now - noticed_at
    if elapsed < notice:
        return False
    executor.stop(replica.id, max(grace - (elapsed if elapsed <= notice + LATE_S else notice), 0.0))
    return True


def announce(executor: Executor, replica: ReplicaRow, now: float) -> float:
    """Send ``replica``'s notice (SIGUSR1) unless it was sent; when it was (``now`` if just now)."""
    if replica.noticed_at is None and (replica.notice_seconds or 0.0) > 0:
        executor.notify(replica.id)
        replica.noticed_at = now
    return replica.noticed_at if replica.noticed_at is not None else now


def pending(replica: ReplicaRow, now: float) -> bool:
    """Whether ``replica``'s notice is given but not over (or due and not given yet)."""
    notice = replica.notice_seconds or 0.0
    return notice > 0 and (replica.noticed_at is None or now < replica.noticed_at + notice)


def clear(replica: ReplicaRow) -> None:
    replica.notice_seconds = None
    replica.noticed_at = None
