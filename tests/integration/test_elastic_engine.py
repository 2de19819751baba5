"""Coordinated restarts of torchrun jobs: the engine with the local executor and real processes.

The processes are a small stand-in named ``torchrun`` (a job opts in by its command's name), fast and
scriptable: it records the ``PET_*`` environment of every launch, then hangs, fails or sleeps as told.
What users are promised: a resize relaunches the whole job as one fixed-size rendezvous (``N:N``, a new
run id and port) while the master keeps its GPU; a replica failing on its own restarts the whole job, and
only up to the job's ``max_restarts`` (resizes never count); a launch whose workers never start is tried
once more, then the job fails with the reason. Plain commands are not restarted (tests/integration
test_seed_scenario.py: the master's process survives a shrink).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from servicekit import kill_leftovers
from sqlalchemy import select

from scheduler.core import Config, Node
from scheduler.engine.loop import Engine, EngineSettings
from scheduler.executors.local import LocalExecutor
from scheduler.store.db import Database
from scheduler.store.migrate import upgrade
from scheduler.store.models import EventRow, JobRow, ProjectRow
from scheduler.store.queries import job_by_name

NODES = tuple(Node(f"node-{i}", 1) for i in range(4))
STAND_IN = """#!{python}
import json, os, sys, time
mode, record = sys.argv[-2], sys.argv[-1]
env = {{k: v for k, v in os.environ.items() if k.startswith(("PET_", "TIDE_"))}}
with open(record, "a") as out:
    out.write(json.dumps(env) + "\\n")
first = not os.path.exists(record + ".failed")
if mode == "fail" or (mode == "fail-once" and env["TIDE_REPLICA_INDEX"] == "1" and first):
    open(record + ".failed", "w").close()
    sys.exit(3)
time.sleep(1.0 if mode == "fail-once" else 600)
"""


class Cluster:
    """An engine on SQLite with the local executor; ``tick_until`` runs cycles until a condition holds."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.db = Database(f"sqlite+pysqlite:///{tmp_path / 'tide.db'}")
        upgrade(self.db)
        self.executor = LocalExecutor(tmp_path / "data", NODES)
        settings = EngineSettings(grace_period=3, core=Config(settle_seconds=0), check_invariants=True)
        self.engine = Engine(self.db, self.executor, settings)
        self.torchrun = tmp_path / "torchrun"
        self.torchrun.write_text(STAND_IN.format(python=sys.executable))
        self.torchrun.chmod(0o755)
        self.record = tmp_path / "launches.jsonl"
        with self.db.write() as session:
            for name in ("a", "b"):
                session.add(ProjectRow(name=name, deserved_gpus=2, created_at=0.0, fair_share_gpus=0))

    def submit(
        self,
        project: str,
        name: str,
        replicas: tuple[int, int],
        command: list[str],
        allowed: list[int] | None = None,
    ) -> None:
        with self.db.write() as session:
            owner = session.scalars(select(ProjectRow).where(ProjectRow.name == project)).one()
            now = time.time()
            low, high = replicas
            job = JobRow(project=owner, name=name, status="pending", workers=high - 1, min_replicas=low,
                         max_replicas=high, gpus_per_replica=1, command=command, env={}, created_at=now,
                         submitted_at=now, restarts=0, generation=0, allowed_replicas=allowed)  # fmt: skip
            session.add(job)
        self.engine.trigger()

    def stand_in(self, mode: str, *flags: str) -> list[str]:
        return [str(self.torchrun), *flags, mode, str(self.record)]

    def job(self, project: str, name: str) -> JobRow:
        with self.db.read() as session:
            job = job_by_name(session, project, name)
            assert job is not None
            return job

    def launches(self) -> list[dict[str, str]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def events(self, kind: str) -> list[EventRow]:
        with self.db.read() as session:
            return list(session.scalars(select(EventRow).where(EventRow.kind == kind)).all())

    def tick_until(self, condition: Callable[[], object], what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
            self.engine.tick()
            time.sleep(0.05)
        assert self.engine.violations == []


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    built = Cluster(tmp_path)
    try:
        yield built
    finally:
        kill_leftovers(tmp_path / "data")


def wanted(c: Cluster, project: str, name: str) -> dict[int, tuple[str, tuple[int, ...]]]:
    job = c.job(project, name)
    return {r.index: (r.node, tuple(r.gpu_ids or ())) for r in job.replicas if r.desired == "run"}


def running_launch(c: Cluster, size: int) -> list[dict[str, str]]:
    """The replicas of the newest launch of a's job, once all ``size`` of them started."""
    launches = [e for e in c.launches() if e["TIDE_PROJECT"] == "a"]
    if not launches:
        return []
    newest = [e for e in launches if e["PET_RDZV_ID"] == launches[-1]["PET_RDZV_ID"]]
    return newest if len(newest) == size else []


def test_a_resize_relaunches_the_job_at_its_new_size_and_the_master_keeps_its_gpu(cluster: Cluster) -> None:
    c = cluster
    c.submit("a", "train", (2, 4), c.stand_in("run"))
    c.tick_until(lambda: running_launch(c, 4), "a's first launch at 4")
    first = running_launch(c, 4)
    master = wanted(c, "a", "train")[0]
    assert {e["PET_NNODES"] for e in first} == {"4:4"} and {e["PET_MAX_RESTARTS"] for e in first} == {"0"}

    c.submit("b", "claim", (2, 2), ["sleep", "600"])
    c.tick_until(lambda: running_launch(c, 2), "a relaunched at 2")
    second = running_launch(c, 2)
    assert sorted(e["TIDE_REPLICA_INDEX"] for e in second) == ["0", "1"]
    assert {e["PET_NNODES"] for e in second} == {"2:2"}
    assert second[0]["PET_RDZV_ID"] != first[0]["PET_RDZV_ID"]
    assert second[0]["PET_RDZV_ENDPOINT"] != first[0]["PET_RDZV_ENDPOINT"]  # a port per launch
    assert wanted(c, "a", "train")[0] == master

    with c.db.write() as session:  # b is done: a grows back, again as one launch
        b = job_by_name(session, "b", "claim")
        assert b is not None
        b.status = "cancelled"
        for replica in b.replicas:
            replica.desired = "stop"
    c.tick_until(lambda: running_launch(c, 4) and running_launch(c, 4) != first, "a relaunched at 4")
    assert {e["PET_NNODES"] for e in running_launch(c, 4)} == {"4:4"}
    assert wanted(c, "a", "train")[0] == master
    assert c.events("restart") == [] and c.job("a", "train").status == "running"


def test_a_job_allowed_one_two_or_four_replicas_shrinks_from_four_to_two_for_one_gpu(
    cluster: Cluster,
) -> None:
    """R16: b wants 1 GPU; a may run at 1, 2 or 4 replicas, so it relaunches at 2 (never at 3), and the torchrun
    environment of that launch says 2:2 and the sizes."""
    c = cluster
    c.submit("a", "train", (1, 4), c.stand_in("run"), allowed=[1, 2, 4])
    c.tick_until(lambda: running_launch(c, 4), "a's first launch at 4")
    c.submit("b", "claim", (1, 1), ["sleep", "600"])
    c.tick_until(lambda: running_launch(c, 2), "a relaunched at 2")
    second = running_launch(c, 2)
    assert {(e["PET_NNODES"], e["TIDE_ALLOWED_REPLICAS"]) for e in second} == {("2:2", "1,2,4")}
    assert not any(e["PET_NNODES"] == "3:3" for e in c.launches())
    c.tick_until(lambda: c.job("b", "claim").status == "running", "b to run on one of the two freed GPUs")


def test_a_failing_replica_restarts_the_whole_job_which_then_succeeds(cluster: Cluster) -> None:
    c = cluster
    c.submit("a", "train", (2, 2), c.stand_in("fail-once"))
    c.tick_until(lambda: c.job("a", "train").status == "succeeded", "a to succeed after one restart")
    [restart] = c.events("restart")
    assert restart.cause == "failure" and "replica 1 exited with code 3" in restart.reason
    assert "failure 1 of max_restarts 3" in restart.reason
    generations = [e["TIDE_GENERATION"] for e in c.launches()]
    assert len(set(generations)) == 2 and len(generations) == 4  # two launches of both replicas


def test_failures_past_max_restarts_fail_the_job_with_the_reason(cluster: Cluster) -> None:
    c = cluster
    c.submit("a", "train", (1, 1), c.stand_in("fail", "--max-restarts=1"))
    c.tick_until(lambda: c.job("a", "train").status == "failed", "a to fail")
    assert [e.cause for e in c.events("restart")] == ["failure"]
    message = c.job("a", "train").message or ""
    assert "exited with code 3" in message and "after 1 restarts (max_restarts 1)" in message


def test_a_launch_that_does_not_form_is_retried_once_then_the_job_fails(cluster: Cluster) -> None:
    c = cluster
    c.engine.knobs = replace(c.engine.knobs, launch_timeout=1.5)
    c.submit("a", "train", (2, 2), c.stand_in("run"))  # the stand-in never starts workers
    c.tick_until(lambda: c.job("a", "train").status == "failed", "a to fail")
    assert [e.cause for e in c.events("restart")] == ["timeout"]
    message = c.job("a", "train").message or ""
    assert "did not start its workers within 1.5 s, twice" in message
    assert len({e["PET_RDZV_ID"] for e in c.launches()}) == 2
