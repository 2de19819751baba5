"""API trouble, as the Kubernetes executor meets it, against the fake API server with the real client.

Transient answers (500, 503, 429 with Retry-After, a 409 Conflict) are retried with backoff; a create
whose answer never came (a client timeout after the server made the pod) is retried, answered 409
AlreadyExists, and the existing pod is adopted: one pod, never two. A pod the API refuses (422) fails
the job with the API's words. An API down for longer than the retries fails the cycle, not the job: the
job starts once the API is back, with exactly one pod. GPUs that another workload's pod holds on a node are
not offered (the job waits, and starts once they are free); a pod placed on them anyway is rejected by the
kubelet, and its replica ends with the kubelet's reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from kubefake import FakeKubeApi
from kubefake.harness import IMAGE, NAMESPACE, kube_executor, wait_for
from servicekit import RunningService

from scheduler.executors.base import ExecutorError, LaunchSpec
from scheduler.executors.kube import names
from scheduler.executors.kube.retry import KubeApiError
from scheduler.executors.kubernetes import KubernetesExecutor


@pytest.fixture
def executor(api: FakeKubeApi, tmp_path: Path) -> Iterator[KubernetesExecutor]:
    # long enough that a loaded machine's slow answer is not a timeout the test did not inject
    built = kube_executor(api, tmp_path, request_timeout=2.0)
    built.adopt()
    yield built
    built.close()


def spec(replica_id: int = 1, index: int = 0) -> LaunchSpec:
    return LaunchSpec(replica_id, "a", "train", index, "gpu-0", (index,), ("python", "train.py"))


def test_5xx_and_429_are_retried_with_backoff(api: FakeKubeApi, executor: KubernetesExecutor) -> None:
    api.fail("POST", "/pods$", 500, times=2)
    api.fail("POST", "/services$", 503, times=1)
    executor.start(spec())
    assert len(api.pods(NAMESPACE)) == 1 and len(api.calls("POST", "/pods$")) == 3
    api.fail("POST", "/pods$", 429, retry_after=1, reason="TooManyRequests")
    executor.start(spec(2, 1))
    assert len(api.pods(NAMESPACE)) == 2
    assert executor.retrier.retries == 4


def test_a_create_that_timed_out_is_adopted_not_duplicated(
    api: FakeKubeApi, executor: KubernetesExecutor
) -> None:
    api.fail("POST", "/pods$", None, delay=3.0)  # the server makes the pod, the answer comes too late
    seen = executor.start(spec())
    assert seen.running
    posts = api.calls("POST", "/pods$")
    assert len(posts) == 2 and len(api.pods(NAMESPACE)) == 1  # the second create answered 409
    assert api.calls("GET", f"/pods/{names.pod_name('a', 'train', 0, 1)}$")  # read back and adopted


def test_a_conflict_on_delete_is_retried_and_a_missing_pod_is_fine(
    api: FakeKubeApi, executor: KubernetesExecutor
) -> None:
    executor.start(spec())
    name = names.pod_name("a", "train", 0, 1)
    wait_for(lambda: api.pod(NAMESPACE, name)["status"]["phase"] == "Running")
    api.fail("DELETE", f"/pods/{name}$", 409, reason="Conflict")
    executor.stop(1, grace=3)
    assert len(api.calls("DELETE", f"/pods/{name}$")) == 2
    wait_for(lambda: executor.observe()[1].exit_code == 143, what="SIGTERM's exit")
    executor.start(spec(2, 1))
    api.delete_pod_behind_tides_back(NAMESPACE, names.pod_name("a", "train", 1, 2))
    executor.stop(2, grace=3)  # 404: already gone, nothing to do
    wait_for(lambda: not executor.observe()[2].running)


def test_a_refused_pod_is_an_executor_error_and_an_unreachable_api_is_not(
    api: FakeKubeApi, executor: KubernetesExecutor
) -> None:
    api.fail("POST", "/pods$", 422, reason="Invalid")
    with pytest.raises(ExecutorError, match=r"Kubernetes refused pod .*injected by the test: 422"):
        executor.start(spec())
    api.fail("POST", "/pods$", 503, times=5)
    with pytest.raises(KubeApiError, match=r"create pod .*503.*tried 5 times"):
        executor.start(spec())
    assert not api.pods(NAMESPACE)
    imageless = KubernetesExecutor(
        replace(executor.settings, default_image=None), connection=executor.connection
    )
    try:
        with pytest.raises(ExecutorError, match="no default image"):
            imageless.start(spec())
    finally:
        imageless.close()


def test_an_api_outage_fails_cycles_not_jobs(
    api: FakeKubeApi, make_service: Callable[..., RunningService], tmp_path: Path
) -> None:
    executor = kube_executor(api, tmp_path, request_timeout=0.5)
    service = make_service(
        None, with_executor=executor, executor="kubernetes", cycle_period=0.1, default_image=IMAGE
    )
    client = service.client()
    client.create_project({"name": "a", "deserved_gpus": 4})
    api.fail("POST", "/pods$", 503, times=12)  # longer than one cycle's retries
    client.submit("a", {"name": "train", "workers": 1, "command": ["python", "train.py"]})
    wait_for(lambda: len(api.pods(NAMESPACE)) == 2, what="the pods once the API answers again")
    running = lambda: [r.status for r in client.job("a", "train").replicas] == ["running"] * 2  # noqa: E731
    wait_for(running, what="both replicas to run")
    assert client.job("a", "train").status == "running"  # the outage failed cycles, never the job
    assert sum(1 for r in api.requests if r.method == "POST" and r.path.endswith("/pods")) >= 13
    assert len(api.pods(NAMESPACE)) == 2


def foreign_pod(gpus: int, namespace: str = "other-team", name: str = "someone-else") -> dict[str, object]:
    """A pod another scheduler bound to gpu-0, holding ``gpus`` GPUs (requests = limits)."""
    resources = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "metadata": {"name": name, "namespace": namespace},
        "status": {"phase": "Running"},
        "spec": {"nodeName": "gpu-0", "containers": [{"name": "x", "image": "x", "resources": resources}]},
    }


def test_a_pod_the_kubelet_rejects_ends_its_replica_with_the_reason(
    api: FakeKubeApi, executor: KubernetesExecutor
) -> None:
    api.store.create("pods", "other-team", foreign_pod(4))  # every GPU of gpu-0 held by another workload
    wait_for(lambda: executor.nodes()[0].gpus == 0, what="the foreign pod's GPUs to be subtracted")
    executor.start(spec())  # the engine would not place it there; a pod placed anyway is rejected
    seen = wait_for(lambda: (o := executor.observe()[1]).exit_code is not None and o, what="the rejection")
    assert seen.detail is not None and "OutOfnvidia.com/gpu: Pod was rejected" in seen.detail


def test_gpus_that_other_workloads_hold_are_not_offered(
    api: FakeKubeApi, make_service: Callable[..., RunningService], tmp_path: Path
) -> None:
    api.store.create("pods", "other-team", foreign_pod(3))
    api.store.create("pods", "other-team", {**foreign_pod(1, name="done"), "status": {"phase": "Succeeded"}})
    executor = kube_executor(api, tmp_path)
    service = make_service(
        None, with_executor=executor, executor="kubernetes", cycle_period=0.1, default_image=IMAGE
    )
    client = service.client()
    client.create_project({"name": "a", "deserved_gpus": 4})
    wait_for(lambda: [n.gpus for n in client.cluster().nodes] == [1], what="gpu-0 to offer 1 GPU")
    client.submit("a", {"name": "train", "workers": 0, "gpus_per_replica": 2, "command": ["python", "t.py"]})
    time.sleep(1.0)  # ten cycles: it must wait, not be placed on GPUs the kubelet would refuse
    job = client.job("a", "train")
    assert job.status == "pending" and not api.pods(NAMESPACE) and not api.kubelets.rejected
    api.store.remove("pods", "other-team", "someone-else")
    wait_for(lambda: client.job("a", "train").status == "running", what="the job once the GPUs are free")
    wait_for(lambda: [r.status for r in client.job("a", "train").replicas] == ["running"], what="its pod")
    assert not api.kubelets.rejected


def test_without_a_node_selector_the_executor_warns_once(
    api: FakeKubeApi, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for selector, warned in ((None, 1), ("tide.dev/pool=gpu", 0)):
        caplog.clear()
        built = kube_executor(api, tmp_path, node_selector=selector)
        try:
            built.nodes()
            built.nodes()
        finally:
            built.close()
        assert sum("no --node-selector" in r.getMessage() for r in caplog.records) == warned
