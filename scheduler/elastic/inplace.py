"""In-place launches of torchrun jobs whose replicas run Tide's agent (the Kubernetes executor).

Contract (docs/kubernetes.md). On an executor with ``inplace_restarts`` a job whose command is a torchrun
launch (``uses_torchrun``) keeps its replicas' pods across resizes: each pod runs ``tide agent``, which
asks the service for its launch (``api.server.routes.agent``) and restarts its training workers at each new one.
A launch is a generation number: ``ReplicaRow.launch_generation`` is the launch the replica's agent is to
run; the replicas sharing the job's newest one are its members, ranked by replica index (the master is
rank 0 and hosts the rendezvous). What the agents say is in ``AgentReportRow``.

- ``prepare`` gives a job its agent token before its first pod starts: a random secret handed to the
  executor (a per-job Secret the pods read), only its SHA-256 kept in ``JobRow.agent_token_hash``.
- ``due`` finds such jobs and their agents' reports; ``fold_failure`` then ``relaunch`` move each one to
  its next launch, all in the caller's transaction (so a decision and the deletion of the removed replicas'
  pods commit together, or neither does; ``scheduler.elastic.coordinator`` calls them):
  a shrink (a member is told to stop) relaunches the rest at once, in the same cycle as the removed pods'
  deletion (with a preemption notice, once it ran: the leaving and the staying members' agents are all
  told to pass SIGUSR1 to their training first, ``scheduler.elastic.notice``); a grow admits the new
  replicas once each one's agent reports a warm launcher (``warm``; or ``WARM_TIMEOUT_S`` after its
  container started: an image pull does not count), so the members keep training while the newcomers
  import torch;
  a job with no launch yet launches all its replicas at once.
- A member whose training exited non-zero on its own (``exited``, the current launch) restarts the whole
  launch from the checkpoint, or fails the job, as the restart budget says (``scheduler.elastic.policy``,
  the same as for the local executor): ``fold_failure`` restarts it (``lifecycle.restart_launch``) or
  returns the ``Fail`` verdict for the caller to apply.
Everything is persisted: a service killed mid-resize resumes it from the rows after its restart.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from scheduler.elastic import notice, policy
from scheduler.elastic.launch import Launch
from scheduler.elastic.torchrun_argv import job_max_restarts, uses_torchrun
from scheduler.executors.base import Executor
from scheduler.statuses import ACTIVE, ReplicaDesired, ReplicaStatus
from scheduler.store import lifecycle
from scheduler.store.models import AgentReportRow, JobRow, ReplicaRow

WARM_TIMEOUT_S = 60.0  # a newcomer whose launcher is not warm by then is admitted anyway (it starts cold)
READY_STATES = ("warm", "running", "stopped", "exited")  # the agent is up and has a warm launcher


def inplace(executor: Executor, job: JobRow) -> bool:
    return executor.capabilities.inplace_restarts and uses_torchrun(job.command)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def prepare(executor: Executor, job: JobRow) -> None:
    """Give ``job`` its agent token (once): the secret to the executor, its hash to the row."""
    if job.agent_token_hash is not None:
        return
    token = secrets.token_urlsafe(32)
    executor.put_agent_token(job.project.name, job.name, token)
    job.agent_token_hash = hash_token(token)


def current_launch(replicas: Iterable[ReplicaRow]) -> int | None:
    """The job's newest launch generation (None: never launched in place)."""
    return max((r.launch_generation for r in replicas if r.launch_generation is not None), default=None)


def members(job: JobRow, generation: int) -> list[ReplicaRow]:
    """The wanted replicas of launch ``generation``, by rank (replica index)."""
    chosen = [
        r for r in job.replicas if r.desired == ReplicaDesired.RUN and r.launch_generation == generation
    ]
    return sorted(chosen, key=lambda r: r.index)


def launch(job: JobRow, generation: int) -> Launch:
    """Launch ``generation`` of ``job`` as one thing (``ValueError`` when no wanted replica belongs to it)."""
    return Launch(job.project.name, job.name, generation, tuple(r.id for r in members(job, generation)))


def due(session: Session, executor: Executor) -> tuple[list[JobRow], dict[int, AgentReportRow]]:
    """The active in-place jobs, and their agents' reports by replica id."""
    jobs = session.scalars(
        select(JobRow)
        .where(JobRow.status.in_(ACTIVE))
        .options(selectinload(JobRow.replicas), selectinload(JobRow.project))
    ).all()
    ours = [job for job in jobs if inplace(executor, job)]
    if not ours:
        return [], {}
    rows = session.scalars(select(AgentReportRow).where(AgentReportRow.job_id.in_([j.id for j in ours])))
    return ours, {r.replica_id: r for r in rows}


def _launch(job: JobRow, replicas: Iterable[ReplicaRow], now: float) -> int:
    generation = max(job.generation, (current_launch(job.replicas) or 0) + 1)
    job.generation = generation
    for replica in replicas:
        replica.launch_generation = generation
        replica.launch_at = now
        notice.clear(replica)
    return generation


def relaunch(job: JobRow, reports: dict[int, AgentReportRow], *, now: float) -> int:
    """Move ``job`` to its next launch where one is due; how many of its newcomers still warm up."""
    current = current_launch(job.replicas)
    wanted = [r for r in job.replicas if r.desired == ReplicaDesired.RUN]
    if not wanted:
        return 0
    if current is None:
        _launch(job, wanted, now)
        return 0
    staying = [r for r in wanted if r.launch_generation == current]
    newcomers = [r for r in wanted if r.launch_generation != current]
    leaving = [r for r in job.replicas if r.desired != ReplicaDesired.RUN and r.launch_generation == current]
    ready = [r for r in newcomers if _warm(r, reports.get(r.id), now)]
    noticed = [r.notice_seconds for r in leaving if notice.pending(r, now) and r.notice_seconds]
    if noticed:  # the launch trains on while the leaving replicas' preemption notice runs: all get it
        for replica in staying:
            if replica.noticed_at is None:
                replica.notice_seconds, replica.noticed_at = max(noticed), now
        return len(newcomers) - len(ready)
    if leaving or (newcomers and len(ready) == len(newcomers)) or not staying:
        for replica in leaving:
            replica.launch_generation = None
        _launch(job, staying + ready, now)
    return len(newcomers) - len(ready)


def _warm(replica: ReplicaRow, report: AgentReportRow | None, now: float) -> bool:
    """Its agent reports a warm launcher, or its container has run for ``WARM_TIMEOUT_S`` (timed from the
    container's start, seen as ``running``: a cold image pull does not count, and the members train on)."""
    if report is not None and report.state in READY_STATES:
        return True
    return (
        replica.status == ReplicaStatus.RUNNING
        and replica.started_at is not None
        and now - replica.started_at >= WARM_TIMEOUT_S
    )


def fold_failure(
    session: Session, job: JobRow, reports: dict[int, AgentReportRow], *, now: float
) -> policy.Verdict | None:
    """A member's training failed in the current launch: the budget's verdict, its restart done here
    (None: no failure)."""
    current = current_launch(job.replicas)
    if current is None:
        return None
    failed = [
        (r, reports[r.id].exit_code)
        for r in members(job, current)
        if r.id in reports
        and reports[r.id].generation == current
        and reports[r.id].state == "exited"
        and reports[r.id].exit_code not in (None, 0)
    ]
    if not failed:
        return None
    replica, code = failed[0]
    what = f"replica {replica.index}'s training exited with code {code}"
    allowed = job_max_restarts(job.command, job.env)
    failures = lifecycle.count_restarts(session, job, policy.FAILURE, job.created_at)
    verdict = policy.after_failure(what, failures=failures, allowed=allowed)
    if isinstance(verdict, policy.Restart):
        ranks = members(job, current)
        generation = _launch(job, ranks, now)
        lifecycle.restart_launch(
            session, job, ranks, generation=generation, in_place=True,
            now=now, cause=verdict.cause, reason=verdict.reason,
        )  # fmt: skip
    return verdict
