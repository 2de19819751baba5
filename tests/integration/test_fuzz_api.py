"""Schemathesis against the OpenAPI schema of a running service: no 5xx, every answer as documented.

One real service (uvicorn on a free port, SQLite, the in-memory executor) for the module; every operation
of its ``/openapi.json`` is called with generated requests (valid and invalid) as the admin, and each answer
must be no server error, carry a documented status code and content type, and match its schema. Bounded:
``TIDE_FUZZ_EXAMPLES`` examples per operation (default 25), no deadline per example (the machine is loaded),
well under a minute in all.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import positive_data_acceptance
from schemathesis.openapi import from_dict
from servicekit import ADMIN, RunningService, settings_for

from api.server.app import create_app
from api.server.settings import Settings

EXAMPLES = int(os.environ.get("TIDE_FUZZ_EXAMPLES", "25"))


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    data: Path = tmp_path_factory.mktemp("fuzz") / "data"
    running = RunningService(settings_for(data, None, cycle_period=0.2)).start()
    client = running.client()
    client.create_project({"name": "a", "deserved_gpus": 2})  # something to find besides 404s
    client.submit("a", {"name": "train", "workers": 1, "command": ["sleep", "60"]})
    yield running
    running.stop()


# The schema the service serves at /openapi.json (checked below), known before any service runs: the
# operations become test cases at collection time.
schema = from_dict(create_app(Settings(run_loop=False)).openapi())
# A generated body over the service's size limit (env values of 32 KiB each, many of them) is rightly refused
# with the documented 413 before it is read; schemathesis expects only 4xx codes of validation by default.
schema.config.checks.negative_data_rejection.expected_statuses.append("413")


def test_the_fuzzed_schema_is_the_served_one(service: RunningService) -> None:
    assert httpx.get(f"{service.url}/openapi.json").json() == schema.raw_schema


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,  # the same examples every run, no state left in .hypothesis
    derandomize=True,
)
def test_api_conforms_to_its_schema(service: RunningService, case: schemathesis.Case) -> None:
    case.call_and_validate(
        base_url=service.url,
        headers={"Authorization": f"Bearer {ADMIN}"},
        # Rules across fields (limit_gpus >= deserved_gpus, min_replicas <= max_replicas, a replica that fits
        # a node, a department that exists) are beyond JSON Schema: a schema-valid body may rightly get a
        # 422 that says what to fix. Every other check runs, negative_data_rejection included.
        excluded_checks=[positive_data_acceptance],
    )


@pytest.mark.parametrize("kind", ["projects", "departments"])
def test_found_by_fuzzing_an_explicit_null_quota_means_unchanged(service: RunningService, kind: str) -> None:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    created = httpx.post(
        f"{service.url}/api/v1/{kind}", json={"name": "nulls", "deserved_gpus": 3}, headers=headers
    )
    assert created.status_code == 201
    body = {"deserved_gpus": None, "limit_gpus": 5}
    changed = httpx.patch(f"{service.url}/api/v1/{kind}/nulls", json=body, headers=headers)
    assert changed.status_code == 200, changed.text  # was a 500: None compared with an int
    assert (changed.json()["deserved_gpus"], changed.json()["limit_gpus"]) == (3, 5)
    below = httpx.patch(
        f"{service.url}/api/v1/{kind}/nulls", json={"deserved_gpus": None, "limit_gpus": 2}, headers=headers
    )
    assert below.status_code == 422 and "below" in below.json()["detail"]
    assert httpx.delete(f"{service.url}/api/v1/{kind}/nulls", headers=headers).status_code == 204


def test_found_by_fuzzing_booleans_are_not_numbers(service: RunningService) -> None:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    body = {"name": "bools", "deserved_gpus": 1, "limit_gpus": False}
    answer = httpx.post(f"{service.url}/api/v1/departments", json=body, headers=headers)
    assert answer.status_code == 422 and "limit_gpus" in answer.json()["detail"]


def test_found_by_fuzzing_unknown_query_parameters_are_refused(service: RunningService) -> None:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    typo = httpx.get(f"{service.url}/api/v1/jobs?projct=a", headers=headers)
    assert (
        typo.status_code == 422 and "'projct'" in typo.json()["detail"] and "project" in typo.json()["detail"]
    )
    blank = httpx.get(f"{service.url}/api/v1/cluster?verbose", headers=headers)
    assert blank.status_code == 422
    assert (
        httpx.get(f"{service.url}/api/v1/jobs?project=a&status=running", headers=headers).status_code == 200
    )
