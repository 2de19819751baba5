"""What the engine calls to run torchrun jobs' launches: the strategy each executor takes, and its verdicts.

Contract (docs/elastic-resize.md, docs/kubernetes.md). A job whose command is a torchrun launch runs as a
series of launches. The executor's declared ``capabilities`` choose the strategy: ``coordinated_restarts``
(the local executor) ends every process before the next launch and starts them again together
(``scheduler.elastic.restarts``); ``inplace_restarts`` (Kubernetes) keeps the pods, whose agents relaunch
their training (``scheduler.elastic.inplace``). Both take the same restart budget
(``scheduler.elastic.policy``) and restart through ``scheduler.store.lifecycle.restart_launch``; a job
the budget gives up on fails through the engine's ``FailJob``, handed in by the caller. Everything runs in
the caller's transaction.

- ``sync``: after a resize, each job moves toward its next launch (coordinated: marked replicas get their
  SIGTERM, after the notice a shrink gave; in place: members fail, restart or relaunch). Returns how many
  replicas are still restarting (coordinated restarts; newcomers warming up in place are not counted).
- ``on_exit``: what an exit of a wanted replica of an active job means (``ExitOutcome``).
- ``check_launches``: a launch whose workers did not start within the timeout is retried once, then its
  job fails.
- ``launches_whole`` and ``launchable``: such a job's replicas launch together, once none of its
  processes is left (coordinated restarts).
- ``prepare``: before an in-place job's first pod starts, it gets its agent token.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sqlalchemy.orm import Session

from scheduler.elastic import inplace, policy, restarts
from scheduler.elastic.restarts import ExitOutcome
from scheduler.executors.base import Executor, Observation
from scheduler.store.models import JobRow, ReplicaRow

__all__ = [
    "ExitOutcome",
    "FailJob",
    "check_launches",
    "launchable",
    "launches_whole",
    "on_exit",
    "prepare",
    "sync",
]

FailJob = Callable[[Session, JobRow, str, float], None]  # fail the job for a reason, at a time


def sync(session: Session, executor: Executor, *, now: float, grace: float, fail: FailJob) -> int:
    """Move resized, failed or relaunched jobs on (see the module's contract); how many are restarting."""
    restarting = restarts.sync_launches(session, executor, now=now, grace=grace)
    if executor.capabilities.inplace_restarts:
        _sync_in_place(session, executor, now=now, fail=fail)
    return restarting


def _sync_in_place(session: Session, executor: Executor, *, now: float, fail: FailJob) -> None:
    jobs, reports = inplace.due(session, executor)
    for job in jobs:
        verdict = inplace.fold_failure(session, job, reports, now=now)
        if isinstance(verdict, policy.Fail):
            fail(session, job, verdict.reason, now)
        elif verdict is None:
            inplace.relaunch(job, reports, now=now)


def on_exit(
    session: Session, executor: Executor, replica: ReplicaRow, code: int, *, now: float, what: str
) -> ExitOutcome:
    """Fold the exit of a wanted replica of an active job; ``what`` describes it for a person."""
    return restarts.on_exit(session, executor, replica, code, now=now, what=what)


def check_launches(
    session: Session,
    seen: Mapping[int, Observation],
    *,
    now: float,
    timeout: float,
    fail: FailJob,
) -> None:
    """Retry a launch whose workers did not start within ``timeout`` once, then fail its job."""
    for job in restarts.stuck(session, seen, now=now, timeout=timeout):
        verdict = restarts.retry(session, job, now=now, timeout=timeout)
        if verdict is not None:
            fail(session, job, verdict.reason, now)


def launches_whole(executor: Executor, job: JobRow) -> bool:
    """Whether ``job``'s replicas launch together (coordinated restarts of a torchrun job)."""
    return restarts.coordinated(executor, job)


def launchable(job: JobRow) -> bool:
    """A job that launches whole may launch now: none of its processes is left."""
    return restarts.launchable(job)


def prepare(executor: Executor, job: JobRow) -> None:
    """Before ``job``'s replica starts: an in-place job gets its agent token (once)."""
    if inplace.inplace(executor, job):
        inplace.prepare(executor, job)
