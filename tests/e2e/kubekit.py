"""A real ``tide serve --executor kubernetes`` against the fake API server whose kubelet runs real processes.

Contract: ``KubeCluster(tmp_path, nodes)`` starts the fake API server (``tests/kubefake``) in process mode:
each pod's command runs on this machine with the pod's environment (the image is ignored; the job's
headless Service resolves to 127.0.0.1; the checkpoint claim ``ckpt`` is a directory shared by the pods),
with ``nodes`` nodes of 1 GPU each. ``start_service()`` runs ``tide serve`` in a process of its own session
(the engine in its child, as in production) on a free port, pointed at the fake with a kubeconfig, with
``--agent-url`` so that torchrun jobs' pods run Tide's agent; ``kill_service()`` SIGKILLs it (and its
engine) at once; ``close()`` stops everything, bounded. ``Steps`` reads the JSON step lines that rank 0
of ``deploy/examples/train_elastic.py`` prints into its pod's log. Used by the end-to-end test and by
``bench/resize.py --executor kubernetes``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path
from typing import Any

from kubefake import FakeKubeApi
from kubefake.containers import ProcessOptions
from kubefake.harness import wait_for

from api.client.rest import TideClient
from scheduler.elastic.agent.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "examples" / "train_elastic.py"
NAMESPACE = "tide-jobs"
IMAGE = "registry.example/train:1"
TOKEN = "kube-e2e-admin-token-0123456789abcdef"
CLAIM = "ckpt"


class KubeCluster:
    """The fake cluster, its process kubelet, and the Tide service driving it."""

    def __init__(self, tmp_path: Path, nodes: int = 4, *, grace: float = 10.0) -> None:
        self.dir = tmp_path
        self.grace = grace
        self.kubelet_dir = tmp_path / "kubelet"
        image_env = {
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(tmp_path),
            "OMP_NUM_THREADS": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "TMPDIR": str(tmp_path / "pod-tmp"),  # the agents' spare launchers, for warm_spares()
        }
        (tmp_path / "pod-tmp").mkdir(exist_ok=True)
        if os.environ.get("TIDE_TRACE_FILE"):
            image_env["TIDE_TRACE_FILE"] = os.environ["TIDE_TRACE_FILE"]
        self.api = FakeKubeApi(
            processes=ProcessOptions(work_dir=self.kubelet_dir, base_env=image_env)
        ).start()
        for i in range(nodes):
            self.api.add_node(f"gpu-{i}", 1)
        self.kubeconfig = self.api.kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = TideClient(self.url, TOKEN)
        self.service: subprocess.Popen[str] | None = None
        self.service_log = tmp_path / "serve.log"

    def start_service(self) -> None:
        env = {**os.environ, "TIDE_DATA_DIR": str(self.dir / "data"), "TIDE_ADMIN_TOKEN": TOKEN}
        for name in ("TIDE_NODES", "TIDE_GPUS_PER_NODE", "TIDE_EXECUTOR"):
            env.pop(name, None)
        argv = [sys.executable, "-m", "api.client.cli.main", "serve", "--port", str(self.port),
                "--executor", "kubernetes", "--kubeconfig", str(self.kubeconfig),
                "--default-image", IMAGE, "--agent-url", self.url, "--checkpoint-claim", CLAIM,
                "--grace-period", str(self.grace), "--cycle-period", "0.2", "--settle-time", "0",
                "--eta-every", "0", "--log-level", "warning"]  # fmt: skip
        with open(self.service_log, "a") as log:
            self.service = subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True
            )
        wait_for(self._healthy, 60, "tide serve to answer")

    def _healthy(self) -> bool:
        assert self.service is not None
        if self.service.poll() is not None:
            raise AssertionError(
                f"tide serve exited {self.service.returncode}: {self.service_log.read_text()}"
            )
        try:
            self.client.projects()
        except Exception:  # not up yet
            return False
        return True

    def kill_service(self) -> None:
        """SIGKILL ``tide serve`` and its engine, as a crash or an OOM kill would."""
        if self.service is None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.service.pid, signal.SIGKILL)
        self.service.wait(timeout=10)
        self.service = None

    def close(self) -> None:
        self.client.close()
        if self.service is not None:
            with suppress(ProcessLookupError):
                os.killpg(self.service.pid, signal.SIGTERM)
            try:
                self.service.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill_service()
        self.api.stop()

    # what the cluster shows -------------------------------------------------------------------------
    def pods(self, job: str) -> list[dict[str, Any]]:
        found = self.api.pods(NAMESPACE, f"tide.dev/job={job}")
        return sorted(found, key=lambda p: int(p["metadata"]["labels"]["tide.dev/replica"]))

    def running(self, job: str) -> dict[int, str]:
        """Replica index -> pod uid of the job's running pods (not being deleted)."""
        return {
            int(p["metadata"]["labels"]["tide.dev/replica"]): p["metadata"]["uid"]
            for p in self.pods(job)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        }

    def deleted_pods(self) -> list[str]:
        """Names of the pods Tide asked to delete, in order."""
        return [r.path.rsplit("/", 1)[1] for r in self.api.calls("DELETE", "/pods/")]

    def warm_spares(self) -> int:
        """Spare launchers of the pods' agents that imported torch and wait for a launch."""
        warm = (self.dir / "pod-tmp").glob("tide-agent-*/pool/*.warm")  # named AGENT_PID-N.warm
        return sum(
            1
            for path in warm
            if not path.with_suffix(".spec").exists() and Path(f"/proc/{path.stem.split('-')[0]}").exists()
        )

    def logs(self) -> str:
        return "".join(
            p.read_text(errors="replace") for p in sorted((self.kubelet_dir / "logs").glob("*.log"))
        )


class Steps:
    """Rank 0's step lines (``{"step", "world_size", "loss", "time"}``) in every pod log of the cluster."""

    def __init__(self, cluster: KubeCluster) -> None:
        self.cluster = cluster

    def lines(self) -> list[dict[str, Any]]:
        found = []
        for path in sorted((self.cluster.kubelet_dir / "logs").glob("*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("{") and '"step"' in line:
                    with suppress(ValueError):
                        record = json.loads(line)
                        if "world_size" in record:
                            found.append(record)
        return sorted(found, key=lambda r: float(r["time"]))

    def at_size(self, size: int, after: float = 0.0) -> list[dict[str, Any]]:
        return [r for r in self.lines() if r["world_size"] == size and float(r["time"]) > after]

    def wait_size(self, size: int, after: float, timeout: float) -> dict[str, Any]:
        lines = wait_for(lambda: self.at_size(size, after), timeout, f"a training step at world size {size}")
        first: dict[str, Any] = lines[0]
        return first
