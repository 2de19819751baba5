"""GPU reservations on Kubernetes (R20): the pod that holds a shared GPU for the fractional replicas on it.

KAI-Scheduler's way, done by Tide's executor: the device plugin hands a GPU to pods that request
``nvidia.com/gpu``, and to nobody else. A shared GPU is therefore held by a reservation pod that requests
one GPU and does nothing else; the fractional replicas' pods request no GPU, run on the same node and get
the reserved device in ``NVIDIA_VISIBLE_DEVICES`` (the NVIDIA container runtime then mounts that device
into them). KAI's reservation pod finds its device through NVML and writes it into its own annotation;
Tide's prints it (the device plugin's ``NVIDIA_VISIBLE_DEVICES``, or the device files of its
``volume-mounts`` strategy) as one line of its log, which Tide reads: no image of Tide's own, no token or
right to patch pods inside it, a shell image (``busybox``) is enough.

Contract:

- One reservation pod per shared GPU: ``reservation_name(node, device)`` in the namespace of the project
  whose fractions share the GPU (decision 54: one project per shared GPU; its label ``tide.dev/project``
  makes it Tide's own to the inventory, which does not subtract it from the node's GPUs, as the store
  already counts the shared GPU). The name is deterministic, so a second create answers 409 and is adopted:
  a GPU is never reserved twice. Labels: Tide's ``managed-by``, the project, ``tide.dev/role=gpu-reservation``
  and ``tide.dev/gpu`` (Tide's number of the device on its node).
- ``GpuReservations.device_for(...)`` is the reserved device for a fractional replica, or raises
  ``LaunchDeferred`` saying what it waits for (the pod being made, pulled, started; one of another
  project's, or being removed, still on that GPU; a pod that ended, removed to be made again) or
  ``ExecutorError`` (the cluster refused the reservation pod's body for good).
- ``sweep(in_use, ...)`` deletes (grace ``GRACE`` s: the pod's object lasts as long as its container holds
  the GPU) each reservation that no replica's pod uses and that no start asked for in the last
  ``IDLE_SECONDS``; ``lingers(name, namespace)`` says whether one still exists, so the executor reports a
  finished fraction as stopping until its GPU is released; ``holds`` whether it exists and has not ended.
- ``fold``/``listed`` keep the views current from the executor's pod watch (reservation pods carry Tide's
  label, so the same watch sees them; after a restart its first list is the adoption).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from scheduler.executors.base import LaunchDeferred
from scheduler.executors.kube import names, refusals
from scheduler.executors.kube.podspec import DEFAULT_TOLERATIONS
from scheduler.executors.kube.retry import KubeApiError, Retrier, describe, is_already_exists
from scheduler.executors.kube.status import waiting_reason

log = logging.getLogger(__name__)
Obj = dict[str, Any]
ROLE = "gpu-reservation"  # tide.dev/role of a reservation pod
GPU = "tide.dev/gpu"  # its device's number on the node (Tide's bookkeeping, not the device plugin's)
DEFAULT_IMAGE = "busybox:1.36"
GRACE = 1  # seconds: the container ends at SIGTERM; the object goes once the GPU is free
IDLE_SECONDS = 30.0  # a reservation no pod uses lives this long after the last start that asked for it
LOG_READ_SECONDS = 0.5  # the log of a reservation that has not said its device is read at most this often
DEVICE_LINE = "tide-reserved-gpu="
# Prints the device the device plugin gave the container, then sleeps until SIGTERM. Kubernetes expands
# $(...) in a command, so every $ is written $$ in the pod (reservation_body).
SCRIPT = f"""d="${{NVIDIA_VISIBLE_DEVICES:-}}"
if [ -d "$d" ]; then d="$(ls "$d" | tr '\\n' ',')"; d="${{d%,}}"; fi
trap 'kill $! 2>/dev/null; exit 0' TERM INT
echo "{DEVICE_LINE}$d"
while :; do sleep 3600 & wait $!; done
"""


def reservation_name(node: str, device: int) -> str:
    """``tide-gpu-<node>-<device>-<hash>``, at most 63 characters, one per GPU of a node."""
    suffix = f"-{device}-{hashlib.blake2b(node.encode(), digest_size=3).hexdigest()}"
    readable = node.lower().replace(".", "-")[: 63 - len("tide-gpu-") - len(suffix)].rstrip("-")
    return f"tide-gpu-{readable}{suffix}"


def reservation_body(name: str, namespace: str, *, node: str, device: int, project: str, image: str) -> Obj:
    """The reservation pod: one GPU, a few millicores and MiB (requests = limits: never the first evicted)."""
    tiny = {"cpu": "10m", "memory": "32Mi", "nvidia.com/gpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                names.MANAGED_BY: names.MANAGER,
                names.PROJECT: project,
                names.ROLE: ROLE,
                GPU: str(device),
            },
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Always",  # a restarted container keeps the pod's GPU
            "terminationGracePeriodSeconds": GRACE,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "tolerations": [dict(t) for t in DEFAULT_TOLERATIONS],
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65534,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "reserve",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", SCRIPT.replace("$", "$$")],
                    "resources": {"requests": dict(tiny), "limits": dict(tiny)},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def device_in_log(text: str) -> str | None:
    """The device a reservation pod's log names (its last such line); None before it printed one."""
    found = [line[len(DEVICE_LINE) :].strip() for line in text.splitlines() if line.startswith(DEVICE_LINE)]
    return found[-1] if found else None


@dataclass(frozen=True, slots=True)
class ReservationView:
    """A reservation pod as last seen."""

    name: str
    namespace: str
    uid: str
    node: str
    project: str
    phase: str
    deleting: bool
    waiting: str | None
    ended: str | None  # why it ended (Failed or Succeeded), None while it lives

    @staticmethod
    def of(pod: Obj) -> ReservationView | None:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        labels = meta.get("labels") or {}
        if labels.get(names.ROLE) != ROLE:
            return None
        phase = str(status.get("phase") or "Pending")
        ended = None
        if phase in ("Failed", "Succeeded"):
            ended = ": ".join(str(p) for p in (phase, status.get("reason"), status.get("message")) if p)
        return ReservationView(
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "")),
            uid=str(meta.get("uid", "")),
            node=str((pod.get("spec") or {}).get("nodeName", "")),
            project=str(labels.get(names.PROJECT, "")),
            phase=phase,
            deleting=bool(meta.get("deletionTimestamp")),
            waiting=waiting_reason(pod),
            ended=ended,
        )


Key = tuple[str, str]  # (namespace, name)


class GpuReservations:
    """The reservation pods Tide knows, by (namespace, name); thread-safe (the watch writes, the engine reads)."""

    def __init__(
        self,
        core: Callable[[], client.CoreV1Api],
        timeout: Callable[[], tuple[float, float]],
        retrier: Retrier,
        to_dict: Callable[[Any], Any],
        read_log: Callable[[str, str], str | None],
        *,
        image: str = DEFAULT_IMAGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core, self._timeout, self._retrier, self._to_dict = core, timeout, retrier, to_dict
        self._read_log, self.image, self._clock = read_log, image, clock
        self._views: dict[Key, ReservationView] = {}
        self._devices: dict[str, str] = {}  # pod uid -> the device it reported
        self._read_at: dict[str, float] = {}  # pod uid -> when its log was last read
        self._wanted: dict[Key, float] = {}  # when a start last asked for it
        self._lock = threading.Lock()

    # the watch ----------------------------------------------------------------------------------------
    def fold(self, kind: str, obj: Obj) -> bool:
        """Take one watch event; False when ``obj`` is not a reservation pod."""
        view = ReservationView.of(obj)
        if view is None:
            return False
        with self._lock:
            if kind == "DELETED":
                if (
                    known := self._views.get((view.namespace, view.name))
                ) is not None and known.uid == view.uid:
                    del self._views[(view.namespace, view.name)]
                self._devices.pop(view.uid, None)
                self._read_at.pop(view.uid, None)
            else:
                self._views[(view.namespace, view.name)] = view
        return True

    def listed(self, items: list[Obj]) -> None:
        """A full list: the reservation pods among ``items`` are all there is."""
        views = [v for v in map(ReservationView.of, items) if v is not None]
        with self._lock:
            self._views = {(v.namespace, v.name): v for v in views}
            uids = {v.uid for v in views}
            self._devices = {u: d for u, d in self._devices.items() if u in uids}

    def lingers(self, name: str, namespace: str) -> bool:
        with self._lock:
            return (namespace, name) in self._views

    def holds(self, name: str, namespace: str) -> bool:
        """Whether the reservation exists and has not ended (an ended pod's GPU is the device plugin's again)."""
        with self._lock:
            view = self._views.get((namespace, name))
            return view is not None and view.ended is None

    # starts -------------------------------------------------------------------------------------------
    def device_for(self, node: str, device: int, project: str, namespace: str) -> tuple[str, str]:
        """``(reservation pod name, device)`` for a fraction of ``project`` on GPU ``device`` of ``node``."""
        name = reservation_name(node, device)
        key = (namespace, name)
        with self._lock:
            self._wanted[key] = self._clock()
            view = self._views.get(key)
        where = f"GPU {device} of node {node}"
        if view is None:
            self._create(
                reservation_body(name, namespace, node=node, device=device, project=project, image=self.image)
            )
            raise LaunchDeferred(f"{where} is being reserved for its fractions (pod {name})")
        if view.project != project:
            raise LaunchDeferred(f"{where} is still reserved for project {view.project} (pod {name})")
        if view.deleting:
            raise LaunchDeferred(f"the reservation of {where} (pod {name}) is being removed")
        if view.ended is not None:
            self.delete(name, namespace)
            raise LaunchDeferred(f"the reservation of {where} (pod {name}) ended ({view.ended}): made again")
        if view.phase != "Running":
            said = view.waiting or "being started"
            raise LaunchDeferred(f"the reservation of {where} waits: {said}")
        found = self._device(view)
        if found is None:
            raise LaunchDeferred(
                f"the reservation of {where} (pod {name}) has not said which device it holds yet"
            )
        if not found or "," in found:
            raise LaunchDeferred(
                f"the reservation of {where} (pod {name}) sees {found or 'no device'}, not one GPU: the "
                "device plugin must pass the device in NVIDIA_VISIBLE_DEVICES (docs/kubernetes.md)"
            )
        return name, found

    def used(self, key: Key) -> None:
        """A fraction's pod now uses the reservation: no start is pending for it any more."""
        with self._lock:
            self._wanted.pop(key, None)

    def _device(self, view: ReservationView) -> str | None:
        with self._lock:
            if view.uid in self._devices:
                return self._devices[view.uid]
            now = self._clock()
            if now - self._read_at.get(view.uid, -LOG_READ_SECONDS) < LOG_READ_SECONDS:
                return None
            self._read_at[view.uid] = now
        text = self._read_log(view.name, view.namespace)
        found = device_in_log(text or "")
        if found is not None:
            with self._lock:
                self._devices[view.uid] = found
            log.info("pod %s reserves device %s of node %s", view.name, found or "(none)", view.node)
        return found

    def _create(self, body: Obj) -> None:
        name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
        try:
            created = self._retrier.call(
                f"create pod {name}",
                lambda: self._core().create_namespaced_pod(
                    namespace, client.V1Pod.model_validate(body), _request_timeout=self._timeout()
                ),
            )
        except ApiException as error:
            if is_already_exists(error):
                return  # the watch shows it
            judged = refusals.judge(error, f"GPU reservation pod {name}")
            raise judged from error
        view = ReservationView.of(dict(self._to_dict(created)))
        with self._lock:  # unless the watch showed it already: its view is never older than this answer
            if view is not None:
                self._views.setdefault((namespace, name), view)
        log.info(
            "reserving GPU %s of node %s: pod %s",
            body["metadata"]["labels"][GPU],
            body["spec"]["nodeName"],
            name,
        )

    # releases -----------------------------------------------------------------------------------------
    def sweep(self, in_use: Collection[Key], *, idle: float = IDLE_SECONDS) -> None:
        """Delete the reservations no pod uses and no start asked for within ``idle`` seconds (best effort:
        one that cannot be deleted now is tried at the next sweep)."""
        now = self._clock()
        with self._lock:
            unused = [
                v
                for key, v in self._views.items()
                if key not in in_use and not v.deleting and now - self._wanted.get(key, -idle) >= idle
            ]
        for view in unused:
            try:
                self.delete(view.name, view.namespace)
            except (KubeApiError, ApiException) as error:
                log.warning("cannot remove GPU reservation pod %s yet: %s", view.name, describe(error))

    def delete(self, name: str, namespace: str) -> None:
        with self._lock:
            self._wanted.pop((namespace, name), None)
        try:
            self._retrier.call(
                f"delete pod {name}",
                lambda: self._core().delete_namespaced_pod(
                    name, namespace, grace_period_seconds=GRACE, _request_timeout=self._timeout()
                ),
            )
        except ApiException as error:
            if error.status != 404:
                raise KubeApiError(f"delete pod {name}: {describe(error)}") from error
        log.info("GPU reservation pod %s removed", name)
