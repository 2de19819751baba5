"""Coordinated restarts of torchrun jobs: how a resize, a failure or a stuck launch takes effect.

Contract (docs/elastic-resize.md). A job whose command is a torchrun launch (``uses_torchrun``) on an
executor with ``coordinated_restarts`` (the local one) runs as a series of launches, each a fresh
rendezvous of exactly the job's size (the executor sets ``PET_NNODES=N:N`` from ``TIDE_NUM_REPLICAS`` and
a run id and port per ``TIDE_GENERATION``). Replica rows outlive launches: the master keeps its node and
GPUs throughout. A replica whose process must end before the next launch stays wanted (``run``) and is
marked ``terminating``; ``stop_requested_at`` records its SIGTERM.

- ``sync_launches``: a job resized since its launch (wanted replicas not launched beside live ones after
  a GROW; live replicas told to stop beside live wanted ones after a SHRINK) has every live wanted
  replica marked; marked replicas get SIGTERM with the job's grace. After a shrink that gives its leaving
  replicas a preemption notice, the marked ones get the same notice first (``scheduler.elastic.notice``).
  Returns how many are restarting.
- ``on_exit``: a marked replica's exit is a restart: the row is cleared to launch again (GPUs kept).
  Any replica exiting 0 on its own means the training completed (the job succeeds, not shrinks).
  A replica that exited non-zero on its own restarts the whole job from its checkpoint (a new launch),
  or fails it, as the restart budget says (``scheduler.elastic.policy.after_failure``, with the job's
  ``max_restarts`` from ``job_max_restarts``); the outcome carries the failure reason for the caller.
- ``launchable``: all wanted replicas of such a job launch together, once no process of the job is left.
- ``stuck`` and ``retry``: a launch whose workers have not started (``Observation.ready``) within the
  launch timeout is stopped and tried again once; if the retry does not start either, ``retry`` returns
  the ``Fail`` verdict for the caller to apply (``scheduler.elastic.policy.after_timeout``).
A restart goes through ``scheduler.store.lifecycle.restart_launch`` (the ``restart`` event).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from scheduler.elastic import notice, policy
from scheduler.elastic.torchrun_argv import job_max_restarts, uses_torchrun
from scheduler.executors.base import Executor, Observation
from scheduler.statuses import ACTIVE, ReplicaDesired, ReplicaStatus
from scheduler.store import lifecycle
from scheduler.store.models import JobRow, ReplicaRow


@dataclass(frozen=True, slots=True)
class ExitOutcome:
    """What ``on_exit`` made of an exit: ``handled`` (the job goes on), ``finished`` (the training is done:
    a torchrun agent exits 0 only when its worker group completed), or the job's failure ``reason`` once its
    restart budget is spent."""

    handled: bool
    finished: bool = False
    reason: str = ""


def coordinated(executor: Executor, job: JobRow) -> bool:
    return executor.capabilities.coordinated_restarts and uses_torchrun(job.command)


def _mark(job: JobRow) -> int:
    """Mark every live wanted replica of ``job`` to end before the next launch."""
    return lifecycle.mark_restarting(r for r in job.replicas if r.desired == ReplicaDesired.RUN)


def _resized(job: JobRow) -> bool:
    wanted = [r for r in job.replicas if r.desired == ReplicaDesired.RUN]
    running = [r for r in wanted if lifecycle.live(r) and r.status != ReplicaStatus.TERMINATING]
    if not running:
        return False
    grown = any(r.pid is None for r in wanted)
    shrunk = any(r.desired == ReplicaDesired.STOP and lifecycle.live(r) for r in job.replicas)
    return grown or shrunk


def sync_launches(session: Session, executor: Executor, *, now: float, grace: float) -> int:
    """Mark the replicas of resized jobs, signal every marked one; how many are still restarting."""
    if not executor.capabilities.coordinated_restarts:
        return 0
    jobs = session.scalars(
        select(JobRow).where(JobRow.status.in_(ACTIVE)).options(selectinload(JobRow.replicas))
    ).all()
    restarting = 0
    for job in jobs:
        if not coordinated(executor, job):
            continue
        if _resized(job):
            _mark(job)
            _share_notice(job)
        for replica in job.replicas:
            if (
                replica.desired != ReplicaDesired.RUN
                or replica.status != ReplicaStatus.TERMINATING
                or not lifecycle.live(replica)
            ):
                continue
            restarting += 1
            grace_left = notice.grace_of(job, grace)
            if replica.stop_requested_at is None and notice.stop(executor, replica, grace_left, now):
                replica.stop_requested_at = now
    return restarting


def _share_notice(job: JobRow) -> None:
    """A shrink with a preemption notice restarts the whole launch: the staying replicas get the leaving
    ones' notice too (the training's rank 0, on the master, is the one that saves the checkpoint)."""
    given = [
        r.notice_seconds
        for r in job.replicas
        if r.desired == ReplicaDesired.STOP and lifecycle.live(r) and r.notice_seconds
    ]
    if not given:
        return
    for replica in job.replicas:
        if (
            replica.desired == ReplicaDesired.RUN
            and replica.status == ReplicaStatus.TERMINATING
            and replica.stop_requested_at is None
        ):
            replica.notice_seconds = replica.notice_seconds or max(given)


def _clear(replica: ReplicaRow) -> None:
    """Ready to launch again: no process, same node and GPUs, no notice."""
    notice.clear(replica)
    lifecycle.relaunchable(replica)


def _restart(session: Session, job: JobRow, verdict: policy.Restart, *, now: float) -> None:
    """End the current launch of ``job`` and launch it again at the same size (from its checkpoint)."""
    members = sorted((r for r in job.replicas if r.desired == ReplicaDesired.RUN), key=lambda r: r.index)
    lifecycle.restart_launch(
        session, job, members, generation=job.generation + 1, in_place=False,
        now=now, cause=verdict.cause, reason=verdict.reason,
    )  # fmt: skip


def on_exit(
    session: Session, executor: Executor, replica: ReplicaRow, code: int, *, now: float, what: str
) -> ExitOutcome:
    """Fold the exit of a wanted replica of an active job; ``what`` describes it for a person."""
    job = replica.job
    if replica.status == ReplicaStatus.TERMINATING and replica.desired == ReplicaDesired.RUN:
        _clear(replica)
        return ExitOutcome(handled=True)
    if not coordinated(executor, job):
        return ExitOutcome(handled=False)
    if code == 0:
        return ExitOutcome(handled=False, finished=True)
    allowed = job_max_restarts(job.command, job.env)
    failures = lifecycle.count_restarts(session, job, policy.FAILURE, job.created_at)
    verdict = policy.after_failure(what, failures=failures, allowed=allowed)
    if isinstance(verdict, policy.Fail):
        return ExitOutcome(handled=False, reason=verdict.reason)
    _clear(replica)
    _restart(session, job, verdict, now=now)
    return ExitOutcome(handled=True)


def launchable(job: JobRow) -> bool:
    """A torchrun job launches as a whole: only when none of its processes is left."""
    return not any(lifecycle.live(r) for r in job.replicas)


def stuck(session: Session, seen: Mapping[int, Observation], *, now: float, timeout: float) -> list[JobRow]:
    """The active jobs with a launch whose workers did not start within ``timeout``."""
    waiting = [rid for rid, obs in seen.items() if obs.running and obs.ready is False and not obs.stopping]
    if not waiting:
        return []
    rows = session.scalars(
        select(ReplicaRow)
        .where(
            ReplicaRow.id.in_(waiting),
            ReplicaRow.desired == ReplicaDesired.RUN,
            ReplicaRow.started_at < now - timeout,
        )
        .options(selectinload(ReplicaRow.job).selectinload(JobRow.replicas))
    ).all()
    return list({r.job.id: r.job for r in rows if r.job.status in ACTIVE}.values())


def retry(session: Session, job: JobRow, *, now: float, timeout: float) -> policy.Fail | None:
    """Stop ``job``'s stuck launch and try it once more, or give the verdict that fails it."""
    size = sum(1 for r in job.replicas if r.desired == ReplicaDesired.RUN)
    since = job.last_resized_at if job.last_resized_at is not None else job.created_at
    retries = lifecycle.count_restarts(session, job, policy.TIMEOUT, since)
    verdict = policy.after_timeout(size, timeout, retries=retries)
    if isinstance(verdict, policy.Fail):
        return verdict
    _restart(session, job, verdict, now=now)
    return None
