"""The ``tide-kubernetes`` strategy of ``bench/resize.py``: resizes decided by ``tide serve --executor
kubernetes``, carried out in pods that run Tide's agent.

Contract: ``TideKubeJob`` is ``resize_tide.TideJob`` on Kubernetes: the fake API server of ``tests/kubefake``
with its process kubelet (every pod's command runs here as a real process; a fake, not Kubernetes: see
docs/kubernetes.md), 4 nodes of 1 GPU, and a real ``tide serve --executor kubernetes --agent-url ...``
(``tests/e2e/kubekit.py``). The job is project a's elastic ``torchrun`` job (min 2, max 4), each replica a
pod running ``tide agent -- torchrun ...``; ``resize(2)`` is project b claiming its 2 GPUs, ``resize(4)``
deletes b's job, and a resize is timed from Tide's ``shrink``/``grow`` event. A shrink deletes two pods and
relaunches the survivors in place; a grow makes two pods, whose agents import torch before the job
relaunches at 4 (the survivors keep training meanwhile), so the grow's figure includes the new pods' start.
``prepare`` waits (outside the timed window, at most 120 s) until every running pod's agent holds a warm
spare launcher, as ``TideJob.prepare`` waits for the local pool; a grow's new pods cannot be warmed before
they exist. Logs: every pod's log, where the process kubelet writes it.
"""

from __future__ import annotations

import atexit
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "e2e")]
from kubekit import KubeCluster  # noqa: E402
from resize_tide import A_JOB, B_JOB, TideJob  # noqa: E402


class TideKubeJob(TideJob):
    """Project a's torchrun job in pods under a real Tide on the fake Kubernetes; b's claims resize it."""

    def __init__(self, name: str, cfg: Any, *, script: Path) -> None:
        self.name, self.cfg, self.script = name, cfg, script
        root = cfg.workdir / name
        root.mkdir(parents=True)
        self.ckpt = root / "ckpt"
        self.cluster = KubeCluster(root, 4, grace=cfg.grace_s)
        atexit.register(self.cluster.close)
        self.cluster.start_service()
        self.logs = self.cluster.kubelet_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.client = self.cluster.client
        self.client.create_project({"name": "a", "deserved_gpus": 2})
        self.client.create_project({"name": "b", "deserved_gpus": 2})
        self.current = 0
        self.stop_s: float | None = None
        self.decided_at: float | None = None

    def prepare(self, n: int) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.cluster.warm_spares() < len(self.cluster.running(A_JOB)):
            time.sleep(0.2)

    def _processes(self) -> bool:
        return any(self.cluster.pods(job) for job in (A_JOB, B_JOB))

    def close(self) -> None:
        super().close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self._processes():
            time.sleep(0.2)
