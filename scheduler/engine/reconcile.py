"""Make the store and the executor agree: record what the executor saw, then act on what the store wants.

Contract:
- ``record_observations`` folds the executor's report into the store: a replica seen running is
  ``running`` (a pod once its container started: while it waits, an image that cannot be pulled say, it
  stays ``starting`` and its job's ``message`` says why); one seen exiting is finished. A replica told to stop is deleted once it exited (its job is
  still active) or kept with its final status (its job finished). A replica that exited on its own finishes
  its job: any failure fails the job, the master's success (or every replica's) makes it succeed; the rest
  of the job is then stopped. A process the store does not want is stopped (an orphan never survives).
  A process whose launch was never committed (the database went away, or the service was killed, between
  the start and the commit) is killed at once and forgotten once gone; ``launch_waiting`` starts that
  replica again only then, so one replica never has two processes and its job does not fail.
  A job's newest reported checkpoint time (its master's observation) goes to ``lifecycle.checkpointed``, its
  training speed (R19) to ``lifecycle.progressed``.
- ``stop_unwanted`` signals replicas marked ``stop``, workers first and highest index first (R5): a job's
  master is signalled only once
  no other replica of that job is alive (R5, the rendezvous host goes last); a replica given a preemption
  notice gets its SIGUSR1 at once, master included, and its SIGTERM when the notice ran
  (``scheduler.elastic.notice``). It returns how many are still
  stopping, so the loop can look again soon instead of a whole period later.
- ``launch_waiting`` starts wanted replicas whose node has their GPUs free now, lowest GPU ids first. A
  replica the executor cannot start fails its job with the executor's words; one it cannot start *yet*
  (``LaunchDeferred``: a quota full) stays waiting, its job's ``message`` saying why (cleared once it
  started). Either way only that job is touched: the other launches and the cycle go on.
Jobs whose command is a torchrun launch restart as a whole on a resize, a failure or a stuck launch
(``scheduler.elastic.coordinator``): ``record_observations`` and ``stop_unwanted`` call into it, and
``launch_waiting`` starts such a job's replicas together, on the GPUs they held before. On an executor whose
pods run Tide's agent they relaunch in place instead (from ``stop_unwanted``; ``launch_waiting`` gives the
job its agent token before its first pod).
Executor calls happen inside the caller's transaction, so a launch is recorded with the decision that
asked for it; if the commit fails, the next observation finds the unrecorded process and kills it (above).
Every change of a status (launched, seen running, exited, a job finished or failed) goes through
``scheduler.store.lifecycle``, which writes the job's event.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from scheduler.core.fractions import show
from scheduler.elastic import coordinator, notice
from scheduler.elastic.environment import EnvBuilder, ReplicaContext, replica_env
from scheduler.executors.base import (
    LOST_EXIT_CODE,
    Executor,
    ExecutorError,
    LaunchDeferred,
    LaunchSpec,
    Observation,
)
from scheduler.executors.kube import podtemplate
from scheduler.statuses import ACTIVE, JobStatus, ReplicaDesired, ReplicaStatus
from scheduler.store import lifecycle
from scheduler.store.models import JobRow, ProjectRow, ReplicaRow
from scheduler.store.queries import LIVE, held_gpu_ids, node_sizes, shared_gpu_devices

log = logging.getLogger(__name__)
WAITS = "waits to start"  # a deferred launch's words on its job's message
SCOPED_NODES = 512  # launches on at most this many nodes read only those nodes' GPUs (else every node's)


@dataclass(frozen=True, slots=True)
class Knobs:
    """Shell settings reconciliation needs."""

    grace_period: float
    env_builder: EnvBuilder | None = None
    on_executor_error: Callable[[str], None] | None = None  # metrics: an executor call failed (its name)
    launch_timeout: float = 60.0  # torchrun jobs: seconds for a launch to start its workers


def record_observations(
    session: Session,
    executor: Executor,
    seen: Mapping[int, Observation],
    *,
    now: float,
    knobs: Knobs,
    live: Mapping[int, str] | None = None,
) -> set[int]:
    """Fold ``seen`` into the store; return the replicas whose unrecorded process is still being killed.
    ``live``: every live replica's status, by id, as the engine keeps it (``LiveReplicas``); None: read here.
    Whatever acts on a replica reads its row again first, so a ``live`` a write behind only delays the act."""
    record_checkpoints(session, seen)
    if live is None:
        # every live replica (thousands at scale): read on the connection, past the ORM's result processing,
        # once what the session holds is flushed (as the ORM's own query would have)
        session.flush()
        live = dict(session.connection().execute(select(ReplicaRow.id, ReplicaRow.status).where(*LIVE)).all())
    started = [
        rid for rid, status in live.items() if status == ReplicaStatus.STARTING and _started(seen.get(rid))
    ]
    lifecycle.mark_running(session, started, now=now)
    note_waiting(session, {rid: o.waiting for rid, o in seen.items() if o.waiting and rid in live}, started)
    gone = [rid for rid in live if not _running(seen.get(rid))]
    for replica in _with_jobs(session, gone):
        obs = seen.get(replica.id)
        code = obs.exit_code if obs is not None and obs.exit_code is not None else LOST_EXIT_CODE
        _replica_exited(session, executor, replica, code, now, detail=obs.detail if obs is not None else None)
    coordinator.check_launches(session, seen, now=now, timeout=knobs.launch_timeout, fail=fail_job)
    lingering: set[int] = set()
    for replica_id, obs in seen.items():
        if replica_id in live:
            continue
        row = session.get(ReplicaRow, replica_id)
        if row is None or row.exit_code is not None:  # the store does not know it (or saw it exit)
            if obs.running:
                log.warning("stopping replica %s: the store does not want it", replica_id)
                executor.stop(replica_id, knobs.grace_period)
            else:
                executor.forget(replica_id)
        elif row.pid is not None:
            continue  # live after all: its launch was recorded after ``live`` was read
        elif obs.running:  # launched, but the launch was never committed: kill it, launch it again
            log.warning("killing replica %s: its launch was not recorded; it starts again", replica_id)
            executor.stop(replica_id, 0.0)
            lingering.add(replica_id)
        else:
            executor.forget(replica_id)
    return lingering


def record_checkpoints(session: Session, seen: Mapping[int, Observation]) -> None:
    """Hand each active job's checkpoint time and training speed (R19) that its master's observation reported
    to the lifecycle."""
    marks = {rid: obs.checkpointed_at for rid, obs in seen.items() if obs.checkpointed_at is not None}
    speeds = {rid: obs.progress for rid, obs in seen.items() if obs.progress is not None}
    if not marks and not speeds:
        return
    query = (
        select(ReplicaRow.id, JobRow)
        .join(JobRow, ReplicaRow.job_id == JobRow.id)
        .where(ReplicaRow.id.in_(marks.keys() | speeds.keys()), JobRow.status.in_(ACTIVE))
    )
    for replica_id, job in session.execute(query).all():
        if replica_id in marks:
            lifecycle.checkpointed(session, job, marks[replica_id])
        if (speed := speeds.get(replica_id)) is not None:
            lifecycle.progressed(job, speed.samples_per_second, speed.world_size)


def _running(obs: Observation | None) -> bool:
    return obs is not None and obs.running


def _started(obs: Observation | None) -> bool:
    """Its process runs (a pod's container started, not merely the pod made)."""
    return obs is not None and obs.running and obs.waiting is None


def note_waiting(session: Session, waiting: Mapping[int, str], started: Collection[int]) -> None:
    """Say on each job why its replica's process has not started (``waiting``: the executor's words, an
    image that cannot be pulled say); once it ``started``, take those words back."""
    ids = [*waiting, *started]
    if not ids:
        return
    query = select(ReplicaRow).where(ReplicaRow.id.in_(ids)).options(selectinload(ReplicaRow.job))
    for replica in session.scalars(query).all():
        job, prefix = replica.job, f"replica {replica.index} {WAITS}"
        if job.status not in ACTIVE:
            continue
        if replica.id in waiting:
            said = f"{prefix}: {waiting[replica.id]}"
            if job.message != said:
                job.message = said
        elif job.message is not None and job.message.startswith(prefix):
            job.message = None


def _with_jobs(session: Session, ids: list[int]) -> list[ReplicaRow]:
    if not ids:
        return []
    query = (
        select(ReplicaRow)
        .where(ReplicaRow.id.in_(ids), *LIVE)  # one seen exiting since ``live`` was read is not again
        .options(selectinload(ReplicaRow.job).selectinload(JobRow.replicas))
        .options(selectinload(ReplicaRow.job).selectinload(JobRow.project))
        .order_by(ReplicaRow.id)
    )
    return list(session.scalars(query).all())


def _replica_exited(
    session: Session,
    executor: Executor,
    replica: ReplicaRow,
    code: int,
    now: float,
    *,
    detail: str | None = None,
) -> None:
    job = replica.job
    requested = replica.desired == ReplicaDesired.STOP
    executor.forget(replica.id)
    what = f"replica {replica.index} {describe_exit(code)}" + (f" ({detail})" if detail else "")
    outcome = coordinator.ExitOutcome(handled=False)
    if not requested and job.status in ACTIVE:
        outcome = coordinator.on_exit(session, executor, replica, code, now=now, what=what)
        if outcome.handled:
            return
    lifecycle.exited(session, replica, code)
    if requested or job.status not in ACTIVE:
        return
    if code != 0:
        fail_job(session, job, outcome.reason or what, now)
    elif (
        replica.index == 0
        or outcome.finished
        or not any(r.desired == ReplicaDesired.RUN for r in job.replicas)
    ):
        lifecycle.finish_job(session, job, JobStatus.SUCCEEDED, now=now, reason="the job completed")


def describe_exit(code: int) -> str:
    """How a process ended, for a person: the code, and what it usually means."""
    if code == LOST_EXIT_CODE:
        return "was lost (its process vanished without an exit code)"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    hint = {127: " (command not found)", 126: " (command not executable)"}.get(code, "")
    return f"exited with code {code}{hint}"


def fail_job(session: Session, job: JobRow, reason: str, now: float) -> None:
    """Fail ``job`` for ``reason`` (the launch coordinator is handed this, as its ``FailJob``)."""
    lifecycle.finish_job(session, job, JobStatus.FAILED, now=now, reason=reason)


def stop_unwanted(session: Session, executor: Executor, *, now: float, knobs: Knobs) -> int:
    """Signal what must stop; return how many replicas are still stopping (signalled or not)."""
    restarting = coordinator.sync(session, executor, now=now, grace=knobs.grace_period, fail=fail_job)
    return restarting + _stop_released(session, executor, now=now, knobs=knobs)


def _stop_released(session: Session, executor: Executor, *, now: float, knobs: Knobs) -> int:
    stopping = session.scalars(
        select(ReplicaRow)
        .where(ReplicaRow.desired == ReplicaDesired.STOP, *LIVE)
        .options(selectinload(ReplicaRow.job))
        .order_by(ReplicaRow.job_id, ReplicaRow.index.desc())  # R5: highest index first
    ).all()
    if not stopping:
        return 0
    counts = session.execute(
        select(ReplicaRow.job_id, func.count())
        .where(ReplicaRow.job_id.in_({r.job_id for r in stopping}), *LIVE)
        .group_by(ReplicaRow.job_id)
    )
    alive_by_job: dict[int, int] = dict(counts.all())
    for replica in stopping:
        if replica.stop_requested_at is not None:
            continue
        if replica.index == 0 and alive_by_job.get(replica.job_id, 0) > 1:
            notice.announce(executor, replica, now)  # its notice now, with its workers'
            continue  # the master goes last
        if notice.stop(executor, replica, notice.grace_of(replica.job, knobs.grace_period), now):
            replica.stop_requested_at = now
    return len(stopping)


def launch_waiting(
    session: Session, executor: Executor, *, now: float, knobs: Knobs, lingering: Collection[int] = ()
) -> int:
    """Launch what waits, except ``lingering`` replicas (an unrecorded process of theirs is not gone yet)."""
    waiting = session.scalars(
        select(ReplicaRow)
        .join(ReplicaRow.job)
        .where(ReplicaRow.desired == ReplicaDesired.RUN, ReplicaRow.pid.is_(None), JobRow.status.in_(ACTIVE))
        .options(
            # its project's department too: each launch reads its pod defaults, and a lazy load of one
            # wrote the launches before it one statement each (the session flushes before a lazy load)
            selectinload(ReplicaRow.job).selectinload(JobRow.project).selectinload(ProjectRow.department),
            # each launch reads its job's replicas (the master's address): loaded here, not one query each
            selectinload(ReplicaRow.job).selectinload(JobRow.replicas),
        )
        .order_by(JobRow.submitted_at, JobRow.id, ReplicaRow.index)
    ).all()
    if not waiting:
        return 0
    # only the nodes these launches use (a launch at 81,920 GPUs read all 10,240 nodes and every live replica)
    nodes = {r.node for w in waiting for r in w.job.replicas if r.desired == ReplicaDesired.RUN}
    scope = nodes if len(nodes) <= SCOPED_NODES else None
    sizes = node_sizes(session, scope)
    held = held_gpu_ids(session, scope)
    shared = shared_gpu_devices(session, scope)  # R20: the device of each shared GPU that has a live replica
    launched = 0
    whole = _whole_launches(waiting, executor, sizes, held, shared)
    for replica in waiting:
        if (
            replica.job.status not in ACTIVE
            or replica.desired != ReplicaDesired.RUN
            or replica.id in lingering
        ):
            continue  # its job failed to launch an earlier replica this round, or its old process lingers
        if coordinator.launches_whole(executor, replica.job) and replica.job.id not in whole:
            continue
        gpu_ids = _gpus_for(replica, sizes.get(replica.node, 0), held.get(replica.node, set()), shared)
        if gpu_ids is None:
            continue
        if _launch(session, executor, replica, gpu_ids=gpu_ids, now=now, knobs=knobs):
            held.setdefault(replica.node, set()).update(gpu_ids)
            if replica.shared_gpu is not None:
                shared[(replica.node, replica.shared_gpu)] = gpu_ids[0]
            launched += 1
    return launched


def _gpus_for(
    replica: ReplicaRow, size: int, held: set[int], shared: Mapping[tuple[str, int], int]
) -> tuple[int, ...] | None:
    """Free GPU ids for ``replica``: the ones it had before (a restarted replica keeps its GPUs), else the
    lowest free ones; None when too few are free. A fractional replica (R20) gets the device of its shared
    GPU, the one its partners run on, or for a shared GPU none runs on yet a free one."""
    free = [g for g in range(size) if g not in held]
    if replica.shared_gpu is not None:
        device = shared.get((replica.node, replica.shared_gpu))
        if device is not None:
            return (device,)
        if replica.gpu_ids and replica.gpu_ids[0] in free:
            return (replica.gpu_ids[0],)
        return (free[0],) if free else None
    if replica.gpu_ids and len(replica.gpu_ids) == replica.gpus and set(replica.gpu_ids) <= set(free):
        return tuple(replica.gpu_ids)
    return tuple(free[: replica.gpus]) if len(free) >= replica.gpus else None


def _whole_launches(
    waiting: Sequence[ReplicaRow],
    executor: Executor,
    sizes: Mapping[str, int],
    held: Mapping[str, set[int]],
    shared: Mapping[tuple[str, int], int],
) -> set[int]:
    """Ids of torchrun jobs whose wanted replicas can all start now: none of their processes is left and
    every one of them finds its GPUs free (a launch is one fixed-size rendezvous)."""
    jobs = {r.job.id: r.job for r in waiting if coordinator.launches_whole(executor, r.job)}
    ready: set[int] = set()
    taken = {node: set(ids) for node, ids in held.items()}  # across jobs: two launches never share a GPU
    for job_id, job in jobs.items():
        if not coordinator.launchable(job):
            continue
        trial = {node: set(ids) for node, ids in taken.items()}
        devices = dict(shared)
        fits = True
        wanted = (r for r in job.replicas if r.desired == ReplicaDesired.RUN)
        for replica in sorted(wanted, key=lambda r: r.index):
            gpu_ids = _gpus_for(replica, sizes.get(replica.node, 0), trial.get(replica.node, set()), devices)
            if gpu_ids is None:
                fits = False
                break
            trial.setdefault(replica.node, set()).update(gpu_ids)
            if replica.shared_gpu is not None:
                devices[(replica.node, replica.shared_gpu)] = gpu_ids[0]
        if fits:
            ready.add(job_id)
            taken = trial
    return ready


def _launch(
    session: Session,
    executor: Executor,
    replica: ReplicaRow,
    *,
    gpu_ids: tuple[int, ...],
    now: float,
    knobs: Knobs,
) -> bool:
    job = replica.job
    spec = LaunchSpec(
        replica_id=replica.id,
        project=job.project.name,
        job=job.name,
        index=replica.index,
        node=replica.node,
        gpu_ids=gpu_ids,
        argv=tuple(job.command),
        env=replica_env(_context(job, replica, gpu_ids), knobs.env_builder),
        image=job.image,
        grace=job.grace_period if job.grace_period is not None else knobs.grace_period,
        pod_template=pod_template(job),
        gpu_share=None if job.gpu_fraction is None else show(Fraction(job.gpu_fraction)),
    )
    try:
        coordinator.prepare(executor, job)
        obs = executor.start(spec)
    except LaunchDeferred as error:
        log.info("replica %s of %s/%s waits: %s", replica.index, spec.project, job.name, error)
        job.message = f"replica {replica.index} {WAITS}: {error}"
        return False
    except ExecutorError as error:
        log.warning("cannot start replica %s of %s/%s: %s", replica.index, spec.project, job.name, error)
        if knobs.on_executor_error is not None:
            knobs.on_executor_error("start")
        fail_job(session, job, f"replica {replica.index} could not start: {error}", now)
        return False
    lifecycle.launched(replica, pid=obs.pid, gpu_ids=gpu_ids, now=now, running=_started(obs))
    if job.message is not None and job.message.startswith(f"replica {replica.index} {WAITS}"):
        job.message = None  # it started: the reason it waited is over
    return True


def pod_template(job: JobRow) -> dict[str, Any] | None:
    """The job's pod template over its project's and department's defaults, as they are now (None: none)."""
    project = job.project
    department = project.department.pod_defaults if project.department is not None else None
    if job.pod_template is None and project.pod_defaults is None and department is None:
        return None
    return podtemplate.effective(department, project.pod_defaults, job.pod_template)


def _context(job: JobRow, replica: ReplicaRow, gpu_ids: tuple[int, ...]) -> ReplicaContext:
    wanted = [r for r in job.replicas if r.desired == ReplicaDesired.RUN]
    master = next((r for r in wanted if r.index == 0), replica)
    return ReplicaContext(
        project=job.project.name,
        job=job.name,
        job_id=job.id,
        index=replica.index,
        num_replicas=len(wanted),
        min_replicas=job.min_replicas,
        max_replicas=job.max_replicas,
        gpus_per_replica=job.gpus_per_replica,
        node=replica.node,
        master_node=master.node,
        gpu_ids=gpu_ids,
        generation=job.generation,
        job_env=dict(job.env),
        allowed_replicas=tuple(job.allowed_replicas or ()),
        gpu_fraction=None if job.gpu_fraction is None else show(Fraction(job.gpu_fraction)),
    )
