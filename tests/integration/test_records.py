"""What ``tide describe job`` and the events record of a run is what happened: a replica Tide stopped reads
``stopped`` (never succeeded); an eviction whose job saved a checkpoint on its notice lost no work.

Through the real app in process (``ASGIBridge``) and the CLI, with the in-memory executor (a stopped
replica exits -15, as a process killed by SIGTERM does).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from servicekit import ADMIN, wait_for
from test_cli_commands import cli_bridge, tide

from api.client.client_types import EventPublic
from api.client.rest import TideClient
from api.server.testing import ASGIBridge, local_client


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
