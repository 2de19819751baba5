"""Queries shared by the engine and the API, so each is written (and indexed for) once.

Contract: functions take an open ``Session`` and neither commit nor roll back. ``lock=True`` adds
``FOR UPDATE`` (a no-op on SQLite, whose write transactions are already exclusive).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

from sqlalchemy import Select, String, and_, cast, func, or_, select, text, tuple_
from sqlalchemy.orm import Session, contains_eager, joinedload, selectinload

from scheduler.statuses import ACTIVE, ReplicaDesired, ReplicaStatus
from scheduler.store.models import EventRow, JobRow, NodeRow, ProjectRow, ReplicaRow, takes_replicas

# A replica whose process was launched and has not been seen exiting.
LIVE = (ReplicaRow.pid.is_not(None), ReplicaRow.exit_code.is_(None))


def project_by_name(session: Session, name: str, *, lock: bool = False) -> ProjectRow | None:
    # the department joined in (one query; selectinload read it in a second round trip, a fifth of a
    # submit's API time where projects have departments)
    query = select(ProjectRow).options(joinedload(ProjectRow.department)).where(ProjectRow.name == name)
    if lock:
        query = query.with_for_update(of=ProjectRow).execution_options(populate_existing=True)
    return session.scalars(query).first()


def _job_query(project: str) -> Select[JobRow]:
    # the project from the join itself (``contains_eager``), not a query of its own
    return (
        select(JobRow)
        .join(JobRow.project)
        .where(ProjectRow.name == project)
        .options(selectinload(JobRow.replicas), contains_eager(JobRow.project))
    )


def job_by_name(session: Session, project: str, name: str, *, lock: bool = False) -> JobRow | None:
    query = _job_query(project).where(JobRow.name == name)
    if lock:
        query = query.with_for_update(of=JobRow).execution_options(populate_existing=True)
    return session.scalars(query).first()


def active_jobs(session: Session, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], JobRow]:
    """The jobs of these ``(project, name)`` keys that are pending or running, locked for the rest of the
    transaction, by key: a few queries for a plan of thousands of decisions, not several for each (one job
    at a time, the first cycle on 10,240 GPUs with 5,120 jobs spent 30 s writing its plan)."""
    wanted = sorted(set(keys))
    found: dict[tuple[str, str], JobRow] = {}
    for start in range(0, len(wanted), 400):  # 800 bound parameters a query: far below SQLite's limit
        chunk = wanted[start : start + 400]
        query = (
            select(JobRow)
            .join(JobRow.project)
            .where(tuple_(ProjectRow.name, JobRow.name).in_(chunk), JobRow.status.in_(ACTIVE))
            .options(selectinload(JobRow.replicas), selectinload(JobRow.project))
            .with_for_update(of=JobRow)
            .execution_options(populate_existing=True)
        )
        found |= {(job.project.name, job.name): job for job in session.scalars(query)}
    return found


@dataclass(slots=True)
class LockedJob:
    """An active job locked for a transition, the columns a start reads and changes, read without the ORM
    (``scheduler.store.lifecycle.Starts``)."""

    id: int
    project: str
    name: str
    status: str
    started_at: float | None
    generation: int


def texts(values: Iterable[str | None]) -> str:
    """PostgreSQL: strings (or None) as one JSON array, for ``json_array_elements_text(CAST(:x AS json))``
    where a ``text[]`` would do: psycopg escapes each string of a ``text[]`` in Python (3,000 reasons in
    line took 9 ms, against 0.4 ms for ``json.dumps``, and the server reads the JSON faster too)."""
    return json.dumps(list(values))


# PostgreSQL: the jobs of any number of (project, name) keys, locked, in one statement (the keys as arrays)
_LOCK_ARRAYS = text(
    f"SELECT {JobRow.__tablename__}.id, {ProjectRow.__tablename__}.name, {JobRow.__tablename__}.name, "
    f"{JobRow.__tablename__}.status, {JobRow.__tablename__}.started_at, {JobRow.__tablename__}.generation "
    f"FROM {JobRow.__tablename__} JOIN {ProjectRow.__tablename__} "
    f"ON {ProjectRow.__tablename__}.id = {JobRow.__tablename__}.project_id "
    "JOIN ROWS FROM (json_array_elements_text(CAST(:projects AS json)), "
    "json_array_elements_text(CAST(:names AS json))) AS k(project, name) "
    f"ON {ProjectRow.__tablename__}.name = k.project AND {JobRow.__tablename__}.name = k.name "
    f"WHERE {JobRow.__tablename__}.status IN ({', '.join(repr(str(s.value)) for s in ACTIVE)}) "
    f"FOR UPDATE OF {JobRow.__tablename__}"
)


def lock_active(session: Session, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], LockedJob]:
    """What ``active_jobs`` finds and locks, as ``LockedJob``s (no ORM objects): one statement on
    PostgreSQL, one per 400 keys on SQLite."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    if session.get_bind().dialect.name == "postgresql":
        arrays = {"projects": texts(k[0] for k in wanted), "names": texts(k[1] for k in wanted)}
        rows: list[Any] = list(session.connection().execute(_LOCK_ARRAYS, arrays))  # a read: no write seen
    else:
        rows = []
        columns = (
            JobRow.id,
            ProjectRow.name,
            JobRow.name,
            JobRow.status,
            JobRow.started_at,
            JobRow.generation,
        )
        for start in range(0, len(wanted), 400):
            query = (
                select(*columns)
                .join(ProjectRow, JobRow.project_id == ProjectRow.id)
                .where(tuple_(ProjectRow.name, JobRow.name).in_(wanted[start : start + 400]))
                .where(JobRow.status.in_(ACTIVE))
                .with_for_update(of=JobRow)
            )
            rows += session.execute(query).all()
    return {(row[1], row[2]): LockedJob(*row) for row in rows}


def _on(column: Any, nodes: Collection[str] | None) -> tuple[Any, ...]:
    """The condition that keeps the rows of ``nodes`` (None: every node)."""
    return () if nodes is None else (column.in_(sorted(nodes)),)


def node_sizes(session: Session, nodes: Collection[str] | None = None) -> dict[str, int]:
    """GPUs per node, of ``nodes`` (None: of every node)."""
    query = select(NodeRow.name, NodeRow.gpus).where(*_on(NodeRow.name, nodes))
    return {str(name): int(gpus) for name, gpus in session.execute(query)}


def free_gpus(session: Session, nodes: Collection[str]) -> dict[str, int]:
    """Whole GPUs per node of ``nodes`` that no replica holds or is placed on (one not yet exited, launched or
    not; a shared GPU counts once), 0 on a node closed to new replicas (cordoned, drained, lost, or not
    schedulable by the executor's account)."""
    free = {
        str(name): int(gpus) if takes_replicas(schedulable, state) else 0
        for name, gpus, schedulable, state in session.execute(
            select(NodeRow.name, NodeRow.gpus, NodeRow.schedulable, NodeRow.state).where(
                *_on(NodeRow.name, nodes)
            )
        )
    }
    shared: set[tuple[str, int]] = set()
    rows = session.execute(
        select(ReplicaRow.node, ReplicaRow.gpus, ReplicaRow.shared_gpu).where(
            ReplicaRow.status.in_(_PLACED), *_on(ReplicaRow.node, nodes)
        )
    )
    for node, gpus, shared_gpu in rows:
        if node not in free or (node, shared_gpu) in shared:
            continue
        if shared_gpu is not None:
            shared.add((node, shared_gpu))
        free[node] = max(free[node] - (gpus if shared_gpu is None else 1), 0)
    return free


# a replica that holds its GPUs or will: placed and not yet exited
_PLACED = (ReplicaStatus.STARTING, ReplicaStatus.RUNNING, ReplicaStatus.TERMINATING)


def held_gpu_ids(session: Session, nodes: Collection[str] | None = None) -> dict[str, set[int]]:
    """GPU ids per node held by live processes (whatever their job's state), on ``nodes`` (None: all)."""
    held: dict[str, set[int]] = defaultdict(set)
    query = select(ReplicaRow.node, ReplicaRow.gpu_ids).where(*LIVE, *_on(ReplicaRow.node, nodes))
    for node, gpu_ids in session.execute(query):
        held[node].update(gpu_ids or ())
    return held


def shared_gpu_devices(session: Session, nodes: Collection[str] | None = None) -> dict[tuple[str, int], int]:
    """R20: the device each shared GPU (node, the scheduler's number) was given, from its live replicas, on
    ``nodes`` (None: all)."""
    rows = session.execute(
        select(ReplicaRow.node, ReplicaRow.shared_gpu, ReplicaRow.gpu_ids).where(
            *LIVE, ReplicaRow.shared_gpu.is_not(None), *_on(ReplicaRow.node, nodes)
        )
    )
    return {(node, number): ids[0] for node, number, ids in rows if ids and number is not None}


def project_figures(
    session: Session, project_id: int | None = None
) -> tuple[list[tuple[int, str, int, int]], list[tuple[int, int]]]:
    """Per project: ``(project_id, status, jobs, min GPUs)`` of active jobs (``project_jobs``), and
    ``project_holdings``. Three queries, whatever the number of jobs."""
    return project_jobs(session, project_id), project_holdings(session, project_id)


def project_jobs(session: Session, project_id: int | None = None) -> list[tuple[int, str, int, int]]:
    """Per project and status: ``(project_id, status, jobs, min GPUs)`` of active jobs (one query; what a
    submit changes)."""
    jobs = (
        select(
            JobRow.project_id,
            JobRow.status,
            func.count(),
            func.sum(JobRow.min_replicas * JobRow.gpus_per_replica),
        )
        .where(JobRow.status.in_(ACTIVE))
        .group_by(JobRow.project_id, JobRow.status)
    )
    if project_id is not None:
        jobs = jobs.where(JobRow.project_id == project_id)
    return [(p, status, int(n), int(gpus or 0)) for p, status, n, gpus in session.execute(jobs)]


def project_holdings(session: Session, project_id: int | None = None) -> list[tuple[int, int]]:
    """Per project: ``(project_id, GPUs)`` of the replicas the scheduler wants running (a project may have two
    such rows: its shared GPUs, R20, count one GPU each). Two queries (the second reads fractional
    replicas); what only a change of replicas or of jobs' statuses changes, never a submit."""
    held = (
        select(JobRow.project_id, func.sum(ReplicaRow.gpus))
        .join(ReplicaRow, ReplicaRow.job_id == JobRow.id)
        .where(JobRow.status.in_(ACTIVE), ReplicaRow.desired == ReplicaDesired.RUN)
        .group_by(JobRow.project_id)
    )
    if project_id is not None:
        held = held.where(JobRow.project_id == project_id)
    shared = (
        select(JobRow.project_id, ReplicaRow.node, ReplicaRow.shared_gpu)
        .join(ReplicaRow, ReplicaRow.job_id == JobRow.id)
        .where(
            JobRow.status.in_(ACTIVE),
            ReplicaRow.desired == ReplicaDesired.RUN,
            ReplicaRow.shared_gpu.is_not(None),
        )
        .distinct()
    )
    if project_id is not None:
        shared = shared.where(JobRow.project_id == project_id)
    held_rows = [(p, int(gpus or 0)) for p, gpus in session.execute(held)]
    counts: dict[int, int] = defaultdict(int)
    for p, _node, _number in session.execute(shared):
        counts[p] += 1
    return held_rows + sorted(counts.items())


class Slot(NamedTuple):
    """A replica on a node, as the GPU map shows it."""

    project: str
    job: str
    replica: int  # its index in the job
    gpu_ids: list[int]
    releasing: bool  # told to stop
    job_status: str
    waiting: (
        bool  # placed, waiting for its GPUs (starting, not launched, of an active job); else holding them
    )
    share: str | None  # a fractional replica's share of its one GPU ("1/2", R20); None for whole GPUs


_WAITING = (ReplicaRow.status == ReplicaStatus.STARTING, ReplicaRow.pid.is_(None))


def node_slots(session: Session, node: str | None = None) -> dict[str, list[Slot]]:
    """Per node (only ``node`` if given): its live replicas and those placed there that wait (one read; their
    GPU ids read as text and decoded in one go, not one JSON value a row: 25,000 replicas at 10,240 nodes)."""
    query = (
        select(
            ReplicaRow.node,
            ProjectRow.name,
            JobRow.name,
            ReplicaRow.index,
            cast(ReplicaRow.gpu_ids, String),
            ReplicaRow.desired,
            JobRow.status,
            ReplicaRow.pid,
            ReplicaRow.share,
        )
        .join(JobRow, ReplicaRow.job_id == JobRow.id)
        .join(ProjectRow, JobRow.project_id == ProjectRow.id)
        .where(or_(and_(*LIVE), and_(*_WAITING, JobRow.status.in_(list(ACTIVE)))))
        .order_by(ReplicaRow.node, ProjectRow.name, JobRow.name, ReplicaRow.index)
    )
    if node is not None:
        query = query.where(ReplicaRow.node == node)
    rows = session.execute(query).all()
    gpu_ids: list[list[int] | None] = json.loads(f"[{','.join(row[4] or 'null' for row in rows)}]")
    slots: dict[str, list[Slot]] = defaultdict(list)
    for (name, project, job, index, _, desired, status, pid, share), ids in zip(rows, gpu_ids, strict=True):
        releasing = desired != ReplicaDesired.RUN
        slots[name].append(Slot(project, job, index, ids or [], releasing, status, pid is None, share))
    return slots


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """A replica row's columns, read without the ORM (listings)."""

    id: int
    index: int
    node: str
    gpus: int
    gpu_ids: list[int] | None
    desired: str
    status: str
    pid: int | None
    started_at: float | None
    exit_code: int | None
    share: str | None = None  # R20: a fractional replica's share ("1/2") of its node's shared GPU
    shared_gpu: int | None = None


@dataclass(frozen=True, slots=True)
class JobView:
    """A job row's columns with its project's name and its replicas, read without the ORM (listings)."""

    project_name: str
    name: str
    status: str
    workers: int
    min_replicas: int
    max_replicas: int
    gpus_per_replica: int
    image: str | None
    command: list[str]
    env: dict[str, str]
    interactive: bool
    priority: int
    created_at: float
    finished_at: float | None
    restarts: int
    checkpointed_at: float | None
    pending_reason: str | None
    queue_position: int | None
    message: str | None
    started_at: float | None
    expected_duration: float | None
    eta: dict[str, Any] | None
    allowed_replicas: list[int] | None = None
    topology: str = "preferred"
    progress_rates: dict[str, float] | None = None  # R19: samples per second by replica count, as reported
    resize_cost_seconds: float | None = None  # R18: measured
    resizes_measured: int = 0
    gpu_fraction: str | None = None  # R20: each replica's share of one GPU ("1/2"); None: whole GPUs
    replicas: list[ReplicaView] = field(default_factory=list)


_JOB_VIEW_COLUMNS = [f.name for f in fields(JobView) if f.name not in ("project_name", "replicas")]
_REPLICA_VIEW_COLUMNS = [f.name for f in fields(ReplicaView)]


def _job_filter(
    query: Select[Any],
    project: str | None,
    status: str | Sequence[str] | None,
    waiting: bool = False,
) -> Select[Any]:
    if project is not None:
        query = query.where(ProjectRow.name == project)
    statuses = [status] if isinstance(status, str) else list(status or ())
    if len(statuses) == 1:
        query = query.where(JobRow.status == statuses[0])
    elif statuses:
        query = query.where(JobRow.status.in_(statuses))
    if waiting:  # they wait, or run short of their wanted size: the scheduler says why
        query = query.where(JobRow.status.in_(list(ACTIVE)), JobRow.pending_reason.is_not(None))
    return query


def count_jobs(
    session: Session,
    *,
    project: str | None = None,
    status: str | Sequence[str] | None = None,
    waiting: bool = False,
) -> int:
    """How many jobs ``job_views`` lists with these filters and no page."""
    query = select(func.count(JobRow.id))  # no join: the project's id, when given, from its name
    if project is not None:
        query = query.where(
            JobRow.project_id == select(ProjectRow.id).where(ProjectRow.name == project).scalar_subquery()
        )
    return int(session.scalar(_job_filter(query, None, status, waiting)) or 0)


# How a listing is ordered: "project" (by project name, then age), "line" (by place in line, R13, then the
# jobs without one, each by age). The last key is the job's id, so a key names one row: a page starts after
# the key of the previous page's last row (keyset paging: no row is skipped or repeated however the rows
# before it change, and a page costs the same wherever it starts).
JOB_ORDERS = ("project", "line")
LAST_IN_LINE = 2**31 - 1
PageKey = tuple[str | int | float, ...]


def _order_key(order: str) -> tuple[Any, ...]:
    if order == "line":
        return (func.coalesce(JobRow.queue_position, LAST_IN_LINE), JobRow.created_at, JobRow.id)
    return (ProjectRow.name, JobRow.created_at, JobRow.id)


def job_views(
    session: Session,
    *,
    project: str | None = None,
    status: str | Sequence[str] | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[JobView]:
    """Jobs (all, or of a project, or in a status) ordered by project, age, at most ``limit`` of them from
    ``offset`` on; two queries, no ORM objects."""
    return job_page(session, project=project, status=status, limit=limit, offset=offset)[0]


def job_page(
    session: Session,
    *,
    project: str | None = None,
    status: str | Sequence[str] | None = None,
    waiting: bool = False,
    order: str = "project",
    after: PageKey | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> tuple[list[JobView], list[PageKey]]:
    """Jobs that pass the filters (a project; a status, or any of several; ``waiting``: active with a
    reason) in ``order``, those after the key ``after`` (else from ``offset`` on), at most ``limit``; and the
    key of each. Two queries, no ORM objects.

    A listing of 1,000 jobs built from ORM objects spent most of its time creating them.
    """
    key = _order_key(order)
    query: Select[Any] = (
        select(*key, JobRow.id, ProjectRow.name, *(getattr(JobRow, c) for c in _JOB_VIEW_COLUMNS))
        .join(ProjectRow, JobRow.project_id == ProjectRow.id)
        .order_by(*key)
    )
    query = _job_filter(query, project, status, waiting)
    if after is not None:
        query = query.where(tuple_(*key) > tuple_(*after))
        if order == "project":  # lets the database start its scan of projects by name at the cursor's
            query = query.where(ProjectRow.name >= after[0])
    if offset:
        query = query.offset(offset)
    if limit is not None:
        query = query.limit(limit)
    rows = session.execute(query).all()
    width = len(key)
    replicas: dict[int, list[ReplicaView]] = defaultdict(list)
    ids = [row[width] for row in rows]
    for chunk in (ids[i : i + 500] for i in range(0, len(ids), 500)):
        wanted = select(ReplicaRow.job_id, *(getattr(ReplicaRow, c) for c in _REPLICA_VIEW_COLUMNS))
        for job_id, *values in session.execute(wanted.where(ReplicaRow.job_id.in_(chunk))):
            replicas[job_id].append(ReplicaView(*values))
    views = [
        JobView(
            project_name=row[width + 1],
            replicas=replicas[row[width]],
            **dict(zip(_JOB_VIEW_COLUMNS, row[width + 2 :], strict=True)),
        )
        for row in rows
    ]
    return views, [tuple(row[:width]) for row in rows]


def add_event(
    session: Session,
    *,
    time: float,
    kind: str,
    project: str,
    job: str,
    replicas: Sequence[int] = (),
    reason: str,
    cause: str | None = None,
    details: dict[str, Any] | None = None,
) -> EventRow:
    event = EventRow(
        time=time,
        kind=kind,
        project=project,
        job=job,
        replicas=list(replicas),
        reason=reason,
        cause=cause,
        details=details,
    )
    session.add(event)
    return event
