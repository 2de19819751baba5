"""Fixtures for the service: real databases (SQLite file, PostgreSQL schema per test) and a real server.

``db_url`` is parametrised over both backends. PostgreSQL is reached at ``TIDE_TEST_POSTGRES_URL``
(default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``); each test gets a fresh schema, dropped
afterwards. When PostgreSQL is unreachable its cases are skipped, unless ``CI`` is set: then they fail
loudly. ``make_service`` starts services (``servicekit.RunningService``) and stops them after the test.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from kubefake import FakeKubeApi
from servicekit import RunningService, kill_leftovers, settings_for

from scheduler.executors.base import Executor


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """A test that runs ``tide serve`` in-process configures the root logger; put it back afterwards so
    that later tests (the CLI's ``--json`` output above all) do not get its log lines."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)


PG_URL = os.environ.get("TIDE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _pg_conninfo() -> str:
    return PG_URL.replace("postgresql+psycopg://", "postgresql://")


def _pg_reachable() -> str | None:
    try:
        with psycopg.connect(_pg_conninfo(), connect_timeout=3):
            return None
    except psycopg.Error as error:
        return str(error)


@pytest.fixture(scope="session")
def pg_available() -> bool:
    problem = _pg_reachable()
    if problem is None:
        return True
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but PostgreSQL at {PG_URL} is unreachable: {problem}")
    return False


@pytest.fixture
def pg_url(pg_available: bool) -> Iterator[str]:
    if not pg_available:
        pytest.skip(f"PostgreSQL at {PG_URL} is unreachable (set CI to make this a failure)")
    schema = f"tide_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(_pg_conninfo(), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+pysqlite:///{tmp_path / 'tide.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def make_service(tmp_path: Path) -> Iterator[Callable[..., RunningService]]:
    started: list[RunningService] = []

    def make(
        db_url: str | None = None, with_executor: Executor | None = None, **overrides: object
    ) -> RunningService:
        service = RunningService(settings_for(tmp_path / "data", db_url, **overrides), with_executor).start()
        started.append(service)
        return service

    yield make
    for service in started:
        service.stop()
    kill_leftovers(tmp_path / "data")


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    """A fake Kubernetes API server (tests/kubefake) with one node of 4 GPUs, ``gpu-0``; a test file that
    needs other nodes defines its own ``api``."""
    fake = FakeKubeApi().start()
    fake.add_node("gpu-0", 4)
    yield fake
    fake.stop()
