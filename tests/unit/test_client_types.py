"""The client's plain answer types mirror the API's models field for field, and read the API's JSON."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from api.client import client_types
from api.client.cli import quick
from api.client.client_types import JobPublic, NodePublic, parse, parse_list
from api.server import mirrors, schemas
from api.shared.paths import api_root


def test_every_answer_of_the_api_has_a_plain_twin_of_the_same_shape() -> None:
    assert {"JobPublic", "ClusterPublic", "NodeSlot", "TokenPublic", "Health"} <= set(mirrors.answer_models())
    assert mirrors.problems() == []


def test_a_drifted_copy_is_named_with_what_to_change(monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclasses.dataclass(frozen=True)
    class TokenPublic:
        id: int
        project: str
        name: str | None
        created_at: datetime

    monkeypatch.setattr(client_types, "TokenPublic", TokenPublic)
    monkeypatch.setattr(quick, "JOB_FIELDS", quick.JOB_FIELDS[:-1])
    found = mirrors.problems()
    assert any("TokenPublic's fields are" in problem for problem in found), found
    assert any("TokenPublic.name is `str | None`; the API's model says `str`" in p for p in found), found
    assert any("JOB_FIELDS must be the required fields of JobPublic" in problem for problem in found), found


def _job(**changes: Any) -> dict[str, Any]:
    created = datetime(2025, 3, 1, 12, 30, 5, 250_000, tzinfo=UTC)
    replica = schemas.ReplicaPublic(
        index=0, role="master", status="running", node="node-0", gpus=1, gpu_ids=[3], pid=42,
        started_at=created, exit_code=None,
    )  # fmt: skip
    job = schemas.JobPublic(
        project="a", name="train", status="running", workers=1, min_replicas=1, max_replicas=2,
        gpus_per_replica=1, replicas_now=1, allocated_gpus=1, pending_reason=None, queue_position=None,
        restarts=0, interactive=False, priority=0, image=None, command=["python", "train.py"],
        env_names=["LR"], message=None, created_at=created, finished_at=None, replicas=[replica],
    )  # fmt: skip
    return job.model_dump(mode="json") | changes


def test_a_job_as_the_server_writes_it_reads_back_with_times_and_replicas() -> None:
    data = _job()
    job = parse(JobPublic, data)
    assert job.created_at == datetime(2025, 3, 1, 12, 30, 5, 250_000, tzinfo=UTC)
    assert job.finished_at is None and job.env_names == ["LR"]
    assert job.replicas[0].gpu_ids == [3] and job.replicas[0].started_at == job.created_at
    assert job.raw is data


def test_a_field_a_newer_server_adds_is_kept_for_json_only() -> None:
    data = _job(eta_seconds=120)
    job = parse(JobPublic, data)
    assert job.raw["eta_seconds"] == 120 and not hasattr(job, "eta_seconds")


def test_defaults_of_the_api_models_apply_to_older_answers() -> None:
    node = parse(NodePublic, {"name": "n", "gpus": 4, "allocated_gpus": 0, "schedulable": True, "slots": []})
    assert node.state == "ready" and node.state_since is None and node.waiting == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"hello": "world"}, "without 'project'"),
        (["a list"], "expected a JobPublic object"),
        (_job(created_at=12), "ISO 8601"),
        (_job(replicas={"0": {}}), "expected a list of ReplicaPublic"),
    ],
)
def test_an_answer_that_is_not_tides_is_a_value_error(data: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(JobPublic, data)


def test_a_list_answer_must_be_a_list() -> None:
    assert parse_list(JobPublic, [_job(), _job(name="other")])[1].name == "other"
    with pytest.raises(ValueError, match="expected a list"):
        parse_list(JobPublic, {"items": []})


@pytest.mark.parametrize(
    ("given", "root"),
    [
        ("http://gpu-box:8000", "http://gpu-box:8000"),
        ("http://gpu-box:8000/", "http://gpu-box:8000"),
        ("http://gpu-box:8000/api/v1", "http://gpu-box:8000"),  # what `tide serve` prints as "Tide API:"
        ("http://gpu-box:8000/api/v1/", "http://gpu-box:8000"),
        (" https://tide.example.org/tide/api/v1 ", "https://tide.example.org/tide"),  # behind a path prefix
    ],
)
def test_the_api_root_as_tide_serve_prints_it_means_the_server(given: str, root: str) -> None:
    assert api_root(given) == root
