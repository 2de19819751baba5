"""``tide serve --executor kubernetes`` as a user runs it, against the fake API server.

It reaches the cluster before serving and says where the jobs go; its nodes are the cluster's GPU nodes;
a submitted job becomes pods. A kubeconfig that cannot be read, an API that does not answer, and flags of
the other executor are refused with exit 2 and a message that says what to fix.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubefake import FakeKubeApi
from kubefake.harness import NAMESPACE, kube_executor, wait_for
from typer.testing import CliRunner

from api.client.cli.main import app
from api.client.rest import TideClient
from scheduler.elastic.agent.ports import free_port
from scheduler.executors.base import LaunchSpec
from scheduler.executors.kube import names

TOKEN = "kube-serve-test-token"


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    fake = FakeKubeApi().start()
    fake.add_node("gpu-0", 8)
    fake.add_node("gpu-1", 8, unschedulable=True)
    yield fake
    fake.stop()


def _serve(tmp_path: Path, *args: str, port: int = 0) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIDE_", "KUBE"))}
    env.update(TIDE_DATA_DIR=str(tmp_path / "data"), TIDE_ADMIN_TOKEN=TOKEN)
    argv = [sys.executable, "-m", "api.client.cli.main", "serve", "--port", str(port or free_port()), *args]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.slow
def test_serve_on_kubernetes_places_jobs_as_pods(api: FakeKubeApi, tmp_path: Path) -> None:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    flags = ["--executor", "kubernetes", "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE]
    process = _serve(tmp_path, *flags, "--default-image", "img:1", "--cycle-period", "0.2", port=port)
    try:
        wait_for(lambda: _up(url), timeout=60, what="tide serve to answer")
        with TideClient(url, TOKEN) as client:
            cluster = client.cluster()
            assert [(n.name, n.gpus, n.schedulable) for n in cluster.nodes] == [
                ("gpu-0", 8, True),
                ("gpu-1", 8, False),
            ]
            client.create_project({"name": "a", "deserved_gpus": 8})
            client.submit(
                "a", {"name": "train", "workers": 1, "gpus_per_replica": 2, "command": ["python", "t.py"]}
            )
            wait_for(lambda: len(api.pods(NAMESPACE)) == 2, timeout=30, what="two pods")
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert f"Kubernetes:    {api.url} (kubeconfig {kubeconfig}); jobs in namespace {NAMESPACE}; " in output
    assert "2 GPU nodes (1 schedulable), 16 GPUs" in output
    assert {p["spec"]["nodeName"] for p in api.pods(NAMESPACE)} == {"gpu-0"}


def _refused(tmp_path: Path, *args: str) -> str:
    """``tide serve ARGS`` in this process (it fails before serving): exit 2, a message, no traceback."""
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith(("TIDE_", "KUBE"))}
    env.update(TIDE_DATA_DIR=str(tmp_path / "data"), TIDE_ADMIN_TOKEN=TOKEN)
    result = CliRunner().invoke(app, ["serve", *args], env=env)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return " ".join(result.output.replace("│", " ").split())  # typer boxes and wraps its errors


def test_serve_refuses_what_cannot_work(api: FakeKubeApi, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    out = _refused(tmp_path, "--executor", "kubernetes", "--kubeconfig", str(missing))
    assert "cannot load the Kubernetes configuration" in out and "--kubeconfig" in out
    dead = FakeKubeApi()  # never started: its port refuses connections
    kubeconfig = dead.kubeconfig(tmp_path / "dead-kubeconfig")
    dead._httpd.server_close()
    out = _refused(tmp_path, "--executor", "kubernetes", "--kubeconfig", str(kubeconfig))
    assert "list nodes: cannot reach the API" in out and "tried 5 times" in out
    out = _refused(tmp_path, "--executor", "kubernetes", "--nodes", "2")
    assert "with kubernetes the nodes and their GPUs come from the cluster" in out
    out = _refused(tmp_path, "--namespace", "x")
    assert "--namespace only apply to --executor kubernetes" in out
    out = _refused(tmp_path, "--executor", "slurm")
    assert "unknown executor 'slurm'; available: local, kubernetes" in out


def test_a_torchrun_jobs_agent_token_lives_in_its_secret_and_leaves_with_its_pods(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    executor = kube_executor(api, tmp_path, agent_url="http://tide.tide.svc")
    assert executor.capabilities.inplace_restarts
    secret = names.service_name("a", "train")

    def token() -> str | None:
        found = [s for s in api.store.items("secrets") if s["metadata"]["name"] == secret]
        return base64.b64decode(found[0]["data"]["agent-token"]).decode() if found else None

    try:
        executor.put_agent_token("a", "train", "first")
        executor.put_agent_token("a", "train", "second")  # a later job of the same name: replaced
        assert token() == "second"
        spec = LaunchSpec(replica_id=7, project="a", job="train", index=0, node="gpu-0", gpu_ids=(0,),
                          argv=("torchrun", "train.py"), env={"TIDE_JOB_ID": "3"}, image="img")  # fmt: skip
        executor.start(spec)
        pod = wait_for(lambda: api.pods(NAMESPACE, "tide.dev/job=train"), what="the pod")[0]
        assert pod["spec"]["containers"][0]["command"][:3] == ["tide", "agent", "--"]
        executor.forget(7)
        wait_for(lambda: token() is None, what="the Secret to leave with the job's last pod")
        executor.put_agent_token("b", "left-over", "x")  # a job whose pods are gone: adopt removes it
        executor.adopt()
        assert not [s for s in api.store.items("secrets") if "left-over" in s["metadata"]["name"]]
    finally:
        executor.close()
