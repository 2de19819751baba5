"""Request validation: what a client may send, with messages that say what to fix."""

from __future__ import annotations

from fractions import Fraction

import pytest
from pydantic import ValidationError

from api.server.schemas import JobCreate, ProjectCreate, ProjectUpdate, exact_fraction


def test_job_sizes_default_to_rigid() -> None:
    job = JobCreate(name="train", workers=3, command=["python", "train.py"])
    assert (job.min_replicas, job.max_replicas) == (4, 4)
    elastic = JobCreate(name="train", workers=3, min_replicas=2, max_replicas=6, command=["x"])
    assert (elastic.min_replicas, elastic.max_replicas) == (2, 6)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"name": "-bad"}, "DNS-1123"),
        ({"name": "a" * 64}, "DNS-1123"),
        ({"name": "ok", "workers": 1, "min_replicas": 3, "max_replicas": 5}, "within"),
        ({"name": "ok", "min_replicas": 2, "max_replicas": 1}, "above max_replicas"),
        ({"name": "ok", "env": {"TIDE_JOB": "x"}}, "set by Tide"),
        ({"name": "ok", "env": {"A-B": "x"}}, "environment variable name"),
        ({"name": "ok", "command": ["python", ""]}, "non-empty"),
        ({"name": "ok", "unknown": 1}, "Extra inputs"),
    ],
)
def test_bad_jobs(body: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        JobCreate.model_validate({"command": ["x"], **body})


def test_project_limits() -> None:
    with pytest.raises(ValidationError, match="below deserved_gpus"):
        ProjectCreate(name="a", deserved_gpus=4, limit_gpus=2)
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        ProjectCreate(name="a", deserved_gpus=-1)
    assert ProjectUpdate(limit_gpus=None).model_dump(exclude_unset=True) == {"limit_gpus": None}


def test_a_gpu_fraction_is_kept_exact() -> None:
    """R20: 0.5 is 1/2 and 1/3 is 1/3, exactly."""
    assert exact_fraction(0.5) == Fraction(1, 2)
    assert exact_fraction(1 / 3) == Fraction(1, 3)
    assert exact_fraction(0.05) == Fraction(1, 20)
