"""The polled reads' cache (``api.server.cache``) never hides a change: a read right after a write sees it.

Through the real app over HTTP with no waiting between write and read: a submitted job is in ``/jobs`` and
its project's pending figure in ``/cluster``; a deleted one is cancelled; a new project is in ``/cluster``.
Unchanged reads keep their ETag (a 304), and a client varying query strings cannot grow the cache.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from servicekit import ADMIN, RunningService

HEADERS = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def svc(make_service: Callable[..., RunningService]) -> RunningService:
    return make_service(None, cycle_period=0.05)


def test_a_read_right_after_a_write_sees_it(svc: RunningService) -> None:
    client = svc.client()
    for round_ in range(8):  # while the loop cycles: each read races the cycles, never a write
        name = f"p{round_}"
        client.create_project({"name": name, "deserved_gpus": 0})
        assert name in [p.name for p in client.cluster().projects]
        client.submit(name, {"name": "job", "command": ["sleep", "60"]})
        assert [j.name for j in client.jobs(project=name)] == ["job"]
        cluster = client.cluster()
        seen = next(p for p in cluster.projects if p.name == name)
        assert seen.pending_jobs + seen.running_jobs == 1  # pending, or started by a cycle meanwhile
        assert client.delete_job(name, "job").status == "cancelled"
        assert [j.status for j in client.jobs(project=name)] == ["cancelled"]


def test_unchanged_reads_keep_their_tag(svc: RunningService) -> None:
    svc.services.engine.stop()  # no cycles: nothing changes between the two reads
    first = httpx.get(f"{svc.url}/api/v1/jobs", headers=HEADERS)
    again = httpx.get(f"{svc.url}/api/v1/jobs", headers={**HEADERS, "If-None-Match": first.headers["etag"]})
    assert again.status_code == 304


def test_query_strings_cannot_grow_the_cache(svc: RunningService) -> None:
    svc.services.engine.stop()
    with httpx.Client(base_url=f"{svc.url}/api/v1", headers=HEADERS) as http:
        for limit in range(1, 80):
            assert http.get(f"/events?limit={limit}").status_code == 200
            assert http.get(f"/jobs?project=nope{limit}").status_code == 404
    cache = svc.services.views
    assert len(cache._views) <= cache.max_entries and len(cache._locks) <= cache.max_entries
