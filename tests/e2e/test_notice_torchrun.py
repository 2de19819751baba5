"""A preemption notice reaches a real torchrun job's training on the local executor, which checkpoints.

Story: team a (no quota, ``preemption_notice_seconds`` 3) trains ``deploy/examples/train_elastic.py`` under
``torchrun`` on the node's GPUs; team b, which deserves them, submits. a's replica gets SIGUSR1 on its
training worker (not on the torchrun agent or Tide's launcher, which SIGUSR1 would end), the script
checkpoints at the next step ("notice"), trains on, and stops on the SIGTERM 3 s later with a last
checkpoint. Both launch paths: Tide's warm launcher playing torchrun's agent, and torchrun's own agent.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from scheduler.core import Config, Node
from scheduler.engine.loop import Engine, EngineSettings
from scheduler.executors.local import LocalExecutor
from scheduler.store.db import Database
from scheduler.store.migrate import upgrade
from scheduler.store.models import EventRow, JobRow, ProjectRow

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "examples" / "train_elastic.py"
NOTICE = 3


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite+pysqlite:///{tmp_path / 'tide.db'}")
    upgrade(database)
    with database.write() as session:
        session.add(
            ProjectRow(
                name="a", deserved_gpus=0, created_at=0.0, fair_share_gpus=0, preemption_notice_seconds=NOTICE
            )
        )
        session.add(ProjectRow(name="b", deserved_gpus=1, created_at=1.0, fair_share_gpus=0))
    yield database
    database.dispose()


def _submit(db: Database, project: str, name: str, command: list[str], env: dict[str, str]) -> None:
    with db.write() as session:
        owner = session.scalars(select(ProjectRow).where(ProjectRow.name == project)).one()
        session.add(
            JobRow(
                project=owner, name=name, status="pending", workers=0, min_replicas=1, max_replicas=1,
                gpus_per_replica=1, command=command, env=env, created_at=time.time(),
                submitted_at=time.time(), restarts=0, generation=0,
            )
        )  # fmt: skip


def _records(log: Path) -> list[dict[str, object]]:
    text = log.read_text() if log.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _until(engine: Engine, cond: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        engine.tick()
        time.sleep(0.05)


@pytest.mark.parametrize("agent", ["launcher", "torchrun"])
def test_a_torchrun_jobs_training_checkpoints_on_the_notice_before_its_sigterm(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent: str
) -> None:
    monkeypatch.setenv("TIDE_WARM_LAUNCHERS", "0")  # a launcher started for the replica, none kept idle
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    executor = LocalExecutor(tmp_path / "data", (Node("node-0", 1),))
    settings = EngineSettings(grace_period=30, core=Config(settle_seconds=0), check_invariants=True)
    engine = Engine(db, executor, settings)
    env = {"TIDE_TORCHRUN_AGENT": "torchrun"} if agent == "torchrun" else {}
    train = ["--steps", "100000", "--ckpt-every", "100000", "--step-time", "0.02", "--log-every", "10"]
    log = executor.log_path("a", "train", 0)
    try:
        _submit(db, "a", "train", ["torchrun", "--nproc-per-node", "1", str(SCRIPT), *train], env)
        _until(engine, lambda: any("step" in r for r in _records(log)), 90, "a's training to take steps")
        _submit(db, "b", "owner", [sys.executable, "-c", "import time; time.sleep(60)"], {})
        _until(engine, lambda: any(r.get("event") == "stop" for r in _records(log)), 30, "a's stop")
        records = _records(log)
        saves = [r for r in records if r.get("event") == "checkpoint"]
        assert [s["reason"] for s in saves] == ["notice", "stop"], records
        stop = next(r for r in records if r.get("event") == "stop")
        ahead = float(stop["time"]) - float(saves[0]["time"])  # type: ignore[arg-type]
        print(f"{agent}: the notice's checkpoint came {ahead:.2f} s before the SIGTERM's stop")
        assert NOTICE - 1.0 <= ahead < NOTICE + 2.0  # checkpointed at the notice, stopped after it
        with db.read() as session:
            evict = session.scalars(
                select(EventRow).where(EventRow.job == "train", EventRow.kind == "evict")
            ).one()
        assert "notice: SIGUSR1 3 s before SIGTERM" in evict.reason
    finally:
        engine.close()
        for replica_id, seen in executor.observe().items():
            if seen.running:
                executor.stop(replica_id, 0.0)  # SIGKILL, to the workers outside its group too
        executor.close()
