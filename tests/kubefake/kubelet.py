"""The fake cluster's kubelets and nodes: what happens to a pod after the API server stored it.

Contract: a background thread moves pods along as kubelets would. A pod bound to a node (``spec.nodeName``)
is admitted once that node exists and is Ready: it runs, unless the node's allocatable ``nvidia.com/gpu``
cannot hold it next to the pods already running or terminating there; then it fails with reason
``OutOfnvidia.com/gpu``, exactly as a real kubelet rejects it. So a test against this fake proves that a
scheduler never over-allocates GPUs. A pod being deleted with a grace period gets SIGTERM: it exits 143
after ``sigterm_seconds`` (the pod's own value if ``ignore_sigterm`` set one; at the end of the grace
it is killed, 137), its status is written, then the object is removed. ``finish`` ends a container as
if its process exited. An admitted pod whose image is in ``unpullable`` stays Pending, holding its GPUs,
its container waiting in ``ImagePullBackOff`` (``Back-off pulling image "…"``) until the image is removed
from the set: then it runs, as a real kubelet's next pull would. Nodes are built with ``node_object`` and changed with ``set_node``.

With a ``ProcessRuntime`` (``processes.py``) the containers are real processes instead: an admitted pod's
process is started (the pod stays Pending, container ``waiting``, while its config cannot be resolved, a
missing Secret say, and holds its GPUs meanwhile as a real admitted pod does; a program that cannot be
executed fails the pod with ``StartError``, 128), runs on 127.0.0.1, and its exit is the container's;
a graceful delete signals it for real (see ``ProcessRuntime.stopping``; ``slow_to_stop`` delays the
SIGTERM by that many seconds, a container runtime slow to act, within the grace); a pod removed at once or
``finish``-ed has its process killed.

The NVIDIA device plugin is played too: a pod admitted with ``nvidia.com/gpu`` gets that many of its node's
devices, the lowest ones no other GPU-holding pod there has (``devices``: by pod uid, ``GPU-<node>-<i>``,
like a real plugin's UUIDs), and its process gets them in ``NVIDIA_VISIBLE_DEVICES`` (the plugin's default
``envvar`` strategy); a pod that requests no GPU gets none, whatever it sets itself.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kubefake.processes import ContainerConfigError, ProcessRuntime, World, pod_key, waiting_status
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


def device_uuid(node: str, index: int) -> str:
    """The fake device plugin's name for a node's GPU ``index`` (a real one names it ``GPU-<uuid>``)."""
    return f"GPU-{node}-{index}"


def pod_gpus(pod: Obj) -> int:
    total = 0
    for container in pod["spec"].get("containers", []):
        limits = (container.get("resources") or {}).get("limits") or {}
        total += int(limits.get(GPU, 0))
    return total


def _terminal(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def _holds_gpus(pod: Obj) -> bool:
    """Running, or admitted and waiting for its container (only the process kubelet has such pods)."""
    phase = pod["status"].get("phase")
    return phase == "Running" or (phase == "Pending" and bool(pod["status"].get("containerStatuses")))


class Kubelets:
    """Every node's kubelet, as one thread over the store."""

    def __init__(
        self, store: Store, *, sigterm_seconds: float = 0.05, processes: ProcessRuntime | None = None
    ) -> None:
        self.store = store
        self.processes = processes
        self.sigterm_seconds = sigterm_seconds
        self.deleting: dict[tuple[str, str], tuple[float, float]] = {}  # pod -> (monotonic start, grace)
        self.slow_to_stop: dict[tuple[str, str], float] = {}
        self.logs: dict[tuple[str, str], list[str]] = {}
        self.rejected: list[str] = []
        self.unpullable: set[str] = set()  # images whose pull fails: their pods wait in ImagePullBackOff
        self.devices: dict[str, tuple[str, ...]] = {}  # pod uid -> the GPUs the device plugin gave it
        self._next_ip = 10
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="kubefake-kubelets", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self.processes is not None:
            self.processes.kill_all()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            with self._lock:
                pods = self.store.items("pods")
                for pod in pods:
                    self._step(pod)
                if self.processes is not None:
                    self.processes.reap({pod_key(p) for p in pods if not _terminal(p)})

    def _step(self, pod: Obj) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        try:
            if pod["metadata"].get("deletionTimestamp"):
                self._terminate(ns, name, pod)
            elif pod["status"].get("phase") == "Pending" and pod["spec"].get("nodeName"):
                self._admit(ns, name, pod)
            elif pod["status"].get("phase") == "Running" and self.processes is not None:
                self._check_exit(ns, name, pod)
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
        if not _holds_gpus(pod) and not self._fits(ns, name, pod, node):
            return
        self._allocate(pod)
        image = next((c["image"] for c in pod["spec"]["containers"] if c["image"] in self.unpullable), None)
        if image is not None:  # admitted (it holds its GPUs), its image not pulled: the kubelet backs off
            status = waiting_status(pod, "ImagePullBackOff", f'Back-off pulling image "{image}"')
            if status is not None:
                self.store.update("pods", ns, name, lambda p: p["status"].update(status))
            return
        if self.processes is not None:
            self._launch(ns, name, pod, self.processes)
            return
        self._next_ip += 1
        ip = f"10.244.0.{self._next_ip}"
        self.logs.setdefault((ns, name), []).append(f"fake kubelet: started on {node['metadata']['name']}")
        self.store.update("pods", ns, name, lambda p: p["status"].update(self._running(p, ip)))

    def _fits(self, ns: str, name: str, pod: Obj, node: Obj) -> bool:
        """Admission: the pod's GPUs fit next to those held on the node, or the pod is rejected."""
        capacity = int(node["status"]["allocatable"].get(GPU, 0))
        used = sum(
            pod_gpus(p)
            for p in self.store.items("pods")
            if p["spec"].get("nodeName") == node["metadata"]["name"] and _holds_gpus(p)
        )
        wanted = pod_gpus(pod)
        if used + wanted <= capacity:
            return True
        message = (
            f"Pod was rejected: Node didn't have enough resource: {GPU}, requested: {wanted}, "
            f"used: {used}, capacity: {capacity}"
        )
        self.rejected.append(f"{ns}/{name}: {message}")
        self.store.update("pods", ns, name, lambda p: p["status"].update(self._rejected(message)))
        return False

    def _allocate(self, pod: Obj) -> None:
        """The device plugin's Allocate: the pod's GPUs, the lowest devices its node's other pods lack."""
        uid, node, wanted = pod["metadata"]["uid"], pod["spec"]["nodeName"], pod_gpus(pod)
        if uid in self.devices or wanted <= 0:
            return
        live = {p["metadata"]["uid"] for p in self.store.items("pods") if not _terminal(p)}
        self.devices = {u: d for u, d in self.devices.items() if u in live}  # ended pods' devices are free
        taken = {d for held in self.devices.values() for d in held}  # names carry the node
        free = (device_uuid(node, i) for i in range(1 << 16) if device_uuid(node, i) not in taken)
        self.devices[uid] = tuple(next(free) for _ in range(wanted))

    def _launch(self, ns: str, name: str, pod: Obj, processes: ProcessRuntime) -> None:
        held = self.devices.get(pod["metadata"]["uid"])
        devices = {"NVIDIA_VISIBLE_DEVICES": ",".join(held)} if held else {}
        world = World(self.store.items("services"), lambda secret: self._secret(ns, secret), devices)
        try:
            processes.start(pod, world)
        except ContainerConfigError as error:
            status = waiting_status(pod, error.reason, error.message)
            if status is not None:
                self.store.update("pods", ns, name, lambda p: p["status"].update(status))
            return
        except OSError as error:  # the program cannot be executed: the container never starts
            failed = terminated_status(pod, 128, reason="StartError", message=str(error))
            self.store.update("pods", ns, name, lambda p: p["status"].update(failed))
            return
        self.logs.setdefault((ns, name), []).append(f"fake kubelet: started {name} as a process")
        self.store.update(
            "pods", ns, name, lambda p: p["status"].update(self._running(p, "127.0.0.1", "127.0.0.1"))
        )

    def _secret(self, ns: str, name: str) -> Obj | None:
        try:
            return self.store.get("secrets", ns, name)
        except ApiError:
            return None

    def _check_exit(self, ns: str, name: str, pod: Obj) -> None:
        assert self.processes is not None
        code = self.processes.exit_code(pod)
        if code is not None:
            self.store.update("pods", ns, name, lambda p: p["status"].update(terminated_status(p, code)))

    @staticmethod
    def _rejected(message: str) -> Obj:
        return {"phase": "Failed", "reason": f"OutOf{GPU}", "message": message}

    @staticmethod
    def _running(pod: Obj, ip: str, host_ip: str = "192.168.0.1") -> Obj:
        started = now_rfc3339()
        return {
            "phase": "Running",
            "podIP": ip,
            "hostIP": host_ip,
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
        if self.processes is not None and self.processes.knows(pod):
            late = min(self.slow_to_stop.get(key, 0.0), grace)  # a runtime slow to pass on the SIGTERM
            code = self.processes.stopping(pod, elapsed - late, grace - late) if elapsed >= late else None
        else:
            code = self._simulated_exit(key, elapsed, grace)
        if code is None:
            return
        self.store.update("pods", ns, name, lambda p: p["status"].update(terminated_status(p, code)))
        self.deleting.pop(key, None)
        self.store.remove("pods", ns, name)

    def _simulated_exit(self, key: tuple[str, str], elapsed: float, grace: float) -> int | None:
        exits_after = self.slow_to_stop.get(key, self.sigterm_seconds)
        if elapsed < exits_after and elapsed < grace:
            return None
        return 143 if elapsed >= exits_after and exits_after <= grace else 137

    def finish(self, ns: str, name: str, exit_code: int) -> None:
        """The pod's container exits with ``exit_code`` (restartPolicy Never: the pod is done)."""
        with self._lock:
            self.store.update("pods", ns, name, lambda p: p["status"].update(terminated_status(p, exit_code)))


def terminated_status(pod: Obj, code: int, *, reason: str | None = None, message: str = "") -> dict[str, Any]:
    finished = now_rfc3339()
    statuses = []
    for status in pod["status"].get("containerStatuses") or (_never_ran(pod) if reason else []):
        started = status.get("state", {}).get("running", {}).get("startedAt", finished)
        terminated = {
            "exitCode": code,
            "reason": reason or ("Completed" if code == 0 else "Error"),
            "startedAt": started,
            "finishedAt": finished,
            **({"message": message} if message else {}),
        }
        statuses.append({**status, "ready": False, "started": False, "state": {"terminated": terminated}})
    return {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": statuses}


def _never_ran(pod: Obj) -> list[Obj]:
    """Statuses for containers that never ran (``StartError``): there were none to update."""
    blank = {"imageID": "", "ready": False, "restartCount": 0, "started": False, "state": {}}
    return [{"name": c["name"], "image": c["image"], **blank} for c in pod["spec"]["containers"]]
