"""The words of statuses are one set: the API's schema and the CLI's quick path offer exactly them, and a
status written by the service is its plain string in JSON and in the database."""

from __future__ import annotations

import json
from typing import get_args

from api.client.cli import jobs, quick
from api.server import schemas
from scheduler.statuses import ACTIVE, JobStatus, ReplicaDesired, ReplicaStatus


def test_the_api_and_the_cli_offer_the_same_job_statuses() -> None:
    assert get_args(schemas.JobStatus) == tuple(JobStatus)
    assert get_args(schemas.ReplicaStatus) == tuple(ReplicaStatus)
    assert jobs.STATUSES == ("pending", "running", "succeeded", "failed", "cancelled")
    assert all(type(status) is str for status in jobs.STATUSES)  # printed as they are in help texts
    assert [quick._job_status(s) for s in ("cancelled", "sleeping")] == ["cancelled", None]


def test_a_status_is_its_string() -> None:
    assert ACTIVE == ("pending", "running")
    assert ReplicaDesired.STOP == "stop" and f"{ReplicaStatus.TERMINATING}" == "terminating"
    assert json.dumps({"status": JobStatus.CANCELLED}) == '{"status": "cancelled"}'
