"""Test kit around the fake API server: a kubeconfig for it and a ``KubernetesExecutor`` pointed at it.

``kube_executor(api, tmp_path)`` builds the executor exactly as ``tide serve --executor kubernetes
--kubeconfig FILE`` would (a kubeconfig file read by the real client), with short timeouts and a fast
backoff so that failure tests stay quick. ``wait_for`` polls a condition with a generous deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubefake.server import FakeKubeApi
from scheduler.executors.kube.config import KubeSettings
from scheduler.executors.kube.retry import Retrier
from scheduler.executors.kubernetes import KubernetesExecutor

NAMESPACE = "tide-jobs"
IMAGE = "registry.example/train:1"


def kube_settings(api: FakeKubeApi, tmp_path: Path, **overrides: Any) -> KubeSettings:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE)
    options: dict[str, Any] = {"kubeconfig": str(kubeconfig), "default_image": IMAGE, "request_timeout": 2.0}
    options.update(overrides)
    return KubeSettings(**options)


def kube_executor(
    api: FakeKubeApi, tmp_path: Path, *, grace: float = 5.0, **overrides: Any
) -> KubernetesExecutor:
    return KubernetesExecutor(
        kube_settings(api, tmp_path, **overrides),
        data_dir=tmp_path / "data",
        grace_period=grace,
        retrier=Retrier(attempts=5, initial=0.02, cap=0.2),
    )


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)
