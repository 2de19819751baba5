"""The fake cluster's kubelets and nodes: what happens to a pod after the API server stored it.

Contract: a background thread moves pods along as kubelets would. A pod bound to a node (``spec.nodeName``)
is admitted once that node exists and is Ready: it runs, unless the node's allocatable ``nvidia.com/gpu``
cannot hold it next to the pods already running or terminating there; then it fails with reason
``OutOfnvidia.com/gpu``, exactly as a real kubelet rejects it. So a test against this fake proves that a
scheduler never over-allocates GPUs. A pod being deleted with a grace period gets SIGTERM: it exits 143
after ``sigterm_seconds`` (the pod's own value if ``ignore_sigterm`` set one; at the end of the grace
it is killed, 137), its status is written, then the object is removed. ``finish`` ends a container as
if its process exited. Nodes are built with ``node_object`` and changed with ``set_node``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kubefake.store import ApiError, Obj, Store, now_rfc3339

GPU = "nvidia.com/gpu"


def node_object(
    name: str,
    gpus: int,
    *,
    ready: bool = True,
    unschedulable: bool = False,
    taints: list[Obj] | None = None,
    labels: dict[str, str] | None = None,
) -> Obj:
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", GPU: str(gpus)}
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "lastHeartbeatTime": now_rfc3339(),
        "lastTransitionTime": now_rfc3339(),
    }
    spec: Obj = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"capacity": dict(resources), "allocatable": dict(resources), "conditions": [condition]},
    }


def pod_gpus(pod: Obj) -> int:
    total = 0
    for container in pod["spec"].get("containers", []):
        limits = (container.get("resources") or {}).get("limits") or {}
        total += int(limits.get(GPU, 0))
    return total


def _terminal(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


class Kubelets:
    """Every node's kubelet, as one thread over the store."""

    def __init__(self, store: Store, *, sigterm_seconds: float = 0.05) -> None:
        self.store = store
        self.sigterm_seconds = sigterm_seconds
        self.deleting: dict[tuple[str, str], tuple[float, float]] = {}  # pod -> (monotonic start, grace)
        self.slow_to_stop: dict[tuple[str, str], float] = {}
        self.logs: dict[tuple[str, str], list[str]] = {}
        self.rejected: list[str] = []
        self._next_ip = 10
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="kubefake-kubelets", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            with self._lock:
                for pod in self.store.items("pods"):
                    self._step(pod)

    def _step(self, pod: Obj) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        try:
            if pod["metadata"].get("deletionTimestamp"):
                self._terminate(ns, name, pod)
            elif pod["status"].get("phase") == "Pending" and pod["spec"].get("nodeName"):
                self._admit(ns, name, pod)
        except ApiError:
            pass  # deleted meanwhile

    def _node(self, name: str) -> Obj | None:
        try:
            return self.store.get("nodes", "", name)
        except ApiError:
            return None

    def _admit(self, ns: str, name: str, pod: Obj) -> None:
        node = self._node(pod["spec"]["nodeName"])
        if node is None or not any(
            c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"]
        ):
            return  # no kubelet to run it yet: the pod stays Pending
        capacity = int(node["status"]["allocatable"].get(GPU, 0))
        used = sum(
            pod_gpus(p)
            for p in self.store.items("pods")
            if p["spec"].get("nodeName") == node["metadata"]["name"] and p["status"].get("phase") == "Running"
        )
        wanted = pod_gpus(pod)
        if used + wanted > capacity:
            message = (
                f"Pod was rejected: Node didn't have enough resource: {GPU}, requested: {wanted}, "
                f"used: {used}, capacity: {capacity}"
            )
            self.rejected.append(f"{ns}/{name}: {message}")
            self.store.update("pods", ns, name, lambda p: p["status"].update(self._rejected(message)))
            return
        self._next_ip += 1
        ip = f"10.244.0.{self._next_ip}"
        self.logs.setdefault((ns, name), []).append(f"fake kubelet: started on {node['metadata']['name']}")
        self.store.update("pods", ns, name, lambda p: p["status"].update(self._running(p, ip)))

    @staticmethod
    def _rejected(message: str) -> Obj:
        return {"phase": "Failed", "reason": f"OutOf{GPU}", "message": message}

    @staticmethod
    def _running(pod: Obj, ip: str) -> Obj:
        started = now_rfc3339()
        return {
            "phase": "Running",
            "podIP": ip,
            "hostIP": "192.168.0.1",
            "startTime": started,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": started}],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": "",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": started}},
                }
                for c in pod["spec"]["containers"]
            ],
        }

    def _terminate(self, ns: str, name: str, pod: Obj) -> None:
        key = (ns, name)
        if _terminal(pod) or pod["status"].get("phase") == "Pending":
            self.deleting.pop(key, None)
            self.store.remove("pods", ns, name)
            return
        started, grace = self.deleting.setdefault(
            key, (time.monotonic(), float(pod["metadata"].get("deletionGracePeriodSeconds", 30)))
        )
        elapsed = time.monotonic() - started
        exits_after = self.slow_to_stop.get(key, self.sigterm_seconds)
        if elapsed >= exits_after or elapsed >= grace:
            code = 143 if elapsed >= exits_after and exits_after <= grace else 137
            self.store.update("pods", ns, name, lambda p: p["status"].update(terminated_status(p, code)))
            self.deleting.pop(key, None)
            self.store.remove("pods", ns, name)

    def finish(self, ns: str, name: str, exit_code: int) -> None:
        """The pod's container exits with ``exit_code`` (restartPolicy Never: the pod is done)."""
        with self._lock:
            self.store.update("pods", ns, name, lambda p: p["status"].update(terminated_status(p, exit_code)))


def terminated_status(pod: Obj, code: int) -> dict[str, Any]:
    finished = now_rfc3339()
    statuses = []
    for status in pod["status"].get("containerStatuses", []):
        started = status.get("state", {}).get("running", {}).get("startedAt", finished)
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started,
            "finishedAt": finished,
        }
        statuses.append({**status, "ready": False, "started": False, "state": {"terminated": terminated}})
    return {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": statuses}
