"""Leader election with a Kubernetes Lease (``--leader-election lease``), against the fake API server.

The fake serves Leases as the API server does (a replace with a stale resourceVersion is a 409, one
without is a 422). Two candidates: one holds, the other waits; the holder released, the other takes over at
its next try; the holder gone silent, the other takes over once the lease it observed went unrenewed for
the lease's duration, and the silent one has stepped down before that. Then two real ``tide serve``
processes (kubernetes executor, one fake API server, one database, each "in a pod" with POD_NAME): exactly
one leads and its pod alone carries ``tide.dev/leader=true`` (what the Service ``tide`` selects); a job's
log reads through the standby too (from the API server); the leader is SIGKILLed and the standby leads
within the lease's duration, with never two leaders at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubefake import FakeKubeApi
from kubefake.harness import kube_executor, wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from serveargv import serve_argv
from typer.testing import CliRunner

from api.client.cli.main import app
from api.client.rest import TideClient
from scheduler.elastic.agent.ports import free_port
from scheduler.engine.leader import LEADER_LABEL, LeaseLeadership, LeaseTiming
from scheduler.executors.base import LaunchSpec
from scheduler.executors.kube.config import KubeSettings, connect

TOKEN = "lease-election-test-token"
SERVICE_NS = "tide"
JOBS_NS = "tide-jobs"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{SERVICE_NS}/leases"


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    fake = FakeKubeApi().start()
    fake.add_node("gpu-0", 4)
    yield fake
    fake.stop()


@pytest.fixture
def kube(api: FakeKubeApi, tmp_path: Path) -> client.ApiClient:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig", namespace=SERVICE_NS)
    return connect(KubeSettings(kubeconfig=str(kubeconfig))).api_client


def _lease(holder: str, rv: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "x", "namespace": SERVICE_NS}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"metadata": meta, "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}}


def test_the_fake_serves_leases_with_optimistic_concurrency(kube: client.ApiClient) -> None:
    leases = client.CoordinationV1Api(kube)
    created = leases.create_namespaced_lease(SERVICE_NS, client.V1Lease.model_validate(_lease("a")))
    rv = str(created.metadata.resource_version)
    replaced = leases.replace_namespaced_lease(
        "x", SERVICE_NS, client.V1Lease.model_validate(_lease("b", rv))
    )
    assert replaced.spec.holder_identity == "b" and replaced.metadata.uid == created.metadata.uid
    with pytest.raises(ApiException) as stale:  # a second writer that read the same version
        leases.replace_namespaced_lease("x", SERVICE_NS, client.V1Lease.model_validate(_lease("c", rv)))
    assert stale.value.status == 409 and "the object has been modified" in str(stale.value.body)
    with pytest.raises(ApiException) as blind:
        leases.replace_namespaced_lease("x", SERVICE_NS, client.V1Lease.model_validate(_lease("c")))
    assert blind.value.status == 422 and "must be specified for an update" in str(blind.value.body)
    with pytest.raises(ApiException) as taken:
        leases.create_namespaced_lease(SERVICE_NS, client.V1Lease.model_validate(_lease("c")))
    assert taken.value.status == 409
    assert leases.read_namespaced_lease("x", SERVICE_NS).spec.holder_identity == "b"


FAST = LeaseTiming(lease_duration=2.0, renew_deadline=1.2, retry_period=0.2)  # a Lease counts whole seconds


def _spec(kube: client.ApiClient) -> Any:
    return client.CoordinationV1Api(kube).read_namespaced_lease("tide-leader", SERVICE_NS).spec


def test_one_candidate_holds_the_lease_and_a_release_hands_it_over(kube: client.ApiClient) -> None:
    a = LeaseLeadership(kube, SERVICE_NS, holder="a", timing=FAST)
    b = LeaseLeadership(kube, SERVICE_NS, holder="b", timing=FAST)
    try:
        assert a.holds() and not b.holds()
        time.sleep(FAST.lease_duration * 1.5)  # a renews: b never sees an expired lease
        assert a.holds() and not b.holds()
        assert (_spec(kube).holder_identity, _spec(kube).lease_transitions) == ("a", 0)
        a.release()
        assert _spec(kube).holder_identity in ("", "b")  # released (b's next try may already have taken it)
        wait_for(b.holds, timeout=FAST.retry_period * 5, what="b to take the released lease")
        assert not a.holds()
        assert (_spec(kube).holder_identity, _spec(kube).lease_transitions) == ("b", 1)
    finally:
        a.release()
        b.release()


def test_a_silent_holder_steps_down_before_the_standby_takes_over(kube: client.ApiClient) -> None:
    a = LeaseLeadership(kube, SERVICE_NS, holder="a", timing=FAST)
    b = LeaseLeadership(kube, SERVICE_NS, holder="b", timing=FAST)
    overlap: list[float] = []
    try:
        assert a.holds() and not b.holds()
        a._stop.set()  # a stops renewing (a wedged or partitioned leader) but does not release
        silent = time.monotonic()
        while not b.holds():
            if a.holds():
                assert time.monotonic() - silent < FAST.renew_deadline + FAST.retry_period
            time.sleep(0.02)
            assert time.monotonic() - silent < FAST.lease_duration + 3 * FAST.retry_period + 1, "b never led"
        took = time.monotonic() - silent
        if a.holds():
            overlap.append(took)
        assert overlap == [] and took >= FAST.lease_duration * 0.9
        assert _spec(kube).holder_identity == "b"
    finally:
        b.release()


def _serve(tmp_path: Path, api: FakeKubeApi, name: str, db_url: str, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIDE_", "KUBE", "POD_"))}
    env.update(
        TIDE_DATA_DIR=str(tmp_path / name), TIDE_ADMIN_TOKEN=TOKEN, POD_NAME=name, POD_NAMESPACE=SERVICE_NS
    )
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig", namespace=SERVICE_NS)
    argv = serve_argv(port)
    argv += ["--executor", "kubernetes", "--kubeconfig", str(kubeconfig), "--namespace", JOBS_NS]
    argv += ["--database-url", db_url, "--default-image", "img:1", "--cycle-period", "0.2"]
    argv += ["--leader-election", "lease", "--lease-duration", "3"]
    with (tmp_path / f"{name}.log").open("ab") as out:  # read it when the test fails
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


def _role(url: str) -> str | None:
    try:
        return str(httpx.get(f"{url}/healthz", timeout=1).json()["role"])
    except (httpx.TransportError, ValueError):
        return None


def _service_pod(api: FakeKubeApi, name: str) -> None:
    """The pod a Deployment would have made for this replica (the fake has no controllers)."""
    pod = {"metadata": {"name": name, "labels": {"app": "tide"}}, "spec": {"containers": [{"name": "tide"}]}}
    pod["status"] = {"phase": "Running"}
    api.store.create("pods", SERVICE_NS, pod)


def _log(tide: TideClient) -> str | None:
    try:
        return tide.logs("a", "train", replica=0)
    except Exception:  # not yet: 404 until the pod has a log
        return None


def _holder(api: FakeKubeApi) -> str:
    lease = api.store.get("leases", SERVICE_NS, "tide-leader")
    return str(lease["spec"].get("holderIdentity") or "")


def _labelled(api: FakeKubeApi) -> list[str]:
    return sorted(p["metadata"]["name"] for p in api.pods(SERVICE_NS, f"{LEADER_LABEL}=true"))


@pytest.mark.slow
def test_killing_the_lease_holder_hands_over_within_the_lease_duration(
    api: FakeKubeApi, tmp_path: Path, db_url: str
) -> None:
    names, ports = ("tide-a", "tide-b"), (free_port(), free_port())
    urls = {n: f"http://127.0.0.1:{p}" for n, p in zip(names, ports, strict=True)}
    for name in names:
        _service_pod(api, name)
    processes = {"tide-a": _serve(tmp_path, api, "tide-a", db_url, ports[0])}
    roles: list[tuple[float, dict[str, str | None]]] = []
    watching = threading.Event()

    def watch() -> None:  # never two leaders: sampled all along
        while not watching.is_set():
            roles.append((time.monotonic(), {n: _role(u) for n, u in urls.items()}))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        wait_for(lambda: _role(urls["tide-a"]) == "leader", timeout=180, what="tide-a to lead")
        processes["tide-b"] = _serve(tmp_path, api, "tide-b", db_url, ports[1])
        wait_for(lambda: _role(urls["tide-b"]) == "standby", timeout=180, what="tide-b to stand by")
        watcher.start()
        wait_for(lambda: _labelled(api) == ["tide-a"], timeout=10, what="the leader's label")
        with TideClient(urls["tide-b"], TOKEN) as standby:
            standby.create_project({"name": "a", "deserved_gpus": 4})
            standby.submit("a", {"name": "train", "workers": 1, "command": ["python", "t.py"]})
            wait_for(lambda: len(api.pods(JOBS_NS)) == 2, timeout=30, what="the leader to make two pods")
            text = wait_for(lambda: _log(standby), timeout=30, what="a log")
            assert "fake kubelet: started" in text  # through the standby: from the API server

        processes["tide-a"].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        processes["tide-a"].wait(timeout=10)
        holder = wait_for(
            lambda: _holder(api).startswith("tide-b"), timeout=15, what="tide-b to hold the Lease"
        )
        took_lease = time.monotonic() - killed
        wait_for(lambda: _role(urls["tide-b"]) == "leader", timeout=15, what="tide-b to lead")
        led = time.monotonic() - killed
        print(f"\nlease holder killed (SIGKILL): the standby held the Lease {took_lease:.2f} s later and led "
              f"(adopted, first cycle) {led:.2f} s later; lease 3 s, renewed every 0.4 s")  # fmt: skip
        # not before the lease ran out; within it, its renewals and a loaded machine's slack
        assert holder and 3 * 0.8 <= took_lease <= 3 + 2 * 0.4 + 2.0
        # the dead pod keeps its label (its container is gone; a restarted one removes it at its first
        # turn): the Service skips it because it is not Ready; the new leader's pod has the label
        wait_for(lambda: "tide-b" in _labelled(api), timeout=10, what="the new leader's label")
        assert len(api.pods(JOBS_NS)) == 2  # adopted, not made again
    finally:
        watching.set()
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
    assert roles, "no samples"
    assert all(list(sample.values()).count("leader") <= 1 for _, sample in roles), roles


def test_serve_refuses_an_election_it_cannot_run(tmp_path: Path) -> None:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith(("TIDE_", "KUBE", "POD_"))}
    env.update(TIDE_DATA_DIR=str(tmp_path / "data"), TIDE_ADMIN_TOKEN=TOKEN)
    for args, said in (
        (["--leader-election", "zookeeper"], "unknown election 'zookeeper'; available: postgres, lease"),
        (["--leader-election", "lease"], "--leader-election lease only apply to --executor kubernetes"),
        (["--lease-duration", "1"], "--lease-duration"),
    ):
        result = CliRunner().invoke(app, ["serve", *args], env=env)
        assert result.exit_code == 2, result.output
        assert said in " ".join(result.output.replace("│", " ").split()), result.output


def test_a_standby_reads_a_replicas_log_from_the_api_server(api: FakeKubeApi, tmp_path: Path) -> None:
    """The standby's executor follows no pods: it finds the replica's pod by its labels (`tide logs`
    through either replica)."""
    for side in ("leader", "standby"):
        (tmp_path / side).mkdir()
    leader = kube_executor(api, tmp_path / "leader")
    standby = kube_executor(api, tmp_path / "standby")
    try:
        leader.nodes()
        spec = LaunchSpec(replica_id=7, project="a", job="train", index=0, node="gpu-0", gpu_ids=(0,),
                          argv=("python", "train.py"), env={}, image="img")  # fmt: skip
        leader.start(spec)
        wait_for(lambda: leader.read_log("a", "train", 0), what="the leader to read the log")
        assert standby.pod_watch is None
        text = standby.read_log("a", "train", 0)
        assert text is not None and "fake kubelet: started on gpu-0" in text
        assert standby.read_log("a", "train", 1) is None and standby.pod_watch is None
    finally:
        leader.close()
        standby.close()


def test_an_unreachable_api_server_is_a_no_and_the_renewals_go_on(tmp_path: Path) -> None:
    dead = FakeKubeApi()  # never started: its port refuses connections
    kubeconfig = dead.kubeconfig(tmp_path / "kubeconfig", namespace=SERVICE_NS)
    dead._httpd.server_close()
    api_client = connect(KubeSettings(kubeconfig=str(kubeconfig))).api_client
    api_client.configuration.retries = False
    lease = LeaseLeadership(api_client, SERVICE_NS, holder="a", timing=FAST)
    try:
        assert not lease.holds()
        time.sleep(FAST.retry_period * 3)
        assert not lease.holds() and lease._thread is not None and lease._thread.is_alive()
    finally:
        lease.release()
