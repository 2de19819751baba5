"""PostgreSQL stopped for 10 s and started again under a running service.

A private PostgreSQL server (``pgserver``) is really stopped (``pg_ctl stop -m fast``: sessions ended,
connections refused) and started again, the most faithful outage there is; the shared server stays up.
Meanwhile the API answers 503 with a message and ``Retry-After`` (never a 500, never a hang), ``/healthz``
still answers and ``/readyz`` says the database is unreachable; a submit is refused, so the client knows it
was not taken; a job's process ends meanwhile. Afterwards the loop leads and cycles again, the running job
kept its processes (each replica started once), the exit seen during the outage finishes its job once, the
refused submit can be made again and runs, and every decision was recorded once.
The figures (time to the first 503, time until the API and the loop are back) are printed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from pgserver import PrivateServer, find_bindir
from servicekit import ADMIN, RunningService, running_pids, wait_for

OUTAGE_SECONDS = 10.0
JOB = {"workers": 1, "command": ["sleep", "600"]}


@pytest.fixture
def private_pg() -> Iterator[PrivateServer]:
    bindir = find_bindir()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but no PostgreSQL server binaries (initdb, pg_ctl) were found")
        pytest.skip("no PostgreSQL server binaries here (set TIDE_TEST_PG_BINDIR)")
    server = PrivateServer(bindir).init()
    server.start()
    try:
        yield server
    finally:
        server.close()


def _answer(http: httpx.Client, method: str, path: str, **kwargs: object) -> tuple[httpx.Response, float]:
    began = time.monotonic()
    response = http.request(method, path, headers={"Authorization": f"Bearer {ADMIN}"}, **kwargs)  # type: ignore[arg-type]
    return response, time.monotonic() - began


def _starts(service: RunningService, job: str) -> int:
    log = service.settings.data_dir / "logs" / "a" / job
    return sum(p.read_text().count("--- tide: replica") for p in log.glob("replica-*.log"))


@pytest.mark.postgres
@pytest.mark.slow
def test_postgres_stopped_for_ten_seconds(
    private_pg: PrivateServer, make_service: Callable[..., RunningService]
) -> None:
    service = make_service(private_pg.url, executor="local", cycle_period=0.2, grace_period=1.0)
    admin = service.client()
    admin.create_project({"name": "a", "deserved_gpus": 4})
    admin.submit("a", {"name": "before", **JOB})
    pids = wait_for(lambda: running_pids(admin, "a", "before", 2), timeout=30, what="the first job to run")
    admin.submit("a", {"name": "short", "command": ["sleep", "6"]})  # it ends while the database is down
    wait_for(lambda: admin.job("a", "short").status == "running", timeout=30, what="the short job to run")
    with httpx.Client(base_url=service.url, timeout=10) as http:  # a hang would be a 10 s timeout
        stopped = time.monotonic()
        private_pg.stop()
        first: httpx.Response = wait_for(lambda: _unavailable(http), timeout=10, what="a 503")  # type: ignore[assignment]
        time_to_503 = time.monotonic() - stopped
        assert "database is unavailable" in first.json()["detail"] and first.headers["Retry-After"]
        refused, took = _answer(http, "POST", "/api/v1/projects/a/jobs", json={"name": "during", **JOB})
        assert refused.status_code == 503 and took < 5, refused.text
        ready, _ = _answer(http, "GET", "/readyz")
        assert ready.status_code == 503 and "unreachable" in ready.json()["database"]
        assert _answer(http, "GET", "/healthz")[0].status_code == 200
        answers = set()
        while time.monotonic() - stopped < OUTAGE_SECONDS:
            for path in ("/api/v1/jobs", "/api/v1/cluster", "/api/v1/events"):
                response, took = _answer(http, "GET", path)
                answers.add(response.status_code)
                assert took < 5, f"{path} took {took:.1f} s during the outage"
            time.sleep(0.2)
        assert answers == {503}

        private_pg.start()
        restarted = time.monotonic()
        wait_for(
            lambda: _answer(http, "GET", "/api/v1/jobs")[0].status_code == 200, timeout=30, what="the API"
        )
        api_back = time.monotonic() - restarted
        engine = service.services.engine
        cycles = engine.cycles
        wait_for(
            lambda: engine.is_leader and engine.cycles >= cycles + 3, timeout=30, what="the loop to resume"
        )
        loop_back = time.monotonic() - restarted
    print(
        f"\nPostgreSQL outage: first 503 after {time_to_503:.2f} s; after the restart the API answered in "
        f"{api_back:.2f} s and the loop led and cycled again in {loop_back:.2f} s"
    )

    assert admin.job("a", "before").status == "running" and running_pids(admin, "a", "before", 2) == pids
    assert sorted(j.name for j in admin.jobs(project="a")) == [
        "before",
        "short",
    ]  # the refused submit left nothing
    wait_for(lambda: admin.job("a", "short").status == "succeeded", what="the exit seen in the outage")
    admin.submit("a", {"name": "during", **JOB})
    wait_for(lambda: running_pids(admin, "a", "during", 2), timeout=30, what="the resubmitted job to run")
    decisions = sorted((e.kind, e.job) for e in admin.events(project="a"))
    assert decisions == [("finish", "short"), *(("start", j) for j in ("before", "during", "short"))]
    assert [_starts(service, j) for j in ("before", "during", "short")] == [2, 2, 1]  # each replica once
    for job in ("before", "during"):
        admin.delete_job("a", job)
    gone = [*pids, *(running_pids(admin, "a", "during", 2) or [])]  # type: ignore[misc]
    wait_for(
        lambda: not any(Path(f"/proc/{pid}").exists() for pid in gone), timeout=20, what="no process left"
    )


def _unavailable(http: httpx.Client) -> httpx.Response | None:
    response, took = _answer(http, "GET", "/api/v1/jobs")
    assert took < 5 and response.status_code in (200, 503), response.text
    return response if response.status_code == 503 else None
