"""``GET /metrics`` through the real app: the seed scenario's figures, counters, auth and request ids.

On one node of 4 GPUs, projects a and b deserve 2 each; a's elastic job borrows all 4; b submits two jobs
and reclaims 2. The scrape must then say what the API says: a holds 2, b holds 2, a shrink for reclaim was
counted, the cycles were timed, and the submits were timed under their route template. /metrics needs a
token (admin, project, or the metrics token, which reads nothing else) and carries no secret.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from servicekit import ADMIN, RunningService, wait_for

from scheduler.core.model import Node
from scheduler.executors.base import ExecutorError, LaunchSpec, Observation
from scheduler.executors.fake import FakeExecutor

METRICS_TOKEN = "metrics-scrape-token"
JOB = {"command": ["sleep", "600"]}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str, token: str | None = ADMIN) -> Samples:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    answer = httpx.get(f"{url}/metrics", headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def gauge(url: str, name: str, **labels: str) -> float:
    return value(scrape(url), name, **labels)


@pytest.fixture
def svc(db_url: str, make_service: Callable[..., RunningService]) -> RunningService:
    return make_service(db_url, metrics_token=METRICS_TOKEN)


def test_metrics_follow_the_seed_scenario(svc: RunningService) -> None:
    client = svc.client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    client.create_project({"name": "b", "deserved_gpus": 2})
    client.submit("a", {"name": "elastic", "workers": 3, "min_replicas": 2, "max_replicas": 4, **JOB})
    a = {"project": "a", "department": ""}
    wait_for(lambda: gauge(svc.url, "tide_project_allocated_gpus", **a) == 4, what="a to hold 4 GPUs")
    before = scrape(svc.url)
    shrinks = value(before, "tide_decisions_total", kind="shrink", cause="reclaim")

    client.submit("b", {"name": "one", **JOB})
    client.submit("b", {"name": "two", **JOB})
    b = {"project": "b", "department": ""}
    wait_for(lambda: gauge(svc.url, "tide_project_allocated_gpus", **b) == 2, what="b to hold 2 GPUs")
    cycles = svc.services.engine.cycles
    after = scrape(svc.url)
    assert value(after, "tide_project_allocated_gpus", **a) == client.project("a").allocated_gpus == 2
    assert value(after, "tide_project_deserved_gpus", **b) == 2
    assert value(after, "tide_project_fair_share_gpus", **a) == client.project("a").fair_share_gpus
    assert value(after, "tide_project_pending_gpus", **b) == 0
    reclaims = [e for e in client.events(project="a") if (e.kind, e.cause) == ("shrink", "reclaim")]
    assert reclaims  # one shrink, or two when b's submits landed in separate cycles
    assert value(after, "tide_decisions_total", kind="shrink", cause="reclaim") == shrinks + len(reclaims)
    assert value(after, "tide_decisions_total", kind="start", cause="fair-share") == 3
    assert value(after, "tide_jobs", project="b", status="running") == 2
    assert value(after, "tide_jobs", project="a", status="failed") == 0
    assert value(after, "tide_cluster_gpus", schedulable="true") == 4
    assert value(after, "tide_leader") == value(after, "tide_state_up") == 1
    assert value(after, "tide_cycle_duration_seconds_count") >= cycles > 0
    # the snapshot kept in memory: its read and the plan timed apart, its first check found no drift
    for phase in ("observe", "read", "plan", "persist", "forecast", "apply"):
        assert value(after, "tide_cycle_phase_seconds_count", phase=phase) >= cycles, phase
    assert value(after, "tide_state_checks_total") >= 1 and value(after, "tide_state_drift_total") == 0
    checks = value(after, "tide_state_checks_total")
    assert value(after, "tide_cycle_phase_seconds_count", phase="state_check") == checks  # timed apart
    submits = {"route": "/api/v1/projects/{project}/jobs", "method": "POST", "status": "201"}
    assert value(after, "tide_http_request_duration_seconds_count", **submits) == 3
    assert value(after, "tide_executor_errors_total", operation="start") == 0
    # each shrink restarted the elastic job: its events and the counter say how much work that cost
    lost = sum(e.lost_gpu_seconds or 0.0 for e in reclaims)
    assert lost > 0 and all("loses" in e.reason for e in reclaims)
    counted = value(after, "tide_preemption_lost_gpu_seconds_total", project="a")
    assert counted == pytest.approx(lost, abs=0.05 * len(reclaims))  # events keep 0.1 GPU-s


def test_a_reclaim_takes_the_borrower_that_checkpointed_last(svc: RunningService) -> None:
    """R5's least-work-lost tie-break through the service: a's four equal 1-GPU jobs borrow b's quota; the
    oldest reports a checkpoint; b's job then takes one GPU back, and the oldest goes (it loses the least),
    not the newest. Its evict event and /metrics say what it lost."""
    client = svc.client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    client.create_project({"name": "b", "deserved_gpus": 2})
    for name in ("j1", "j2", "j3", "j4"):
        client.submit("a", {"name": name, **JOB})
    a = {"project": "a", "department": ""}
    wait_for(lambda: gauge(svc.url, "tide_project_allocated_gpus", **a) == 4, what="a to hold 4 GPUs")
    time.sleep(0.5)  # every job of a has half a second of work to lose
    client.checkpointed("a", "j1")
    client.submit("b", {"name": "one", **JOB})
    wait_for(lambda: client.job("b", "one").status == "running", what="b's job to start")
    evicts = [e for e in client.events(project="a") if e.kind == "evict"]
    assert [(e.job, e.cause) for e in evicts] == [("j1", "reclaim")]
    lost = evicts[0].lost_gpu_seconds
    # the time since its checkpoint: less than any other job's half second of work (and more)
    assert lost is not None and lost >= 0
    counted = value(scrape(svc.url), "tide_preemption_lost_gpu_seconds_total", project="a")
    assert counted == pytest.approx(lost, abs=0.05)


def test_a_pending_job_shows_in_the_pending_gauge(svc: RunningService) -> None:
    client = svc.client()
    client.create_project({"name": "a", "deserved_gpus": 4})
    client.submit("a", {"name": "big", "workers": 3, **JOB})
    client.submit("a", {"name": "waits", "workers": 1, **JOB})
    labels = {"project": "a", "department": ""}
    wait_for(lambda: gauge(svc.url, "tide_project_allocated_gpus", **labels) == 4, what="a to hold 4")
    samples = scrape(svc.url)
    assert value(samples, "tide_project_pending_gpus", **labels) == 2
    assert value(samples, "tide_jobs", project="a", status="pending") == 1


def test_metrics_need_a_token_and_carry_no_secret(svc: RunningService) -> None:
    client = svc.client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    secret = client.create_token("a", "ci").token
    assert secret is not None
    client.submit("a", {"name": "job", "env": {"API_KEY": "hunter2-do-not-leak"}, **JOB})
    assert httpx.get(f"{svc.url}/metrics").status_code == 401
    assert httpx.get(f"{svc.url}/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    text = httpx.get(f"{svc.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).text
    assert "tide_project_deserved_gpus" in text
    for leak in (ADMIN, METRICS_TOKEN, secret, "hunter2", "sleep"):
        assert leak not in text
    assert scrape(svc.url, secret)  # a project token may scrape too
    other = httpx.get(f"{svc.url}/api/v1/projects", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert other.status_code == 401  # the metrics token reads nothing else


class RefusingExecutor(FakeExecutor):
    """Nodes that refuse every launch, as a full or broken node would."""

    def start(self, spec: LaunchSpec) -> Observation:
        raise ExecutorError(f"node {spec.node} refuses replica {spec.index}")


def test_executor_errors_are_counted(db_url: str, make_service: Callable[..., RunningService]) -> None:
    service = make_service(db_url, with_executor=RefusingExecutor((Node(name="node-0", gpus=4),)))
    client = service.client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    client.submit("a", {"name": "doomed", **JOB})
    wait_for(lambda: client.job("a", "doomed").status == "failed", what="the job to fail")
    assert gauge(service.url, "tide_executor_errors_total", operation="start") == 1
    assert gauge(service.url, "tide_jobs", project="a", status="failed") == 1


def test_every_answer_carries_a_request_id(svc: RunningService) -> None:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    mine = httpx.get(f"{svc.url}/api/v1/projects", headers={**headers, "X-Request-ID": "trace-42.a:b_c"})
    assert mine.headers["x-request-id"] == "trace-42.a:b_c"
    forged = httpx.get(f"{svc.url}/api/v1/projects", headers={**headers, "X-Request-ID": "x\tinjected y"})
    fresh = forged.headers["x-request-id"]
    assert fresh != "x\tinjected y" and len(fresh) == 32 and fresh.isalnum()
    missing = httpx.get(f"{svc.url}/healthz")
    assert len(missing.headers["x-request-id"]) == 32
    assert httpx.get(f"{svc.url}/no/such/page").headers["x-request-id"]
    samples = scrape(svc.url)
    assert value(
        samples, "tide_http_request_duration_seconds_count", route="/healthz", method="GET", status="200"
    )
