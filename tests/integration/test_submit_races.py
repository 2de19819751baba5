"""A submit inserts its job without waiting for the database's write lock; what it can race is decided by
the database's constraints and then under the lock, never a 500 and never a lost or doubled job.

Races are made to happen at the worst moment: between the submit's checks (a read) and its insert, another
writer takes the name or deletes the project. And a project delete that arrives while a submit's insert is
open waits for it, then sees the job: 409, the job stays (SQLite and PostgreSQL).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from servicekit import RunningService
from sqlalchemy import func, select

from api.client.rest import TideAPIError
from api.server.schemas import JobCreate
from api.server.services import jobs as job_service
from api.server.services.jobs import new_job
from scheduler.store import submit
from scheduler.store.models import JobRow, ProjectRow

BODY = {"name": "train", "workers": 1, "command": ["sleep", "60"]}


def _between_checks_and_insert(monkeypatch: pytest.MonkeyPatch, action: Callable[[], None]) -> None:
    """Run ``action`` once, after the submit's checks read and before it inserts: after the fit check (SQLite,
    and the session path), or in the worker thread about to run the statement that PostgreSQL's submits
    share (``scheduler.store.submit.insert_jobs``), whichever comes first."""
    checked = job_service._fit_warning
    inserts = submit.insert_jobs
    done: list[bool] = []

    def act() -> None:
        if not done:
            done.append(True)
            action()

    def check_then_act(*args: object) -> str | None:
        warning = checked(*args)  # type: ignore[arg-type]
        act()
        return warning

    def act_then_insert(*args: Any) -> list[int | None]:
        act()
        return inserts(*args)

    monkeypatch.setattr(job_service, "_fit_warning", check_then_act)
    monkeypatch.setattr(submit, "insert_jobs", act_then_insert)


def _jobs_named(service: RunningService, name: str) -> int:
    with service.services.db.read() as session:
        return session.scalar(select(func.count()).select_from(JobRow).where(JobRow.name == name)) or 0


def test_a_name_taken_meanwhile_is_a_409_and_one_job(
    db_url: str, make_service: Callable[..., RunningService], monkeypatch: pytest.MonkeyPatch
) -> None:
    service = make_service(db_url)
    client = service.client()
    client.create_project({"name": "a", "deserved_gpus": 2})

    def other_submit() -> None:
        with service.services.db.write() as session:
            owner = session.scalars(select(ProjectRow.id).where(ProjectRow.name == "a")).one()
            session.add(new_job(owner, JobCreate.model_validate(BODY), time.time()))

    _between_checks_and_insert(monkeypatch, other_submit)
    with pytest.raises(TideAPIError) as refused:
        client.submit("a", BODY)
    assert refused.value.status_code == 409 and "already exists" in str(refused.value)
    assert _jobs_named(service, "train") == 1


def test_a_project_deleted_meanwhile_is_a_404_and_no_job(
    db_url: str, make_service: Callable[..., RunningService], monkeypatch: pytest.MonkeyPatch
) -> None:
    service = make_service(db_url)
    client = service.client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    _between_checks_and_insert(monkeypatch, lambda: client.delete_project("a"))
    with pytest.raises(TideAPIError) as refused:
        client.submit("a", BODY)
    assert refused.value.status_code == 404 and "no project named 'a'" in str(refused.value)
    assert _jobs_named(service, "train") == 0


def test_a_project_delete_waits_for_a_submit_in_flight_and_keeps_its_job(
    db_url: str, make_service: Callable[..., RunningService]
) -> None:
    service = make_service(db_url)
    client = service.client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    answers: list[int] = []

    def delete() -> None:
        try:
            client.delete_project("a")
            answers.append(204)
        except TideAPIError as error:
            answers.append(error.status_code)

    deleter = threading.Thread(target=delete)
    with service.services.db.insert() as session:  # a submit's insert, held open
        owner = session.scalars(select(ProjectRow.id).where(ProjectRow.name == "a")).one()
        session.add(new_job(owner, JobCreate.model_validate(BODY), time.time()))
        session.flush()
        deleter.start()
        time.sleep(0.5)
        assert answers == []  # the delete waits for the insert's commit
    deleter.join(timeout=30)
    assert answers == [409]
    assert [j.name for j in client.jobs()] == ["train"]
