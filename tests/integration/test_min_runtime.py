"""Minimum runtime (R15) through the service: set on projects and departments by REST and the CLI, stored,
mapped into the core with each job's last start or resize, and told in waiting reasons and events.

Story: on one 8-GPU node, teams a and b deserve 1 GPU each; a's jobs run at least 10 minutes once started.
a borrows all 8 GPUs. b comes back with two jobs: its guaranteed GPU comes at once (R2 overrides the
minimum runtime, and the event says so); its second job waits, told until when, and starts once a's
job has run 10 minutes since that shrink (a resize starts the minimum runtime again).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from test_cli_commands import cli_bridge, tide

from scheduler.core import Config, Node, minruntime
from scheduler.engine.loop import Engine, EngineSettings
from scheduler.executors.fake import FakeExecutor
from scheduler.store.db import Database
from scheduler.store.migrate import upgrade
from scheduler.store.models import EventRow, JobRow, ProjectRow

TEN_MINUTES = 600.0
START = 1_800_000_000.0


class Loop:
    """The engine on a real database with a fake executor and a clock the test moves."""

    def __init__(self, db: Database) -> None:
        self.db, self.clock = db, START
        settings = EngineSettings(grace_period=1, core=Config(settle_seconds=0), check_invariants=True)
        self.engine = Engine(db, FakeExecutor((Node("node-0", 8),)), settings, clock=lambda: self.clock)

    def cycle(self, after: float = 0.1) -> None:
        self.clock += after
        self.engine.tick()
        assert self.engine.violations == []

    def submit(self, project: str, name: str, low: int, high: int) -> None:
        with self.db.write() as session:
            owner = session.scalars(select(ProjectRow).where(ProjectRow.name == project)).one()
            session.add(
                JobRow(
                    project=owner, name=name, status="pending", workers=high - 1, min_replicas=low,
                    max_replicas=high, gpus_per_replica=1, command=["sleep", "1"], env={},
                    created_at=self.clock, submitted_at=self.clock, restarts=0, generation=0,
                )
            )  # fmt: skip

    def job(self, name: str) -> JobRow:
        with self.db.read() as session:
            return session.scalars(select(JobRow).where(JobRow.name == name)).one()

    def events(self, job: str) -> list[EventRow]:
        with self.db.read() as session:
            return list(session.scalars(select(EventRow).where(EventRow.job == job).order_by(EventRow.id)))


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    upgrade(database)
    with database.write() as session:
        session.add(
            ProjectRow(name="a", deserved_gpus=1, created_at=0.0, fair_share_gpus=0, min_runtime_seconds=600)
        )
        session.add(ProjectRow(name="b", deserved_gpus=1, created_at=1.0, fair_share_gpus=0))
    yield database
    database.dispose()


def test_a_borrowers_young_job_yields_only_to_the_guarantee_until_its_minimum_runtime_is_over(
    db: Database,
) -> None:
    loop = Loop(db)
    loop.submit("a", "sweep", 1, 8)
    loop.cycle()
    loop.cycle()
    assert loop.job("sweep").status == "running" and loop.job("sweep").last_resized_at is not None
    loop.submit("b", "first", 1, 1)
    loop.submit("b", "second", 3, 3)
    for _ in range(4):
        loop.cycle()
    assert loop.job("first").status == "running"  # its guarantee: a's minimum runtime overridden
    shrink = [e for e in loop.events("sweep") if e.cause == "reclaim"]
    assert shrink and "minimum runtime overridden: project b is below its guarantee" in shrink[0].reason
    second = loop.job("second")
    assert second.status == "pending"
    resized = loop.job("sweep").last_resized_at  # its shrink was a resize: the 10 minutes start again
    assert resized is not None and resized > START
    until = minruntime.clock(resized + TEN_MINUTES)
    assert f"jobs of project a are protected by their minimum runtime until {until}" in (
        second.pending_reason or ""
    )
    loop.cycle(after=TEN_MINUTES)  # a's job has run 10 minutes since its last resize
    for _ in range(4):
        loop.cycle()
    assert loop.job("second").status == "running"
    loop.engine.close()


def test_projects_and_departments_take_a_minimum_runtime_by_rest_and_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cli_bridge(tmp_path, monkeypatch) as bridge:
        out = tide("department", "create", "research", "--deserved", "4", "--min-runtime", "10m")
        assert out.exit_code == 0 and "minimum runtime 10m" in out.output, out.output
        assert tide("project", "create", "inherits", "-q", "1", "-d", "research").exit_code == 0
        out = tide("project", "create", "own", "-q", "1", "-d", "research", "--min-runtime", "30s")
        assert out.exit_code == 0 and "minimum runtime 30s" in out.output, out.output
        assert tide("project", "create", "plain", "-q", "1").exit_code == 0

        listing = tide("project", "list").output
        assert "MIN RUN" in listing
        rows = {line.split()[0]: line.split() for line in listing.splitlines() if line.strip()}
        assert (rows["inherits"][-2], rows["own"][-2], rows["plain"][-2]) == ("10m", "30s", "-")

        out = tide("project", "update", "own", "--min-runtime", "1h")
        assert out.exit_code == 0 and "minimum runtime 1h" in out.output, out.output
        out = tide("project", "update", "own", "--min-runtime", "inherit")
        assert out.exit_code == 0 and "minimum runtime 10m" in out.output, out.output
        out = tide("department", "update", "research", "--min-runtime", "off")
        assert out.exit_code == 0 and "minimum runtime" not in out.output, out.output
        assert "MIN RUN" not in tide("project", "list").output  # nobody has one now

        bad = tide("project", "update", "own", "--min-runtime", "soon")
        assert bad.exit_code == 2 and "not a duration" in bad.output

        with httpx.Client(transport=bridge, base_url="http://tide") as http:
            headers = {"Authorization": "Bearer test-admin-token"}
            made = http.post(
                "/api/v1/projects",
                json={"name": "rest", "deserved_gpus": 1, "min_runtime_seconds": 90},
                headers=headers,
            )
            assert made.status_code == 201, made.text
            body = made.json()
            assert (body["min_runtime_seconds"], body["effective_min_runtime_seconds"]) == (90.0, 90.0)
            negative = http.patch("/api/v1/projects/rest", json={"min_runtime_seconds": -1}, headers=headers)
            assert negative.status_code == 422
            cleared = http.patch("/api/v1/projects/rest", json={"min_runtime_seconds": None}, headers=headers)
            assert cleared.json()["effective_min_runtime_seconds"] == 0.0
            dept = http.patch(
                "/api/v1/departments/research", json={"min_runtime_seconds": 120}, headers=headers
            )
            assert dept.json()["min_runtime_seconds"] == 120.0
            assert (
                http.get("/api/v1/projects/inherits", headers=headers).json()["effective_min_runtime_seconds"]
                == 120.0
            )
            negative = http.post(
                "/api/v1/departments",
                json={"name": "x", "deserved_gpus": 0, "min_runtime_seconds": -5},
                headers=headers,
            )
            assert negative.status_code == 422
