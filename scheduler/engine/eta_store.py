"""Start-time forecasts of the live service: inputs read from the store, results written back.

Contract:
- ``history(session, now=...)``: an ``Estimator`` fed with the run times (first start to end) of the jobs that
  finished in the last ``HISTORY_DAYS`` days, at most ``HISTORY_JOBS`` of them, newest kept; cancelled jobs
  are left out.
- ``gather(session, state, config, now=...)``: the ``EtaTask`` for the cycle's snapshot: each active job's
  time left from its declared ``expected_duration`` and first start, else from that history.
- ``store(session, etas)``: write ``jobs.eta``, only the rows that changed; an active job the forecast did not
  answer for (no longer waiting) gets ``None``. On PostgreSQL the changed rows go in one statement (ids and
  forecasts as two arrays; tens of thousands of waiting jobs' forecasts change at each forecast), elsewhere
  one UPDATE a row.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select, text, update
from sqlalchemy.orm import Session

from scheduler.core.estimate import Estimate, Estimator, Finished
from scheduler.core.forecast import Horizon
from scheduler.core.model import ClusterState, Config
from scheduler.engine.eta import EtaTask, Key
from scheduler.statuses import ACTIVE, JobStatus
from scheduler.store.changes import accounted
from scheduler.store.models import JobRow, ProjectRow

HISTORY_DAYS = 14.0
HISTORY_JOBS = 5000
RAN = (
    JobStatus.SUCCEEDED,
    JobStatus.FAILED,
)  # a cancelled job's run time says nothing about how long such jobs run


def history(session: Session, *, now: float) -> Estimator:
    """An ``Estimator`` fed with the run times of the jobs finished recently, oldest first."""
    query = (
        select(
            ProjectRow.name,
            JobRow.gpus_per_replica,
            JobRow.min_replicas,
            JobRow.max_replicas,
            JobRow.started_at,
            JobRow.finished_at,
        )
        .join(ProjectRow, JobRow.project_id == ProjectRow.id)
        .where(JobRow.finished_at >= now - HISTORY_DAYS * 86400.0)
        .where(JobRow.status.in_(RAN), JobRow.started_at.is_not(None))
        .order_by(JobRow.finished_at.desc())
        .limit(HISTORY_JOBS)
    )
    rows = session.execute(query).all()
    estimator = Estimator()
    for project, gpr, low, high, started, finished in reversed(rows):
        seconds = float(finished or 0.0) - float(started or 0.0)  # both set: see the query
        estimator.add(Finished(project, (gpr, low, high), max(0.0, seconds)))
    return estimator


def gather(
    session: Session, state: ClusterState, config: Config, *, now: float, horizon: Horizon | None = None
) -> EtaTask:
    """The forecast's inputs for ``state`` (the cycle's snapshot) at ``now``."""
    estimator = history(session, now=now)
    query = (
        select(ProjectRow.name, JobRow.name, JobRow.started_at, JobRow.expected_duration)
        .join(ProjectRow, JobRow.project_id == ProjectRow.id)
        .where(JobRow.status.in_(ACTIVE))
    )
    own = {(p, n): (started, declared) for p, n, started, declared in session.execute(query)}
    left: dict[Key, Estimate] = {}
    for job in state.jobs:
        started, declared = own.get(job.key, (None, None))
        elapsed = max(0.0, now - started) if started is not None else 0.0
        left[job.key] = estimator.remaining(job, elapsed, declared)
    return EtaTask(state, config, now, left, horizon or Horizon())


def store(session: Session, etas: dict[str, dict[str, Any]]) -> int:
    """Write each active job's ETA (None where it has none); returns how many rows changed."""
    current = session.execute(
        select(JobRow.id, ProjectRow.name, JobRow.name, JobRow.eta)
        .join(ProjectRow, JobRow.project_id == ProjectRow.id)
        .where(JobRow.status.in_(ACTIVE))
    )
    changed = [
        (job_id, wanted)
        for job_id, project, name, eta in current
        if (wanted := etas.get(f"{project}/{name}")) != eta
    ]
    if not changed:
        return 0
    with accounted(session):  # forecasts: nothing the scheduling snapshot reads
        connection = session.connection()
        if connection.dialect.name == "postgresql":
            ids = [job_id for job_id, _ in changed]
            forecasts = json.dumps([eta for _, eta in changed])
            connection.execute(_ETA_UPDATE_ARRAYS, {"ids": ids, "etas": forecasts})
        else:
            session.execute(update(JobRow), [{"id": job_id, "eta": eta} for job_id, eta in changed])
    return len(changed)


# PostgreSQL: every changed forecast in one statement (40,960 waiting jobs' forecasts took seconds as one
# UPDATE a row); a job without one gets a JSON null, as the ORM's JSON column writes None
_ETA_UPDATE_ARRAYS = text(
    f"UPDATE {JobRow.__tablename__} SET eta = v.eta "
    "FROM ROWS FROM (unnest(CAST(:ids AS integer[])), json_array_elements(CAST(:etas AS json))) "
    f"AS v(id, eta) WHERE {JobRow.__tablename__}.id = v.id"
)
