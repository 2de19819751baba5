"""A pod the API server refuses touches its own job only; the engine's cycles go on; a stuck engine is unhealthy.

Against the fake API server with the real client, the refusals answered as the real API server words them
(403 ``Forbidden``): Pod Security admission's (the same body is refused again: the job fails with the
API's message) and a ResourceQuota's (it passes: the replica waits, its job's message says why, and it
starts once the quota has room). Meanwhile another job that fits starts and the cycle count keeps moving.
An API that refuses every create for longer than ``stall_periods`` cycle periods turns ``/healthz`` 503.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
from kubefake import FakeKubeApi
from kubefake.harness import IMAGE, NAMESPACE, kube_executor, wait_for
from servicekit import RunningService

from api.client.rest import TideClient
from scheduler.executors.kube import refusals

PSA = (
    'pods "{name}" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false '
    '(container "main" must set securityContext.allowPrivilegeEscalation=false)'
)
QUOTA = (
    'pods "{name}" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=1, '
    "used: requests.nvidia.com/gpu=4, limited: requests.nvidia.com/gpu=4"
)
JOB = {"workers": 0, "command": ["python", "train.py"]}


def serve(
    api: FakeKubeApi, make_service: Callable[..., RunningService], tmp_path: Path, **overrides: object
) -> TideClient:
    executor = kube_executor(api, tmp_path)
    executor.backoff = refusals.Backoff(initial=0.2, cap=0.5)
    service = make_service(
        None,
        with_executor=executor,
        executor="kubernetes",
        cycle_period=0.1,
        default_image=IMAGE,
        **overrides,
    )
    service.client().create_project({"name": "a", "deserved_gpus": 4})
    return service


def running(client: TideClient, job: str) -> bool:
    return [r.status for r in client.job("a", job).replicas] == ["running"]


def test_an_admission_refusal_fails_its_job_and_the_next_job_starts(
    api: FakeKubeApi, make_service: Callable[..., RunningService], tmp_path: Path
) -> None:
    client = serve(api, make_service, tmp_path).client()
    api.fail("POST", "/pods$", 403, reason="Forbidden", message=PSA, named="^tide-a-bad-", times=100)
    client.submit("a", {"name": "bad", **JOB})
    job = wait_for(
        lambda: (j := client.job("a", "bad")).status == "failed" and j, what="the refused job to fail"
    )
    assert job.message is not None and 'violates PodSecurity "restricted:latest"' in job.message
    cycles = client.health().cycles
    client.submit("a", {"name": "good", **JOB})
    wait_for(lambda: running(client, "good"), what="the second job to run")
    wait_for(lambda: client.health().cycles > cycles + 20, what="the cycles to go on")
    assert client.health().last_error is None


def test_a_quota_refusal_waits_with_the_reason_then_starts(
    api: FakeKubeApi, make_service: Callable[..., RunningService], tmp_path: Path
) -> None:
    client = serve(api, make_service, tmp_path).client()
    api.fail("POST", "/pods$", 403, reason="Forbidden", message=QUOTA, named="^tide-a-held-", times=3)
    client.submit("a", {"name": "held", **JOB})
    waiting = lambda: "exceeded quota: gpu-quota" in (client.job("a", "held").message or "")  # noqa: E731
    wait_for(waiting, what="the quota's words on the job")
    job = client.job("a", "held")
    assert job.status == "running" and job.message is not None and job.message.startswith("replica 0 waits")
    client.submit("a", {"name": "other", **JOB})
    wait_for(lambda: running(client, "other"), what="another job to run meanwhile")
    wait_for(lambda: running(client, "held"), what="the held job to start once the quota has room")
    job = client.job("a", "held")
    assert job.status == "running" and job.message is None
    creates = [r for r in api.calls("POST", "/pods$") if r.body and "-held-" in r.body["metadata"]["name"]]
    assert len(creates) == 4  # three refusals, with backoff between them, then the pod
    assert len([p for p in api.pods(NAMESPACE) if "-held-" in p["metadata"]["name"]]) == 1


def test_healthz_is_503_while_the_leading_engine_completes_no_cycle(
    api: FakeKubeApi, make_service: Callable[..., RunningService], tmp_path: Path
) -> None:
    service = serve(api, make_service, tmp_path, stall_periods=5)
    client, url = service.client(), service.url
    assert httpx.get(f"{url}/healthz").status_code == 200
    api.fail("POST", "/services$", 503, times=10_000)  # every cycle fails at the launch
    client.submit("a", {"name": "train", **JOB})
    answer = wait_for(
        lambda: (r := httpx.get(f"{url}/healthz")).status_code == 503 and r, what="/healthz to say 503"
    )
    assert answer.json()["status"] == "unavailable"  # the stall shows even while a cycle is still failing
    failed = lambda: (r := httpx.get(f"{url}/healthz")).status_code == 503 and r.json()["last_error"]  # noqa: E731
    assert "create service" in wait_for(failed, what="the failed cycle's error")
    api.faults.clear()
    wait_for(lambda: httpx.get(f"{url}/healthz").status_code == 200, what="/healthz to recover")
    wait_for(lambda: running(client, "train"), what="the job to run once the API answers")


def test_healthz_is_503_while_the_first_cycle_never_completes(
    api: FakeKubeApi, make_service: Callable[..., RunningService], tmp_path: Path
) -> None:
    api.fail("GET", "/api/v1/nodes$", 503, times=1_000_000)  # the engine cannot take over: no nodes
    service = make_service(
        None,
        with_executor=kube_executor(api, tmp_path),
        executor="kubernetes",
        cycle_period=0.1,
        default_image=IMAGE,
        stall_periods=5,
    )
    stuck = lambda: (r := httpx.get(f"{service.url}/healthz")).status_code == 503 and r.json()  # noqa: E731
    answer = wait_for(lambda: (a := stuck()) and a["last_error"] and a, what="/healthz to say 503")
    assert answer["cycles"] == 0 and "list nodes" in answer["last_error"]
    api.faults.clear()
    wait_for(lambda: httpx.get(f"{service.url}/healthz").status_code == 200, what="/healthz to recover")
