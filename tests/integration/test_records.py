"""What ``tide describe job`` records of a run is what happened: a replica Tide stopped reads ``stopped``
(never succeeded), and a running job at its largest size has no growth forecast.

Through the real app in process (``ASGIBridge``) and the CLI, with the in-memory executor (a stopped
replica exits -15, as a process killed by SIGTERM does).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from servicekit import wait_for
from test_cli_commands import cli_bridge, tide

from api.server.testing import ASGIBridge


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
