"""On PostgreSQL a submit is one statement that reads its project, inserts the job and signals it, committed
on its own: it must store the very row the session path stores, signal exactly what that path signals (to
other processes with the commit, to this one's subscribers after it), and write and signal nothing when the
name is taken or the project unknown. Real PostgreSQL; the service's own submits go this way (the races
in test_submit_races.py and every PostgreSQL service test exercise it through the REST API).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest
from servicekit import RunningService
from sqlalchemy import JSON, Text, cast, select
from sqlalchemy.exc import IntegrityError, OperationalError

from api.client.rest import TideAPIError
from api.server.schemas import JobCreate
from api.server.services.jobs import new_job
from api.server.submits import SubmitBatcher
from scheduler.store import submit
from scheduler.store.changes import Changes, job_signal_prefix
from scheduler.store.db import Database
from scheduler.store.live import _Listener
from scheduler.store.migrate import upgrade
from scheduler.store.models import JobRow, ProjectRow

pytestmark = pytest.mark.postgres

BODIES: list[dict[str, Any]] = [
    {"name": "plain", "workers": 1, "command": ["train"]},
    {
        "name": "everything",
        "workers": 3,
        "min_replicas": 2,
        "max_replicas": 8,
        "gpus_per_replica": 2,
        "allowed_replicas": [2, 4, 8],
        "topology": "required",
        "image": "registry/train:1",
        "command": ["torchrun", "train.py"],
        "env": {"SEED": "1"},
        "priority": 7,
        "grace_period": 45.5,
        "expected_duration": 3600,
    },
    {"name": "fraction", "workers": 0, "gpu_fraction": 0.5, "interactive": True, "command": ["serve"]},
]


@pytest.fixture
def db(pg_url: str) -> Iterator[Database]:
    database = Database(pg_url)
    upgrade(database)
    with database.write() as session:
        session.add(ProjectRow(name="a", deserved_gpus=4, created_at=1.0))
    yield database
    database.dispose()


def _columns(db: Database, job_id: int) -> dict[str, Any]:
    """The row's columns but its id and name, JSON ones as their stored text (a JSON null as None: the session
    stores a job's missing pod template as one, the statement as SQL NULL; both read as None)."""
    table = JobRow.__table__
    kept = [c for c in table.columns if c.key not in ("id", "name")]
    query = select(*(cast(c, Text) if isinstance(c.type, JSON) else c for c in kept)).where(
        table.c.id == job_id
    )
    with db.read() as session:
        row = session.execute(query).one()
    return {c.key: None if value == "null" else value for c, value in zip(kept, row, strict=True)}


@pytest.mark.parametrize("body", BODIES, ids=[b["name"] for b in BODIES])
def test_the_row_is_the_one_the_session_path_stores(db: Database, body: dict[str, Any]) -> None:
    parsed = JobCreate.model_validate(body)
    with db.insert() as session:
        owner = session.scalars(select(ProjectRow.id).where(ProjectRow.name == "a")).one()
        by_session = new_job(owner, parsed, 100.0)
        by_session.pending_reason = "does not fit"
        session.add(by_session)
        session.flush()
        session_id = by_session.id
    one = new_job(0, parsed.model_copy(update={"name": f"{parsed.name}-2"}), 100.0)
    one.pending_reason = "does not fit"
    one_id = submit.insert_job(db, "a", submit.values_of(one))
    assert one_id is not None and one_id != session_id
    assert _columns(db, one_id) == _columns(db, session_id)


def test_other_processes_hear_it_with_the_commit_and_this_one_after(db: Database, pg_url: str) -> None:
    other = Database(pg_url)  # another process's database: a writer of another name
    listener = _Listener(other)
    told: list[Changes] = []
    db.subscribe(told.append)
    try:
        job_id = submit.insert_job(
            db, "a", submit.values_of(new_job(0, JobCreate.model_validate(BODIES[0]), 1.0))
        )
        assert job_id is not None
        assert told == [Changes(jobs={job_id})]
        assert listener.poll() == Changes(jobs={job_id})
    finally:
        listener.close()
        other.dispose()


def test_a_taken_name_or_an_unknown_project_writes_and_signals_nothing(db: Database, pg_url: str) -> None:
    other = Database(pg_url)
    listener = _Listener(other)
    told: list[Changes] = []
    values = submit.values_of(new_job(0, JobCreate.model_validate(BODIES[0]), 1.0))
    try:
        assert submit.insert_job(db, "a", values) is not None
        listener.poll()
        db.subscribe(told.append)
        with pytest.raises(IntegrityError):
            submit.insert_job(db, "a", values)
        assert submit.insert_job(db, "nobody", values) is None
        assert told == [] and listener.poll() == Changes()
        with db.read() as session:
            assert len(session.scalars(select(JobRow)).all()) == 1
    finally:
        listener.close()
        other.dispose()


def test_the_signal_is_the_one_a_session_sends_for_the_job() -> None:
    assert Changes(jobs={42}).encode("w1") == job_signal_prefix("w1") + "42"


def test_columns_a_submit_does_not_give_are_refused(db: Database) -> None:
    with pytest.raises(ValueError, match="project_id"):
        submit.insert_job(db, "a", {"name": "x", "project_id": 1})


def test_the_service_submits_in_one_statement_where_it_may(
    pg_url: str, make_service: Callable[..., RunningService], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain jobs from a writer go through the one statement; a pod template, another project's token and an
    unknown project go the session path and get its answers; every job lands once."""
    inserted: list[str] = []
    real = submit.insert_jobs

    def counted(db: Database, rows: Sequence[tuple[str, Mapping[str, Any]]]) -> list[int | None]:
        inserted.extend(values["name"] for _, values in rows)
        return real(db, rows)

    monkeypatch.setattr(submit, "insert_jobs", counted)
    service = make_service(pg_url)
    admin = service.client()
    admin.create_project({"name": "a", "deserved_gpus": 2})
    admin.create_project({"name": "b", "deserved_gpus": 2})
    admin.submit("a", {"name": "plain", "workers": 1, "command": ["train"]})
    templated = {"name": "templated", "workers": 0, "command": ["train"], "pod_template": {"metadata": {}}}
    admin.submit("a", templated)
    other = service.client(admin.create_token("b").token)
    with pytest.raises(TideAPIError) as refused:
        other.submit("a", {"name": "not-yours", "command": ["train"]})
    assert refused.value.status_code == 403
    with pytest.raises(TideAPIError) as unknown:
        admin.submit("nobody", {"name": "lost", "command": ["train"]})
    assert unknown.value.status_code == 404 and "no project named 'nobody'" in str(unknown.value)
    with pytest.raises(TideAPIError) as taken:
        admin.submit("a", {"name": "plain", "command": ["train"]})
    assert taken.value.status_code == 409
    assert inserted == [
        "plain",
        "lost",
        "plain",
    ]  # the unknown project and the taken name: tried, then refused
    assert sorted(j.name for j in admin.jobs()) == ["plain", "templated"]


def _values(name: str, **more: Any) -> dict[str, Any]:
    return submit.values_of(new_job(0, JobCreate.model_validate({**BODIES[0], "name": name, **more}), 1.0))


def _gathered(
    batcher: SubmitBatcher, rows: list[tuple[str, dict[str, Any]]]
) -> list[int | BaseException | None]:
    """The rows submitted at once (all of them wait before the first statement runs)."""

    async def run() -> list[int | BaseException | None]:
        return await asyncio.gather(*(batcher.insert(p, v) for p, v in rows), return_exceptions=True)

    return asyncio.run(run())


def test_submits_that_come_together_share_one_statement_one_signal_and_one_wake(
    db: Database, pg_url: str
) -> None:
    other = Database(pg_url)
    listener = _Listener(other)
    told: list[Changes] = []
    wakes: list[None] = []
    batcher = SubmitBatcher(db, lambda: wakes.append(None))
    db.subscribe(told.append)
    try:
        ids = _gathered(batcher, [("a", _values(f"j{i}")) for i in range(20)])
        assert batcher.statements == 1 and len(wakes) == 1
        assert all(isinstance(i, int) for i in ids) and len(set(ids)) == 20
        assert told == [Changes(jobs=set(ids))]  # type: ignore[arg-type]
        assert listener.poll() == Changes(jobs=set(ids))  # type: ignore[arg-type]
        with db.read() as session:
            stored = dict(session.execute(select(JobRow.name, JobRow.id)).all())
        assert stored == {f"j{i}": job_id for i, job_id in enumerate(ids)}
        assert _columns(db, ids[0]) == _columns(db, ids[1])  # type: ignore[arg-type]
    finally:
        listener.close()
        other.dispose()


def test_a_taken_name_or_an_unknown_project_in_a_batch_costs_only_that_submit(db: Database) -> None:
    """The statement with a name given twice writes none of its rows; each is tried again alone: one of the
    two lands, the other is told its name is taken (None: the locked path answers 409). A project unknown
    is None without failing the statement; rows that give other columns go in a statement of their own."""
    wakes: list[None] = []
    batcher = SubmitBatcher(db, lambda: wakes.append(None))
    rows = [("a", _values(f"j{i}")) for i in range(5)]
    rows += [("a", _values("dup")), ("nobody", _values("lost")), ("a", _values("dup"))]
    rows += [("a", _values("imaged", image="registry/train:1"))]
    ids = _gathered(batcher, rows)
    assert all(isinstance(i, int) for i in ids[:5])
    assert ids[5:8] == [ids[5], None, None] and isinstance(ids[5], int)
    assert isinstance(ids[8], int)
    assert batcher.statements == 1 + 8 + 1  # the failed statement, each of its rows alone, the other columns
    assert len(wakes) == 2
    with db.read() as session:
        names = sorted(session.scalars(select(JobRow.name)))
    assert names == sorted(["dup", "imaged", *(f"j{i}" for i in range(5))])


def test_a_database_that_cannot_be_reached_is_each_submits_error(pg_url: str) -> None:
    gone = Database(pg_url.replace(":5432/", ":1/"))
    batcher = SubmitBatcher(gone, lambda: None)
    try:
        outcomes = _gathered(batcher, [("a", _values(f"j{i}")) for i in range(3)])
    finally:
        gone.dispose()
    assert all(isinstance(o, OperationalError) for o in outcomes)
