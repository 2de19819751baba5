"""Tables fit the terminal: on 80 columns ``tide list``, ``tide project list``, ``tide node list`` and ``tide
cluster`` cut no name or count and draw no line wider than 80 (optional columns are left out, reasons wrap in
their column); ``-o wide`` shows every column whatever the width. Against the real app in process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from servicekit import wait_for
from test_cli_commands import cli_bridge, tide

from api.server.testing import ASGIBridge

LONG_PROJECT = "computer-vision-research"
LONG_JOB = "resnet-elastic-imagenet-large"


@pytest.fixture
def busy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ASGIBridge]:
    """A cluster of 2 nodes of 8 GPUs: one elastic job takes them all, another waits with a long reason."""
    monkeypatch.setenv("COLUMNS", "80")
    with cli_bridge(tmp_path, monkeypatch, nodes=2, gpus_per_node=8) as bridge:
        assert tide("department", "create", "research-and-development", "--deserved", "16").exit_code == 0
        for project in (LONG_PROJECT, "speech"):
            created = tide("project", "create", project, "--deserved", "8", "-d", "research-and-development")
            assert created.exit_code == 0, created.output
        tide("project", "update", LONG_PROJECT, "--min-runtime", "10m", "--limit", "16")
        submitted = tide("submit-dist", "pytorch", "--name", LONG_JOB, "-p", LONG_PROJECT, "--min-replicas", "1",
                         "--max-replicas", "1000", "--", "sleep", "100")  # fmt: skip
        assert submitted.exit_code == 0, submitted.output
        wait_for(lambda: _jobs()[0]["replicas_now"] == 16, what="the elastic job to take 16")
        tide("submit-dist", "pytorch", "--name", "whisper-finetune-multilingual", "-p", "speech", "-g", "8",
             "--workers", "1", "--", "sleep", "100")  # fmt: skip
        yield bridge


def _jobs() -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = json.loads(tide("list", "--json").output)
    return jobs


def _fits(output: str, width: int = 80) -> None:
    assert max(len(line.rstrip()) for line in output.splitlines()) <= width, output


def _words(output: str) -> list[str]:
    return output.split()


@pytest.mark.usefixtures("busy")
def test_list_fits_80_columns_without_cutting_names_or_counts() -> None:
    wait_for(lambda: len(_jobs()) == 2 and _jobs()[1]["pending_reason"], what="the second job to wait")
    listed = tide("list")
    assert listed.exit_code == 0, listed.output
    _fits(listed.output)
    assert "…" not in listed.output
    words = _words(listed.output)
    for whole in (LONG_PROJECT, LONG_JOB, "16/1/1000", "whisper-finetune-multilingual", "0/2/2", "speech"):
        assert whole in words, listed.output
    for job in _jobs():  # each reason whole, wrapped (in or under its row)
        reason = job["pending_reason"] or job["message"]
        assert " ".join(reason.split()) in " ".join(words), listed.output
    wide = tide("list", "-o", "wide").output
    assert wide.splitlines()[0].split() == [
        "PROJECT",
        "NAME",
        "STATUS",
        "REPLICAS",
        "GPUS",
        "AGE",
        "ETA",
        "REASON",
    ]
    assert len(wide.splitlines()) == 3 and max(len(line) for line in wide.splitlines()) > 80, wide


@pytest.mark.usefixtures("busy")
def test_project_department_and_node_lists_fit_80_columns() -> None:
    for command in (["project", "list"], ["department", "list"], ["node", "list"], ["cluster"]):
        result = tide(*command)
        assert result.exit_code == 0, result.output
        _fits(result.output)
        assert "…" not in result.output, result.output
    projects = tide("project", "list").output
    assert LONG_PROJECT in _words(projects) and "DESERVED" in projects and "JOBS" in projects
    wide = tide("project", "list", "-o", "wide").output
    assert all(header in wide for header in ("DEPT", "OVER", "LIMIT", "MIN RUN")), wide
    assert "research-and-development" in _words(wide)
    departments = tide("department", "list").output
    assert {"research-and-development", "computer-vision-research,", "speech"} <= set(_words(departments))
    replicas = {f"{LONG_PROJECT}/{LONG_JOB}#{index}" for index in range(16)}
    assert replicas <= set(_words(tide("node", "list").output))  # no replica's name split over two lines
    assert "SCHED" in tide("node", "list", "-o", "wide").output


@pytest.mark.usefixtures("busy")
def test_output_takes_only_wide() -> None:
    for command in (["list"], ["project", "list"], ["department", "list"], ["node", "list"], ["cluster"]):
        result = tide(*command, "-o", "yaml")
        assert result.exit_code == 2, result.output
        assert "-o/--output takes 'wide'" in result.output
