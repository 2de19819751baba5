"""R18 resize cost in the service: projects and departments set it (REST and CLI, inherited like the
preemption notice), and a job's own pause is measured from the resize's decision to the first report of its
agents that they train at the new size, then shown by ``tide describe job`` and fed to the core.

The measured half plays the agents with plain HTTP against a real service, as ``test_agent_polls`` does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from servicekit import RunningService, settings_for
from sqlalchemy import select
from test_agent_polls import AgentPods, _launch_all, _poll, _replicas
from test_cli_commands import cli_bridge, tide

from scheduler.core import Node
from scheduler.store.mapper import load_state
from scheduler.store.models import JobRow


@pytest.fixture
def service(tmp_path: Path, db_url: str) -> Iterator[RunningService]:
    executor = AgentPods((Node("node-0", 4),))
    running = RunningService(settings_for(tmp_path, db_url), executor=executor).start()
    client = running.client()
    client.create_project({"name": "a", "deserved_gpus": 0, "resize_cost_seconds": 45.0})
    client.create_project({"name": "b", "deserved_gpus": 2})
    yield running
    running.stop()


def test_a_shrinks_pause_is_measured_from_its_agents_and_becomes_the_jobs_resize_cost(
    service: RunningService,
) -> None:
    client = service.client()
    command = ["torchrun", "train.py"]
    client.submit("a", {"name": "a", "command": command, "min_replicas": 2, "max_replicas": 4, "workers": 3})
    first = _launch_all(service, "a", None, 4, state="warming")
    g1 = first[0]["generation"]
    _poll(service, "a", _replicas(service, "a")[0], generation=g1, state="running")
    job = client.job("a", "a")
    assert (job.resize_cost_seconds, job.resizes_measured) == (None, 0)  # a start is not a resize

    client.submit("b", {"name": "b", "command": ["sleep", "600"], "workers": 1})  # b's quota: a shrinks
    second = _launch_all(service, "a", g1, 2)
    g2 = second[0]["generation"]
    _poll(service, "a", _replicas(service, "a")[1], generation=g2, state="running")
    job = client.job("a", "a")
    assert job.resizes_measured == 1
    assert job.resize_cost_seconds is not None and 0 <= job.resize_cost_seconds < 30
    with service.services.db.read() as session:
        row = session.scalars(select(JobRow).where(JobRow.name == "a")).one()
        assert row.resize_from is None  # measured once
        state = load_state(session)
    core_job = next(j for j in state.jobs if j.name == "a")
    assert core_job.resize_cost_seconds == job.resize_cost_seconds  # the core weighs the measured pause


def test_projects_and_departments_take_a_resize_cost_by_rest_and_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cli_bridge(tmp_path, monkeypatch) as bridge:
        out = tide("department", "create", "research", "--deserved", "4", "--resize-cost", "2m")
        assert out.exit_code == 0 and "resize cost 2m" in out.output, out.output
        assert tide("project", "create", "inherits", "-q", "1", "-d", "research").exit_code == 0
        out = tide("project", "create", "own", "-q", "1", "-d", "research", "--resize-cost", "30s")
        assert out.exit_code == 0 and "resize cost 30s" in out.output, out.output
        assert tide("project", "create", "plain", "-q", "1").exit_code == 0

        listing = tide("project", "list").output
        assert "RESIZE COST" in listing
        rows = {line.split()[0]: line.split() for line in listing.splitlines() if line.strip()}
        assert (rows["inherits"][-2], rows["own"][-2], rows["plain"][-2]) == ("2m", "30s", "-")
        assert "RESIZE COST" in tide("department", "list").output

        out = tide("project", "update", "own", "--resize-cost", "inherit")
        assert out.exit_code == 0 and "resize cost 2m" in out.output, out.output
        bad = tide("project", "update", "own", "--resize-cost", "soon")
        assert bad.exit_code == 2 and "not a duration" in bad.output, bad.output

        with httpx.Client(transport=bridge, base_url="http://tide") as http:
            headers = {"Authorization": "Bearer test-admin-token"}
            made = http.post(
                "/api/v1/projects",
                json={"name": "rest", "deserved_gpus": 1, "resize_cost_seconds": 90},
                headers=headers,
            )
            assert made.status_code == 201, made.text
            assert (made.json()["resize_cost_seconds"], made.json()["effective_resize_cost_seconds"]) == (
                90,
                90,
            )
            for wrong, words in (
                (-1, "greater than or equal to 0"),
                (86_401, "less"),
                ("1m", "valid number"),
            ):
                answer = http.patch(
                    "/api/v1/projects/rest", json={"resize_cost_seconds": wrong}, headers=headers
                )
                assert answer.status_code == 422, answer.text
                assert "resize_cost_seconds" in answer.text and words in answer.text, answer.text
            cleared = http.patch("/api/v1/projects/rest", json={"resize_cost_seconds": None}, headers=headers)
            assert cleared.json()["effective_resize_cost_seconds"] is None
            http.patch("/api/v1/departments/research", json={"resize_cost_seconds": 600}, headers=headers)
            inherits = http.get("/api/v1/projects/inherits", headers=headers).json()
            assert (inherits["resize_cost_seconds"], inherits["effective_resize_cost_seconds"]) == (None, 600)
