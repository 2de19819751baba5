"""The REST API end to end over HTTP, on SQLite and on PostgreSQL, with the in-memory executor.

What a user sees: projects and departments with live figures, jobs from submit to cancel with their
replicas, events with reasons, tokens and their limits, and a 4xx that says what to fix for bad input.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from servicekit import RunningService, wait_for

from api.client.rest import TideAPIError, TideClient

JOB = {"command": ["sleep", "60"]}


@pytest.fixture
def svc(db_url: str, make_service: Callable[..., RunningService]) -> RunningService:
    return make_service(db_url)


@pytest.fixture
def admin(svc: RunningService) -> TideClient:
    return svc.client()


def _error(call: Callable[[], object]) -> TideAPIError:
    with pytest.raises(TideAPIError) as info:
        call()
    return info.value


def test_project_lifecycle_with_live_figures(admin: TideClient) -> None:
    created = admin.create_project({"name": "a", "deserved_gpus": 2, "limit_gpus": 3})
    assert (created.deserved_gpus, created.limit_gpus, created.allocated_gpus) == (2, 3, 0)
    admin.submit("a", {"name": "train", "workers": 1, **JOB})
    project = wait_for(lambda: (p := admin.project("a")).allocated_gpus == 2 and p, what="a to hold 2 GPUs")
    assert project.fair_share_gpus == 2 and project.running_jobs == 1  # type: ignore[union-attr]
    updated = admin.update_project("a", {"deserved_gpus": 1, "limit_gpus": None})
    assert (updated.deserved_gpus, updated.limit_gpus) == (1, None)
    assert [p.name for p in admin.projects()] == ["a"]
    assert _error(lambda: admin.delete_project("a")).status_code == 409
    admin.delete_job("a", "train")
    admin.delete_project("a")
    assert _error(lambda: admin.project("a")).status_code == 404


def test_departments(admin: TideClient) -> None:
    admin.create_department({"name": "research", "deserved_gpus": 4})
    admin.create_project({"name": "a", "deserved_gpus": 2, "department": "research"})
    department = admin.department("research")
    assert department.projects == ["a"] and department.deserved_gpus == 4
    assert admin.project("a").department == "research"
    assert admin.update_department("research", {"limit_gpus": 8}).limit_gpus == 8
    assert _error(lambda: admin.delete_department("research")).status_code == 409
    admin.update_project("a", {"department": None})
    admin.delete_department("research")
    assert admin.departments() == []


def test_job_lifecycle(admin: TideClient, svc: RunningService) -> None:
    admin.create_project({"name": "a", "deserved_gpus": 4})
    job = admin.submit("a", {"name": "train", "workers": 2, "min_replicas": 2, "max_replicas": 3, **JOB})
    assert (job.status, job.min_replicas, job.max_replicas, job.workers) == ("pending", 2, 3, 2)
    running = wait_for(lambda: (j := admin.job("a", "train")).allocated_gpus == 3 and j, what="3 replicas")
    assert [(r.index, r.role) for r in running.replicas] == [(0, "master"), (1, "worker"), (2, "worker")]  # type: ignore[union-attr]
    assert {r.status for r in running.replicas} <= {"starting", "running"}  # type: ignore[union-attr]
    assert [j.name for j in admin.jobs(project="a", status="running")] == ["train"]
    assert "replica 0 of a/train" in admin.logs("a", "train", replica=0)
    cancelled = admin.delete_job("a", "train")
    assert cancelled.status == "cancelled"
    kinds = [e.kind for e in admin.events(project="a", job="train")]
    assert kinds[0] == "start" and kinds[-1] == "cancel"
    stopped = {"stopped"}  # Tide stopped them: never "succeeded"
    wait_for(lambda: {r.status for r in admin.job("a", "train").replicas} == stopped, what="replicas to stop")
    again = admin.submit("a", {"name": "train", **JOB})  # a finished job's name may be reused
    assert again.status == "pending"
    assert _error(lambda: admin.submit("a", {"name": "train", **JOB})).status_code == 409


def test_a_job_with_allowed_sizes_reads_back_the_explicit_list(admin: TideClient) -> None:
    admin.create_project({"name": "a", "deserved_gpus": 4})
    body = {"name": "steps", "min_replicas": 2, "max_replicas": 6, "allowed_replicas": {"step": 2}, **JOB}
    job = admin.submit("a", body)
    assert (job.workers, job.min_replicas, job.max_replicas, job.allowed_replicas) == (1, 2, 6, [2, 4, 6])
    running = wait_for(lambda: (j := admin.job("a", "steps")).allocated_gpus == 4 and j, what="4 of 4 GPUs")
    assert running.allowed_replicas == [2, 4, 6]  # type: ignore[union-attr]
    assert admin.submit("a", {"name": "plain", **JOB}).allowed_replicas is None


def test_pending_job_explains_itself(admin: TideClient) -> None:
    admin.create_project({"name": "a", "deserved_gpus": 4})
    admin.submit("a", {"name": "big", "workers": 3, **JOB})
    admin.submit("a", {"name": "next", "workers": 1, **JOB})
    waiting = wait_for(lambda: (j := admin.job("a", "next")).pending_reason and j, what="a pending reason")
    assert waiting.status == "pending" and waiting.queue_position == 1  # type: ignore[union-attr]
    # node figures are physical: the launch commits just after the plan that wrote the note
    wait_for(lambda: admin.cluster().allocated_gpus == 4, what="big's 4 replicas launched")


def test_cluster_and_events(admin: TideClient) -> None:
    admin.create_project({"name": "a", "deserved_gpus": 2})
    admin.submit("a", {"name": "one", **JOB})
    wait_for(lambda: admin.cluster().allocated_gpus == 1, what="one GPU in use")
    cluster = admin.cluster()
    assert (cluster.total_gpus, cluster.free_gpus, cluster.leader) == (4, 3, True)
    assert cluster.nodes[0].slots[0].role == "master" and cluster.projects[0].allocated_gpus == 1
    events = admin.events()
    assert events[-1].kind == "start" and events[-1].reason
    assert admin.events(since=events[-1].time.timestamp()) == []
    assert admin.events(after_id=events[-1].id - 1) == [events[-1]]


def test_auth_and_project_tokens(admin: TideClient, svc: RunningService) -> None:
    admin.create_project({"name": "a", "deserved_gpus": 2})
    admin.create_project({"name": "b", "deserved_gpus": 2})
    token = admin.create_token("a", "ci")
    assert token.token and token.token.startswith("tide_p_")
    assert [t.name for t in admin.tokens("a")] == ["ci"] and admin.tokens("a")[0].token is None
    mine = svc.client(token.token)
    assert mine.submit("a", {"name": "mine", **JOB}).name == "mine"
    assert _error(lambda: mine.submit("b", {"name": "theirs", **JOB})).status_code == 403
    assert _error(lambda: mine.create_project({"name": "c", "deserved_gpus": 0})).status_code == 403
    assert _error(lambda: mine.create_token("a")).status_code == 403
    assert [p.name for p in mine.projects()] == ["a", "b"]  # project tokens read everything
    assert _error(lambda: svc.client(None).projects()).status_code == 401
    assert _error(lambda: svc.client("wrong").projects()).status_code == 401
    assert httpx.get(f"{svc.url}/healthz").status_code == 200
    assert httpx.get(f"{svc.url}/readyz").json()["role"] == "leader"


BAD_JOBS = [
    ({"name": "Bad_Name", **JOB}, 422, "DNS-1123"),
    ({"name": "x", "min_replicas": 3, "max_replicas": 2, **JOB}, 422, "above max_replicas"),
    ({"name": "x", "workers": 5, "min_replicas": 1, "max_replicas": 3, **JOB}, 422, "within"),
    ({"name": "x", "gpus_per_replica": 1025, **JOB}, 422, "less than or equal to 1024"),
    ({"name": "x", "command": []}, 422, "command"),
    ({"name": "x", "env": {"1BAD": "v"}, **JOB}, 422, "environment variable"),
    ({"name": "x", "gpus": 1, **JOB}, 422, "gpus"),
    ({"name": "x", "allowed_replicas": [1, 3], "max_replicas": 2, **JOB}, 422, "3 is outside"),
    ({"name": "x", "allowed_replicas": {"step": 0}, **JOB}, 422, '{"step": N} with N from 1'),
    ({"name": "x", "allowed_replicas": "powers_of_three", **JOB}, 422, '"powers_of_two"'),
    (
        {"name": "x", "min_replicas": 3, "max_replicas": 4, "allowed_replicas": "powers_of_two", **JOB},
        422,
        "min_replicas (3) is not a power of two",
    ),
]


@pytest.mark.parametrize(("body", "status", "message"), BAD_JOBS)
def test_bad_jobs_get_a_4xx_that_says_what_to_fix(
    admin: TideClient, body: dict[str, object], status: int, message: str
) -> None:
    admin.create_project({"name": "a", "deserved_gpus": 2})
    error = _error(lambda: admin.submit("a", body))
    assert error.status_code == status and message in error.detail


def test_a_job_bigger_than_todays_cluster_is_accepted_and_waits_taking_nothing(admin: TideClient) -> None:
    """Nodes come and go (autoscalers, repairs): a job that does not fit the 4 GPUs the cluster has today is
    accepted, kept pending with a reason that says what it would need (also sent back as a Warning header at
    submit), and takes nothing from the jobs that run meanwhile."""
    admin.create_project({"name": "a", "deserved_gpus": 4})
    admin.submit("a", {"name": "small", **JOB})
    wait_for(lambda: admin.job("a", "small").status == "running", what="small to run")
    wide, warnings = admin.submit_warned("a", {"name": "wide", "workers": 4, "priority": 10, **JOB})
    expected = (
        "does not fit today's cluster: its 5 replicas of 1 GPU each need one node's room and the schedulable "
        "nodes hold at most 4; it would need room for 1 replica more, and waits for nodes without taking GPUs "
        "from anyone"
    )
    assert (wide.status, wide.pending_reason, warnings) == ("pending", expected, [expected])
    big, warnings = admin.submit_warned("a", {"name": "big", "gpus_per_replica": 8, **JOB})
    assert big.pending_reason == warnings[0] and "it would need a node of 8 GPUs" in warnings[0]
    admin.submit("a", {"name": "after", **JOB})
    wait_for(lambda: admin.job("a", "after").status == "running", what="a later job to run")
    assert admin.job("a", "wide").pending_reason == expected and admin.job("a", "small").status == "running"
    _, warnings = admin.submit_warned("a", {"name": "fits", **JOB})
    assert warnings == []


def test_bad_projects_and_requests(admin: TideClient, svc: RunningService) -> None:
    cases: list[tuple[Callable[[], object], int, str]] = [
        (lambda: admin.create_project({"name": "a", "deserved_gpus": -1}), 422, "greater than or equal"),
        (lambda: admin.create_project({"name": "a", "deserved_gpus": 4, "limit_gpus": 2}), 422, "below"),
        (lambda: admin.create_project({"name": "a", "deserved_gpus": 1, "department": "nope"}), 422, "nope"),
        (lambda: admin.submit("nope", {"name": "x", **JOB}), 404, "no project named 'nope'"),
        (lambda: admin.job("nope", "x"), 404, "no project"),
    ]
    for call, status, message in cases:
        error = _error(call)
        assert error.status_code == status and message in error.detail, error
    admin.create_project({"name": "a", "deserved_gpus": 2})
    assert _error(lambda: admin.create_project({"name": "a", "deserved_gpus": 2})).status_code == 409
    assert _error(lambda: admin.update_project("a", {"limit_gpus": 1})).status_code == 422
    headers = {"Authorization": "Bearer test-admin-token", "Content-Type": "application/json"}
    huge = httpx.post(f"{svc.url}/api/v1/projects", content=b"x" * (2 << 20), headers=headers)
    assert huge.status_code == 413
    chunks = (b"x" * 65536 for _ in range(40))  # streamed: no Content-Length
    streamed = httpx.post(f"{svc.url}/api/v1/projects", content=chunks, headers=headers)
    assert streamed.status_code == 413 and "too large" in streamed.json()["detail"]
    broken = httpx.post(f"{svc.url}/api/v1/projects", content=b"{not json", headers=headers)
    assert broken.status_code == 422
    huge = 10**30  # beyond what the database's integers hold: refused, not a 500
    assert httpx.get(f"{svc.url}/api/v1/events?after_id={huge}", headers=headers).status_code == 422
    assert httpx.delete(f"{svc.url}/api/v1/projects/a/tokens/{huge}", headers=headers).status_code == 422


def test_unchanged_reads_cost_a_304(admin: TideClient, svc: RunningService) -> None:
    admin.create_project({"name": "a", "deserved_gpus": 2})
    headers = {"Authorization": "Bearer test-admin-token"}
    first = httpx.get(f"{svc.url}/api/v1/projects", headers=headers)
    tag = first.headers["etag"]
    again = httpx.get(f"{svc.url}/api/v1/projects", headers={**headers, "If-None-Match": tag})
    assert (again.status_code, again.content, again.headers["etag"]) == (304, b"", tag)
    admin.update_project("a", {"deserved_gpus": 3})
    changed = httpx.get(f"{svc.url}/api/v1/projects", headers={**headers, "If-None-Match": tag})
    assert changed.status_code == 200 and changed.json()[0]["deserved_gpus"] == 3


def test_jobs_come_in_pages_with_the_total(admin: TideClient, svc: RunningService) -> None:
    admin.create_project({"name": "a", "deserved_gpus": 2})
    admin.create_project({"name": "b", "deserved_gpus": 2})
    for i in range(5):
        admin.submit("a" if i < 3 else "b", {"name": f"j{i}", **JOB})
    everything = [(j.project, j.name) for j in admin.jobs()]
    assert everything == [("a", "j0"), ("a", "j1"), ("a", "j2"), ("b", "j3"), ("b", "j4")]
    page, total = admin.jobs_page(limit=2, offset=1)
    assert ([(j.project, j.name) for j in page], total) == (everything[1:3], 5)
    page, total = admin.jobs_page("a", limit=2, offset=2)
    assert ([j.name for j in page], total) == (["j2"], 3)
    assert admin.jobs_page(limit=2, offset=10) == ([], 5)
    assert admin.jobs_page(status="succeeded", limit=None) == ([], 0)
    headers = {"Authorization": "Bearer test-admin-token"}
    for bad in ("limit=0", "limit=10001", "offset=-1", "limit=many"):
        answer = httpx.get(f"{svc.url}/api/v1/jobs?{bad}", headers=headers)
        assert answer.status_code == 422, bad
    tag = httpx.get(f"{svc.url}/api/v1/jobs?limit=1", headers=headers).headers["etag"]
    admin.submit("b", {"name": "j5", **JOB})  # the first page is the same; the total is not
    again = httpx.get(f"{svc.url}/api/v1/jobs?limit=1", headers={**headers, "If-None-Match": tag})
    assert (again.status_code, again.headers["x-total-count"]) == (200, "6")


def test_jobs_page_on_the_server_with_a_cursor(admin: TideClient, svc: RunningService) -> None:
    """A script walks the jobs a page at a time: no job is skipped or repeated when jobs are submitted and
    deleted between pages, a filter by project and statuses pages too, and a cursor used with other
    filters, a made-up cursor or a cursor with an offset get a 422 that says what to do."""
    admin.create_project({"name": "a", "deserved_gpus": 2})
    admin.create_project({"name": "b", "deserved_gpus": 2})
    for i in range(7):
        admin.submit("a" if i < 4 else "b", {"name": f"j{i}", **JOB})
    first = admin.job_page(limit=3)
    assert ([j.name for j in first.jobs], first.total) == (["j0", "j1", "j2"], 7)
    assert first.next_cursor is not None
    admin.submit("a", {"name": "late", **JOB})  # after the page that ended in a: listed on a later page
    admin.delete_job("a", "j0")  # cancelled, still listed (already read)
    second = admin.job_page(limit=3, cursor=first.next_cursor)
    assert [j.name for j in second.jobs] == ["j3", "late", "j4"]
    third = admin.job_page(limit=3, cursor=second.next_cursor)
    assert ([j.name for j in third.jobs], third.next_cursor) == (["j5", "j6"], None)
    assert [j.name for j in admin.jobs()] == ["j0", "j1", "j2", "j3", "late", "j4", "j5", "j6"]  # walks

    active = admin.job_page("a", ["pending", "running"], limit=2)
    assert (len(active.jobs), active.total) == (2, 4)  # a's j0 is cancelled
    rest = admin.job_page("a", ["running", "pending"], limit=2, cursor=active.next_cursor)  # same set
    assert [j.name for j in active.jobs + rest.jobs] == ["j1", "j2", "j3", "late"]
    assert rest.next_cursor is None
    everything, total = admin.jobs_page(limit=None, offset=6)  # offset, then the cursor
    assert ([j.name for j in everything], total) == (["j5", "j6"], 8)
    assert admin.job_page("a", "cancelled").total == 1

    headers = {"Authorization": "Bearer test-admin-token"}
    jobs = f"{svc.url}/api/v1/jobs"
    refused = {
        f"project=b&limit=1&cursor={first.next_cursor}": "other filters",
        f"order=line&limit=1&cursor={first.next_cursor}": "other filters or another order",
        "cursor=not-a-cursor": "not a cursor this service gave out",
        f"cursor={first.next_cursor}&offset=2": "cannot be given with cursor",
        f"cursor={'x' * 3000}": "at most 2048 characters",
        "status=lost": "status",
        "order=newest": "order",
        "limit=10001": "limit",
    }
    for query, words in refused.items():
        answer = httpx.get(f"{jobs}?{query}", headers=headers)
        assert answer.status_code == 422 and words in answer.json()["detail"], (query, answer.text)


def test_docs_and_placeholder(svc: RunningService) -> None:
    assert httpx.get(f"{svc.url}/docs").status_code == 200
    schema = httpx.get(f"{svc.url}/openapi.json").json()
    assert "/api/v1/projects/{project}/jobs" in schema["paths"]
    assert "Tide" in httpx.get(f"{svc.url}/").text


def test_a_job_reports_its_checkpoints(admin: TideClient, svc: RunningService) -> None:
    """``POST .../checkpointed``: the newest report is kept and shown; bad reports get a 4xx that says why."""
    admin.create_project({"name": "a", "deserved_gpus": 2})
    admin.create_project({"name": "b", "deserved_gpus": 2})
    job = admin.submit("a", {"name": "train", **JOB})
    assert job.checkpointed_at is None
    submitted = job.created_at
    reported = admin.checkpointed("a", "train", at=submitted).checkpointed_at
    assert reported is not None and abs((reported - submitted).total_seconds()) < 1e-3
    time.sleep(0.01)
    now = admin.checkpointed("a", "train")  # no time: now, by the service's clock
    assert now.checkpointed_at is not None and now.checkpointed_at > submitted
    older = admin.checkpointed("a", "train", at=reported)
    assert older.checkpointed_at == now.checkpointed_at, (
        "a late report of an older checkpoint changes nothing"
    )
    assert admin.job("a", "train").checkpointed_at == now.checkpointed_at
    assert [j.checkpointed_at for j in admin.jobs(project="a")] == [now.checkpointed_at]

    future = datetime.now(UTC) + timedelta(hours=1)
    cases: list[tuple[Callable[[], object], int, str]] = [
        (lambda: admin.checkpointed("a", "train", at=future), 422, "after the service's clock"),
        (lambda: admin.checkpointed("a", "train", at=submitted - timedelta(hours=1)), 422, "before job"),
        (lambda: admin.checkpointed("a", "nope"), 404, "no job 'nope'"),
        (lambda: svc.client(admin.create_token("b").token).checkpointed("a", "train"), 403, "project"),
    ]
    for call, status, message in cases:
        error = _error(call)
        assert error.status_code == status and message in error.detail, error
    headers = {"Authorization": "Bearer test-admin-token"}
    url = f"{svc.url}/api/v1/projects/a/jobs/train/checkpointed"
    assert httpx.post(url, json={"at": "yesterday"}, headers=headers).status_code == 422
    assert httpx.post(url, json={"when": 5}, headers=headers).status_code == 422
    admin.delete_job("a", "train")
    error = _error(lambda: admin.checkpointed("a", "train"))
    assert error.status_code == 409 and "cancelled" in error.detail
