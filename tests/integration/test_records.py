"""What ``tide describe job`` and the events record of a run is what happened: a replica Tide stopped reads
``stopped`` (never succeeded); an eviction whose job saved a checkpoint on its notice lost no work; a
finished job is deleted for real, a reused name shows only its own run, and a retention removes old ones.

Through the real app in process (``ASGIBridge``) and the CLI, with the in-memory executor (a stopped
replica exits -15, as a process killed by SIGTERM does).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from servicekit import ADMIN, kill_leftovers, wait_for
from sqlalchemy import select
from test_cli_commands import cli_bridge, tide

from api.client.client_types import EventPublic
from api.client.rest import TideClient
from api.server.testing import ASGIBridge, local_client
from scheduler.core import Config, Node
from scheduler.engine.loop import Engine, EngineSettings
from scheduler.executors.fake import FakeExecutor
from scheduler.store.db import Database
from scheduler.store.migrate import upgrade
from scheduler.store.models import EventRow, JobRow, ProjectRow

START = 1_800_000_000.0


@pytest.fixture
def bridge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ASGIBridge]:
    with cli_bridge(tmp_path, monkeypatch) as bridge:
        yield bridge


def _replicas(name: str) -> list[tuple[str, int | None]]:
    described = json.loads(tide("describe", "job", name, "-p", "team-a", "--json").output)
    return [(r["status"], r["exit_code"]) for r in described["replicas"]]


@pytest.mark.usefixtures("bridge")
def test_a_deleted_jobs_replicas_read_stopped_not_succeeded() -> None:
    assert tide("project", "create", "team-a", "--deserved", "4").exit_code == 0
    submitted = tide("submit-dist", "pytorch", "-p", "team-a", "--name", "train", "--workers", "1",
                     "--", "sleep", "600")  # fmt: skip
    assert submitted.exit_code == 0, submitted.output
    wait_for(lambda: _replicas("train") == [("running", None)] * 2, what="train to run")
    assert tide("delete", "job", "train", "-p", "team-a").exit_code == 0
    wait_for(lambda: all(code is not None for _, code in _replicas("train")), what="the replicas to exit")
    assert _replicas("train") == [("stopped", -15), ("stopped", -15)]
    described = tide("describe", "job", "train", "-p", "team-a").output
    assert "stopped" in described and "succeeded" not in described


def _evictions(client: TideClient) -> list[EventPublic]:
    return [e for e in client.events(project="a", job="sweep") if e.kind == "evict"]


def test_an_eviction_the_job_checkpointed_after_on_its_notice_lost_no_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """a (no quota, a 30 s notice) borrows all 4 GPUs; b, owed them, submits: a's job is evicted with its
    notice, and the event first estimates the work since its start as lost. The job saves a checkpoint on
    the notice and reports it: the event then says it lost nothing."""
    with cli_bridge(tmp_path, monkeypatch, grace_period=60.0) as bridge:
        client = local_client(bridge, ADMIN)
        client.create_project({"name": "a", "deserved_gpus": 0, "preemption_notice_seconds": 30})
        client.create_project({"name": "b", "deserved_gpus": 4})
        client.submit(
            "a", {"name": "sweep", "workers": 0, "gpus_per_replica": 4, "command": ["sleep", "600"]}
        )
        wait_for(lambda: client.job("a", "sweep").allocated_gpus == 4, what="a's job to run")
        time.sleep(1.0)  # 4 GPUs x 1 s of work at stake
        client.submit(
            "b", {"name": "owner", "workers": 0, "gpus_per_replica": 4, "command": ["sleep", "600"]}
        )
        evict = wait_for(lambda: _evictions(client), what="the eviction")[0]  # type: ignore[index]
        assert evict.cause == "reclaim" and "notice: SIGUSR1" in evict.reason
        assert (evict.lost_gpu_seconds or 0) >= 4 and "loses ~" in evict.reason
        client.checkpointed("a", "sweep")  # saved on the notice, before its SIGTERM
        saved = _evictions(client)[0]
        assert saved.lost_gpu_seconds == 0
        assert "loses no work (it reported a checkpoint after this)" in saved.reason
        assert "notice: SIGUSR1" in saved.reason and "loses ~" not in saved.reason
        assert "loses no work" in tide("describe", "job", "sweep", "-p", "a").output
        client.close()


def _events(name: str) -> list[str]:
    described = tide("events", "-p", "team-a", "--json")
    return [e["kind"] for e in json.loads(described.output) if e["job"] == name]


def test_a_finished_job_is_deleted_for_real_and_a_reused_name_shows_only_its_own_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hello (``true``, real processes) succeeds; submitted again under the same name, its record and events
    are the new run's alone; deleted once finished, it leaves ``tide list`` and the events."""
    with cli_bridge(tmp_path, monkeypatch, executor="local", cycle_period=0.1):
        try:
            assert tide("project", "create", "team-a", "--deserved", "4").exit_code == 0
            hello = [
                "submit-dist",
                "pytorch",
                "-p",
                "team-a",
                "--name",
                "hello",
                "--workers",
                "0",
                "--",
                "true",
            ]
            assert tide(*hello).exit_code == 0
            wait_for(lambda: "succeeded" in tide("list", "-p", "team-a").output, what="hello to succeed")
            assert _events("hello") == ["start", "finish"]
            assert tide(*hello).exit_code == 0  # its name again: a new run
            wait_for(
                lambda: "succeeded" in tide("list", "-p", "team-a").output, what="the new run to succeed"
            )
            assert _events("hello") == ["start", "finish"]  # the new run's alone
            described = tide("describe", "job", "hello", "-p", "team-a").output
            assert described.count("finish") == 1, described
            deleted = tide("delete", "job", "hello", "-p", "team-a")
            assert deleted.exit_code == 0 and "Deleted job team-a/hello" in deleted.output, deleted.output
            assert "hello" not in tide("list", "-p", "team-a").output
            assert _events("hello") == []
            assert tide("describe", "job", "hello", "-p", "team-a").exit_code == 3
        finally:
            kill_leftovers(tmp_path)


def test_finished_jobs_are_removed_with_their_events_once_their_retention_ran_out(db_url: str) -> None:
    """``--finished-retention 3600``: old (ended over an hour ago) goes with its events; recent (ended 700 s
    ago) and the running job stay. On SQLite and PostgreSQL."""
    db = Database(db_url)
    upgrade(db)
    clock = [START]
    fake = FakeExecutor((Node("node-0", 4),))
    settings = EngineSettings(core=Config(settle_seconds=0), finished_retention=3600.0)
    engine = Engine(db, fake, settings, clock=lambda: clock[0])
    with db.write() as session:
        project = ProjectRow(name="a", deserved_gpus=4, created_at=START)
        for name in ("old", "recent", "running"):
            session.add(
                JobRow(
                    project=project, name=name, status="pending", workers=0, min_replicas=1, max_replicas=1,
                    gpus_per_replica=1, command=["sleep", "600"], env={}, created_at=START, submitted_at=START,
                )
            )  # fmt: skip
    engine.tick()
    engine.tick()
    fake.finish("a", "old", 0, 0)
    clock[0] += 1.0
    engine.tick()
    clock[0] += 3000.0
    fake.finish("a", "recent", 0, 0)
    engine.tick()
    with db.read() as session:
        assert sorted(session.scalars(select(JobRow.name))) == ["old", "recent", "running"]
    clock[0] += 700.0  # old ended 3700 s ago, recent 700 s ago
    engine.tick()
    with db.read() as session:
        assert sorted(session.scalars(select(JobRow.name))) == ["recent", "running"]
        assert sorted(set(session.scalars(select(EventRow.job)))) == ["recent", "running"]
    engine.close()
    db.dispose()


def test_a_finished_job_still_stopping_its_replicas_is_not_removed_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deleted job whose process ignores SIGTERM is cancelled but still holds its GPU until the grace
    period ends: a second delete says to try again once it exited (exit 2), and the job stays listed."""
    with cli_bridge(tmp_path, monkeypatch, executor="local", cycle_period=0.1, grace_period=30.0):
        try:
            assert tide("project", "create", "team-a", "--deserved", "4").exit_code == 0
            stubborn = ["submit-dist", "pytorch", "-p", "team-a", "--name", "stubborn", "--workers", "0"]
            assert tide(*stubborn, "--", "sh", "-c", "trap '' TERM; sleep 600").exit_code == 0
            wait_for(lambda: "running" in tide("list", "-p", "team-a").output, what="stubborn to run")
            assert "status cancelled" in tide("delete", "job", "stubborn", "-p", "team-a").output
            again = tide("delete", "job", "stubborn", "-p", "team-a")
            assert again.exit_code == 2, again.output
            assert "1 of its replicas are still stopping: delete it again once they exited" in again.output
            assert "stubborn" in tide("list", "-p", "team-a").output
        finally:
            kill_leftovers(tmp_path)
