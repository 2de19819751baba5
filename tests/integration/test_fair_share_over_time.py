"""Fair share over time through the service: usage above quota is accrued by the live loop, persisted (it
survives a restart of the engine), used for the shares, and shown by the API, the CLI and /metrics.

Story: on one 8-GPU node, teams a and b deserve 1 GPU each. a borrows all 8 GPUs for an hour while b is
away (usage half-life: one hour). The engine restarts. When b comes back and both want every GPU, b gets
the larger part of the idle GPUs; without a half-life they would get 4 each.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from servicekit import RunningService, wait_for
from sqlalchemy import select
from test_metrics import gauge
from typer.testing import CliRunner

from api.client.cli.main import app as cli_app
from scheduler.core import Config, Node
from scheduler.engine.loop import Engine, EngineSettings
from scheduler.executors.fake import FakeExecutor
from scheduler.store.db import Database
from scheduler.store.migrate import upgrade
from scheduler.store.models import JobRow, ProjectRow

HOUR = 3600.0
NODES = (Node("node-0", 8),)


class Loop:
    """The engine on a real database with a fake executor and a clock the test moves."""

    def __init__(self, db: Database, executor: FakeExecutor, half_life: float) -> None:
        self.db, self.executor, self.clock = db, executor, 1000.0
        core = Config(settle_seconds=0, usage_half_life=half_life)
        settings = EngineSettings(grace_period=1, core=core, check_invariants=True)
        self.engine = Engine(db, executor, settings, clock=lambda: self.clock)

    def cycle(self, after: float = 0.1) -> None:
        self.clock += after
        self.engine.tick()
        assert self.engine.violations == []

    def submit(self, project: str, name: str) -> None:
        with self.db.write() as session:
            owner = session.scalars(select(ProjectRow).where(ProjectRow.name == project)).one()
            session.add(
                JobRow(
                    project=owner, name=name, status="pending", workers=7, min_replicas=1, max_replicas=8,
                    gpus_per_replica=1, command=["sleep", "1"], env={}, created_at=self.clock,
                    submitted_at=self.clock, restarts=0, generation=0,
                )
            )  # fmt: skip

    def project(self, name: str) -> ProjectRow:
        with self.db.read() as session:
            return session.scalars(select(ProjectRow).where(ProjectRow.name == name)).one()


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    upgrade(database)
    with database.write() as session:
        for name in ("a", "b"):
            session.add(ProjectRow(name=name, deserved_gpus=1, created_at=0.0, fair_share_gpus=0))
    yield database
    database.dispose()


def test_usage_is_accrued_persisted_across_a_restart_and_lowers_the_borrowers_share(db: Database) -> None:
    executor = FakeExecutor(NODES)
    first = Loop(db, executor, HOUR)
    first.submit("a", "sweep")
    first.cycle()
    first.cycle()  # a holds all 8 GPUs: 7 above its quota
    first.cycle(after=HOUR)
    a = first.project("a")
    # one half-life at 7 GPUs above quota: 7 x 0.5 x (half-life / ln 2) GPU-seconds
    assert a.usage_gpu_seconds == pytest.approx(7 * 0.5 * HOUR / math.log(2), rel=1e-3)
    assert first.project("b").usage_gpu_seconds == 0.0
    first.engine.close()

    second = Loop(db, executor, HOUR)  # the engine restarts on the same database
    second.clock = first.clock
    assert second.project("a").usage_gpu_seconds == a.usage_gpu_seconds
    second.submit("b", "train")
    second.cycle()
    a, b = second.project("a"), second.project("b")
    assert a.usage_weight is not None and a.usage_weight < 1.0 and b.usage_weight == 1.0
    assert (a.fair_share_gpus, b.fair_share_gpus) == (3, 5)  # 4 and 4 without usage
    second.engine.close()


def test_without_a_half_life_usage_is_neither_accrued_nor_used(db: Database) -> None:
    loop = Loop(db, FakeExecutor(NODES), 0.0)
    loop.submit("a", "sweep")
    loop.cycle()
    loop.cycle(after=HOUR)
    loop.submit("b", "train")
    loop.cycle()
    a, b = loop.project("a"), loop.project("b")
    assert (a.usage_gpu_seconds, a.usage_at, a.usage_weight) == (0.0, None, None)
    assert (a.fair_share_gpus, b.fair_share_gpus) == (4, 4)
    loop.engine.close()


@pytest.fixture
def svc(db_url: str, make_service: Callable[..., RunningService], tmp_path: Path) -> RunningService:
    database = Database(db_url)
    upgrade(database)
    with database.write() as session:  # usage persisted by an earlier run of the service
        for name, used in (("a", 5 * HOUR), ("b", 0.0)):
            session.add(
                ProjectRow(
                    name=name, deserved_gpus=1, created_at=0.0, fair_share_gpus=0, usage_gpu_seconds=used
                )
            )
    database.dispose()
    return make_service(db_url, gpus_per_node=8, usage_half_life=HOUR)


def test_the_api_the_cli_and_metrics_show_usage_and_the_weight_it_left(svc: RunningService) -> None:
    client = svc.client()
    client.submit(
        "a", {"name": "sweep", "workers": 7, "min_replicas": 1, "max_replicas": 8, "command": ["sleep", "60"]}
    )
    client.submit(
        "b", {"name": "train", "workers": 7, "min_replicas": 1, "max_replicas": 8, "command": ["sleep", "60"]}
    )
    wait_for(lambda: client.project("b").fair_share_gpus == 5, what="b's share to reflect a's usage")
    a = client.project("a")
    assert a.usage_gpu_hours == pytest.approx(5.0, rel=0.01)  # decays by a half every hour
    assert a.effective_weight < a.over_quota_weight == 1.0 and client.project("b").effective_weight == 1.0
    labels = {"project": "a", "department": ""}
    assert gauge(svc.url, "tide_project_usage_gpu_hours", **labels) == pytest.approx(
        a.usage_gpu_hours, rel=0.05
    )
    assert gauge(svc.url, "tide_project_over_quota_weight", **labels) == a.effective_weight
    out = CliRunner().invoke(cli_app, ["project", "list", "--url", svc.url, "--token", "test-admin-token"])
    assert out.exit_code == 0, out.output
    assert "USAGE" in out.output and "WEIGHT" in out.output
    row = next(line for line in out.output.splitlines() if line.strip().startswith("a "))
    assert row.split()[7:9] == ["0.56", "5.0"]  # the weight a's usage left it (9/16 of 1), its GPU-hours
