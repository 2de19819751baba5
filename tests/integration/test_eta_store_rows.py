"""Start-time forecasts are written as the ORM wrote them, on SQLite and on PostgreSQL.

``eta_store.store`` writes every changed forecast in one statement on PostgreSQL. The ORM's UPDATE a row
(``orm_store`` below, as the store wrote before) is the reference: the same forecasts, some new, some
changed, some gone (a job no longer waiting: None) and some unchanged, written once with each into two
databases; every job's stored text must be the same (a JSON null and an SQL NULL told apart), and the
count of changed rows too.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Text, cast, select, update
from sqlalchemy.orm import Session

from scheduler.engine import eta_store
from scheduler.store.db import Database
from scheduler.store.migrate import upgrade
from scheduler.store.models import JobRow, ProjectRow

JOBS = 12


def orm_store(session: Session, etas: dict[str, dict[str, Any]]) -> int:
    """The reference: the store as it wrote before, through the ORM, one UPDATE a changed row."""
    current = session.execute(
        select(JobRow.id, ProjectRow.name, JobRow.name, JobRow.eta).join(
            ProjectRow, JobRow.project_id == ProjectRow.id
        )
    )
    changed = [
        {"id": job_id, "eta": wanted}
        for job_id, project, name, eta in current
        if (wanted := etas.get(f"{project}/{name}")) != eta
    ]
    if changed:
        session.execute(update(JobRow), changed)
    return len(changed)


def forecast(round_: int, job: int) -> dict[str, Any] | None:
    """Round 0 forecasts the even jobs; round 1 changes some, keeps some, drops some, adds the odd ones."""
    if round_ == 0:
        return {"start": 100.0 + job, "grows": False, "note": f"after {job} jobs"} if job % 2 == 0 else None
    if job % 3 == 0:
        return None  # no longer waiting
    if job % 4 == 2:
        return forecast(0, job)  # unchanged
    return {"start": 200.5 + job, "grows": job % 5 == 0, "note": 'quoted "text" and ünïcode'}


def stored(db: Database) -> list[tuple[Any, ...]]:
    """Each job's name and stored forecast as text (None: SQL NULL)."""
    with db.read() as session:
        query = select(JobRow.name, cast(JobRow.eta, Text)).order_by(JobRow.submitted_at)
        return [tuple(row) for row in session.execute(query)]


def seed(db: Database) -> None:
    """A project with ``JOBS`` pending jobs and no forecast yet (the one before, if any, removed)."""
    with db.write() as session:
        for job in session.scalars(select(JobRow)).all():
            session.delete(job)
        for project in session.scalars(select(ProjectRow)).all():
            session.delete(project)
    with db.write() as session:
        owner = ProjectRow(name="p", deserved_gpus=4, created_at=0.0, fair_share_gpus=0)
        session.add(owner)
        for i in range(JOBS):
            session.add(
                JobRow(
                    project=owner, name=f"j{i}", status="pending", workers=0, min_replicas=1, max_replicas=1,
                    gpus_per_replica=1, command=["train"], env={}, created_at=0.0, submitted_at=float(i),
                    restarts=0, generation=0,
                )
            )  # fmt: skip


def play(db: Database, write: Any) -> tuple[list[int], list[list[tuple[Any, ...]]]]:
    """Two rounds of forecasts written by ``write`` into fresh jobs: the changed counts and the rows."""
    seed(db)
    counts, rows = [], []
    for round_ in (0, 1):
        etas = {f"p/j{i}": e for i in range(JOBS) if (e := forecast(round_, i)) is not None}
        with db.write() as session:
            counts.append(write(session, etas))
        rows.append(stored(db))
    return counts, rows


def test_forecasts_are_stored_as_the_orm_stored_them(db_url: str) -> None:
    db = Database(db_url)
    upgrade(db)
    try:
        counts, rows = play(db, eta_store.store)
        expected_counts, expected_rows = play(db, orm_store)
    finally:
        db.dispose()
    assert counts == expected_counts == [6, 8]
    assert rows == expected_rows
    assert {text is None for _, text in rows[1]} == {True, False}  # some forecasts gone, some kept
