"""The plan's write path writes the same rows as the one it replaced, on SQLite and on PostgreSQL.

``persist_plan`` writes the starts and grows without the ORM, each table in one statement. The previous
write path, every decision through the ORM (``previous_persist`` below, kept as it was), is the reference:
the same scripted run (a fill, grows, reclaims that shrink and evict with a preemption notice, starts in the
same plans, fractional GPUs, jobs ending and new ones submitted, a job cancelled between the snapshot and
the write) is played once with each, and every row of the tables the plan writes must be the same, ids
and JSON texts included (a JSON null and an SQL NULL are told apart).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import JSON, Text, cast, event, select
from sqlalchemy.orm import Session

from scheduler.core import Config, Node
from scheduler.core.cycle import plan_cycle
from scheduler.core.plan import Action, Decision, Plan
from scheduler.engine import loop, persist
from scheduler.engine.loop import Engine, EngineSettings
from scheduler.engine.reconcile import record_observations
from scheduler.executors.fake import FakeExecutor
from scheduler.statuses import ACTIVE
from scheduler.store import lifecycle
from scheduler.store.db import Database
from scheduler.store.mapper import Notes, load_snapshot
from scheduler.store.migrate import upgrade
from scheduler.store.models import DepartmentRow, EventRow, JobRow, ProjectRow, ReplicaRow
from scheduler.store.queries import active_jobs, job_by_name

NODES = tuple(Node(f"node-{i}", 8) for i in range(4))
TABLES = (JobRow, ReplicaRow, EventRow, ProjectRow, DepartmentRow)
Persist = Callable[..., list[Decision]]


def previous_persist(
    session: Session,
    plan: Plan,
    *,
    now: float,
    usage_half_life: float = 0.0,
    notes: Notes,
    over_quota: dict[str, int] | None = None,
    reaches: Callable[[JobRow], bool] | None = None,
    grace_period: float = 30.0,
) -> list[Decision]:
    """``persist_plan`` as it was: every decided job loaded through the ORM, each decision its transition."""
    applied: list[Decision] = []
    jobs = active_jobs(session, ((d.project, d.job) for d in plan.decisions))
    for decision in plan.decisions:
        job = jobs.get((decision.project, decision.job))
        if job is None or job.status not in ACTIVE:
            continue
        persist._apply(session, job, decision, now=now, reaches=reaches, grace_period=grace_period)
        applied.append(decision)
    persist._write_notes(session, plan, notes, decided=True)
    persist._write_notes(session, plan, notes, decided=False)
    persist._write_shares(session, plan)
    assert usage_half_life == 0.0
    return applied


class Run:
    """A cluster of 4 x 8 GPUs driven cycle by cycle with a fixed clock, its plans written by ``write``."""

    def __init__(self, url: str, write: Persist, monkeypatch: pytest.MonkeyPatch) -> None:
        if write is not persist.persist_plan:  # the loop's own path is persist_plan's two halves
            monkeypatch.setattr(loop, "persist_decisions", write)
            monkeypatch.setattr(loop, "persist_notes", lambda *args, **kwargs: None)  # all written above
        self.write = write
        self.db = Database(url)
        upgrade(self.db)
        self.executor = FakeExecutor(NODES, stop_delay=1)
        self.clock = 1000.0
        settings = EngineSettings(grace_period=5, core=Config(settle_seconds=0), check_invariants=True)
        self.engine = Engine(self.db, self.executor, settings, clock=lambda: self.clock)
        self.kinds: list[str] = []

    def project(self, name: str, deserved: int, notice: int | None = None) -> None:
        with self.db.write() as session:
            session.add(
                ProjectRow(
                    name=name,
                    deserved_gpus=deserved,
                    created_at=0.0,
                    fair_share_gpus=0,
                    preemption_notice_seconds=notice,
                )
            )

    def submit(
        self, project: str, name: str, low: int, high: int, *, gpus: int = 1, fraction: str | None = None
    ) -> None:
        self.clock += 1
        with self.db.write() as session:
            owner = session.scalars(select(ProjectRow).where(ProjectRow.name == project)).one()
            session.add(
                JobRow(
                    project=owner, name=name, status="pending", workers=high - 1, min_replicas=low,
                    max_replicas=high, gpus_per_replica=gpus, command=["train"], env={},
                    created_at=self.clock, submitted_at=self.clock, restarts=0, generation=0,
                    gpu_fraction=fraction,
                )
            )  # fmt: skip

    def cycle(self, times: int = 1) -> None:
        for _ in range(times):
            self.clock += 0.5
            plan = self.engine.tick()
            assert plan is not None
            self.kinds += [d.action.value for d in plan.decisions]
        assert self.executor.refused == [] and self.engine.violations == []

    def finish(self, project: str, job: str) -> None:
        """Every running replica of the job exits 0 (the job succeeds at the next cycle)."""
        for record in list(self.executor.records.values()):
            spec = record.spec
            if (spec.project, spec.job) == (project, job) and record.observation.running:
                self.executor.finish(project, job, spec.index, 0)

    def plan_then_cancel(self, project: str, job: str) -> Plan:
        """Record what the executor saw, plan on a snapshot, cancel ``job`` (which the plan starts), then
        write the plan."""
        self.clock += 0.5
        with self.db.write() as session:
            seen = self.executor.observe()
            record_observations(session, self.executor, seen, now=self.clock, knobs=self.engine.knobs)
        with self.db.read() as session:
            snapshot = load_snapshot(session)
        plan = plan_cycle(snapshot.state, Config(settle_seconds=0), now=self.clock)
        assert (project, job) in {(d.project, d.job) for d in plan.decisions}
        with self.db.write() as session:
            row = job_by_name(session, project, job)
            assert row is not None
            lifecycle.cancel_job(session, row, now=self.clock, reason="deleted")
        with self.db.write() as session:
            applied = self.write(session, plan, now=self.clock, notes=snapshot.notes)
        assert (project, job) not in {(d.project, d.job) for d in applied}
        return plan

    def rows(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of the tables a plan writes, by id; JSON columns as their stored text."""
        found: dict[str, list[tuple[Any, ...]]] = {}
        with self.db.read() as session:
            for model in TABLES:
                table = model.__table__
                columns = [cast(c, Text) if isinstance(c.type, JSON) else c for c in table.columns]
                query = select(*columns).order_by(*table.primary_key.columns)
                found[table.name] = [tuple(row) for row in session.execute(query)]
        return found

    @contextmanager
    def sent(self) -> Iterator[list[str]]:
        """The SQL text of every statement sent meanwhile."""
        sent: list[str] = []

        def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            sent.append(statement)

        event.listen(self.db.write_engine, "before_cursor_execute", record)
        try:
            yield sent
        finally:
            event.remove(self.db.write_engine, "before_cursor_execute", record)

    def close(self) -> None:
        self.engine.close()
        self.db.dispose()


def script(run: Run) -> dict[str, list[tuple[Any, ...]]]:
    """A run that starts, grows, shrinks and evicts (the plan's every action), its rows at the end."""
    run.project("a", 8)
    run.project("b", 8, notice=1)
    run.project("c", 16)
    run.cycle()
    for i in range(6):  # a fill: more than fits, elastic and rigid, some several GPUs a replica
        run.submit("a", f"a{i}", 1, 4, gpus=1 + i % 2)
        run.submit("b", f"b{i}", 1, 3)
    run.submit("a", "frac", 1, 1, gpus=1, fraction="1/2")
    run.submit("b", "frac", 1, 1, gpus=1, fraction="1/2")
    run.submit("b", "rigid", 2, 2)  # can only be evicted
    run.cycle(2)
    run.finish("a", "a0")  # jobs end: their GPUs go to the waiting ones, or grow the running ones
    run.finish("b", "b1")
    run.cycle(3)
    run.submit("c", "big", 2, 2, gpus=4)  # owed 16 GPUs: reclaims from a and b (b's with a notice)
    run.submit("c", "small", 1, 2, gpus=2)
    run.cycle(5)
    run.submit("c", "late", 1, 1)
    run.finish("c", "big")
    run.plan_then_cancel("c", "late")  # deleted after the snapshot: its start is skipped
    run.cycle(4)
    return run.rows()


@pytest.mark.parametrize("write", ["previous", "current"])
def test_the_scripted_run_uses_every_action(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    """The script below writes starts, grows, shrinks and evictions through each write path."""
    run = Run(
        f"sqlite+pysqlite:///{tmp_path / 'tide.db'}",
        previous_persist if write == "previous" else persist.persist_plan,
        monkeypatch,
    )
    try:
        script(run)
    finally:
        run.close()
    assert {a.value for a in Action} <= set(run.kinds)


def empty(db: Database) -> None:
    """Delete every row the run wrote and restart the ids: the next run starts as the first did."""
    with db.write_engine.begin() as connection:
        for model in (EventRow, ReplicaRow, JobRow, ProjectRow, DepartmentRow):
            connection.execute(model.__table__.delete())
        if db.is_sqlite:
            if connection.exec_driver_sql("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'").all():
                connection.exec_driver_sql("DELETE FROM sqlite_sequence")
        else:
            for model in (JobRow, ReplicaRow, EventRow, ProjectRow, DepartmentRow):
                connection.exec_driver_sql(f"ALTER SEQUENCE {model.__tablename__}_id_seq RESTART WITH 1")


def test_a_plan_is_written_as_the_orm_wrote_it(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tables: list[dict[str, list[tuple[Any, ...]]]] = []
    for write in (previous_persist, persist.persist_plan):
        run = Run(db_url, write, monkeypatch)
        try:
            tables.append(script(run))
            empty(run.db)
        finally:
            run.close()
    before, after = tables
    assert len(before["events"]) > 30 and len(before["replicas"]) > 20
    for name in before:
        assert after[name] == before[name], name


def statements_of_a_fill(url: str, jobs: int, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The writes sent while writing a plan that starts ``jobs`` jobs of 1-2 replicas (their SQL texts)."""
    run = Run(url, persist.persist_plan, monkeypatch)
    try:
        run.project("a", 32)
        run.cycle()  # the nodes recorded
        for i in range(jobs):
            run.submit("a", f"j{i}", 1 + i % 2, 1 + i % 2)
        with run.db.read() as session:
            snapshot = load_snapshot(session)
        plan = plan_cycle(snapshot.state, Config(settle_seconds=0), now=run.clock)
        assert sum(d.action is Action.START for d in plan.decisions) == jobs
        with run.db.write() as session, run.sent() as sent:
            run.write(session, plan, now=run.clock, notes=snapshot.notes)
        empty(run.db)
        return [s for s in sent if s.split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE")]
    finally:
        run.close()


def test_a_plan_of_many_starts_is_written_in_as_many_statements_as_one_of_few(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The starts' rows go in one statement per table whose text does not grow with the rows (the ORM's
    many-row INSERTs did, and PostgreSQL's driver spent more time parsing them than the server running them;
    SQLite's read of the decided jobs still names them, 400 a statement)."""
    few = statements_of_a_fill(db_url, 3, monkeypatch)
    many = statements_of_a_fill(db_url, 20, monkeypatch)
    assert any("INSERT INTO replicas" in s for s in few)
    assert many == few


def statements_of_a_launch(url: str, jobs: int, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement sent (its SQL text) by the cycle that starts and launches ``jobs`` one-replica jobs,
    each in a project of a department of its own."""
    run = Run(url, persist.persist_plan, monkeypatch)
    try:
        with run.db.write() as session:
            for p in range(jobs):
                department = DepartmentRow(name=f"d{p}", deserved_gpus=1, created_at=0.0)
                session.add(
                    ProjectRow(
                        name=f"p{p}",
                        deserved_gpus=1,
                        created_at=0.0,
                        fair_share_gpus=0,
                        department=department,
                    )
                )
        run.cycle()  # the nodes recorded
        for i in range(jobs):
            run.submit(f"p{i}", f"j{i}", 1, 1)
        with run.sent() as sent:
            run.cycle()
        assert len(run.executor.records) == jobs  # all launched in that cycle
        empty(run.db)
        return sent
    finally:
        run.close()


def test_launching_many_jobs_of_projects_in_departments_takes_as_many_statements_as_few(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A launch reads its job's department (its pod defaults): read with the launches' jobs, not in a lazy
    load per department, each of which also wrote the launches before it (a session flushes first)."""
    few = statements_of_a_launch(db_url, 3, monkeypatch)
    many = statements_of_a_launch(db_url, 20, monkeypatch)
    assert sum("FROM departments" in s for s in many) == sum("FROM departments" in s for s in few)
    assert len(many) == len(few)
