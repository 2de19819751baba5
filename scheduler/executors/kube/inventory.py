"""The cluster's GPU nodes as the core sees them, from Node objects kept current by a watch.

Contract: ``node_of(obj, ...)`` (pure) turns a Node into ``core.Node(name, gpus, schedulable, domain)``: ``gpus``
is ``status.allocatable["nvidia.com/gpu"]`` (a node without GPUs is left out); it is schedulable only
while its ``Ready`` condition is ``True``, it is not cordoned (``spec.unschedulable``) and it carries no
``NoSchedule``/``NoExecute`` taint that Tide's pods do not tolerate. ``blockers(obj, ...)`` says why not,
for people. ``domain`` (R17) is the value of the node label named by ``--topology-key`` (a rack or NVLink
domain label), ``None`` without the key or the label. ``Inventory`` holds the latest Node objects (fed by a
``Reflector``) and answers ``nodes()``.
GPUs that other workloads hold are not Tide's to place: ``Inventory`` also keeps, from a watch of every
pod in every namespace (``replace_pods``, ``apply_pod``), what each pod bound to a node and not ended
(phase neither ``Succeeded`` nor ``Failed``) requests of the GPU resource (``gpu_request``: as the
kubelet counts it, the larger of its containers' sum and its largest init container; a request, else the
limit, which is then the request). Those of pods that are not Tide's own (Tide's label in Tide's jobs
namespace, ``own_namespace``; with namespaces per project, ``is_own``) are subtracted from the node's ``gpus`` (never below 0).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.core.model import Node
from scheduler.executors.kube.names import MANAGED_BY, MANAGER, PROJECT

log = logging.getLogger(__name__)
Obj = dict[str, Any]
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
ENDED = ("Succeeded", "Failed")


def gpu_count(obj: Obj, resource: str) -> int:
    raw = str(((obj.get("status") or {}).get("allocatable") or {}).get(resource, "0"))
    try:
        return max(int(raw), 0)
    except ValueError:
        log.warning(
            "node %s: allocatable %s=%r is not a whole number", obj["metadata"]["name"], resource, raw
        )
        return 0


def tolerates(toleration: Mapping[str, str], taint: Mapping[str, str]) -> bool:
    """Kubernetes' rule: same effect (or any), and ``Exists`` on the key (or all keys) or ``Equal`` value."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get("value", "")


def blockers(obj: Obj, tolerations: Sequence[Mapping[str, str]]) -> list[str]:
    """Why no new replica may go to this node (empty when it may)."""
    found = []
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        found.append("not Ready")
    spec = obj.get("spec") or {}
    if spec.get("unschedulable"):
        found.append("cordoned")
    for taint in spec.get("taints") or []:
        if taint.get("effect") in BLOCKING_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            value = f"={taint['value']}" if taint.get("value") else ""
            found.append(f"tainted {taint.get('key')}{value}:{taint.get('effect')}")
    return found


def node_of(
    obj: Obj,
    resource: str,
    tolerations: Sequence[Mapping[str, str]],
    topology_key: str | None = None,
    taken: int = 0,
) -> Node | None:
    """The node as the core sees it; ``taken`` GPUs (held by other workloads) are not counted."""
    gpus = gpu_count(obj, resource)
    if gpus <= 0:
        return None
    labels = obj["metadata"].get("labels") or {}
    domain = str(labels[topology_key]) if topology_key and labels.get(topology_key) else None
    return Node(
        name=obj["metadata"]["name"],
        gpus=max(gpus - taken, 0),
        schedulable=not blockers(obj, tolerations),
        domain=domain,
    )


def _quantity(resources: Obj | None, resource: str) -> int:
    resources = resources or {}
    raw = (resources.get("requests") or {}).get(resource, (resources.get("limits") or {}).get(resource, 0))
    try:
        return max(int(str(raw)), 0)
    except ValueError:
        return 0


def gpu_request(pod: Obj, resource: str) -> int:
    """What ``pod`` requests of ``resource``, as the kubelet counts it against the node."""
    spec = pod.get("spec") or {}
    running = sum(_quantity(c.get("resources"), resource) for c in spec.get("containers") or [])
    init = max((_quantity(c.get("resources"), resource) for c in spec.get("initContainers") or []), default=0)
    return max(running, init)


@dataclass(frozen=True, slots=True)
class Holding:
    """One pod's hold on a node's GPUs."""

    namespace: str
    node: str
    gpus: int
    managed: bool  # it carries Tide's label
    project: str | None = None  # its tide.dev/project label


def holding_of(pod: Obj, resource: str) -> Holding | None:
    """The pod's hold on its node's GPUs; None when it holds none (unbound, ended, no GPUs)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in ENDED:
        return None
    gpus = gpu_request(pod, resource)
    if gpus <= 0:
        return None
    labels = meta.get("labels") or {}
    return Holding(
        str(meta.get("namespace", "")),
        str(spec["nodeName"]),
        gpus,
        labels.get(MANAGED_BY) == MANAGER,
        labels.get(PROJECT),
    )


class Inventory:
    """The latest Node objects; thread-safe (the watch writes, the engine reads)."""

    def __init__(
        self, resource: str, tolerations: Sequence[Mapping[str, str]], topology_key: str | None = None
    ) -> None:
        self.resource = resource
        self.tolerations = tuple(tolerations)
        self.topology_key = topology_key
        self.own_namespace: str | None = None  # Tide's jobs namespace: its managed pods there are its own
        # or, with namespaces per project: whether a managed pod (namespace, project) is this Tide's
        self.is_own: Callable[[str, str | None], bool] | None = None
        self._objects: dict[str, Obj] = {}
        self._holdings: dict[str, Holding] = {}  # by pod uid
        self._lock = threading.Lock()

    def replace_pods(self, items: list[Obj]) -> None:
        found = {str(o["metadata"].get("uid")): holding_of(o, self.resource) for o in items}
        with self._lock:
            self._holdings = {uid: h for uid, h in found.items() if h is not None}

    def apply_pod(self, kind: str, obj: Obj) -> None:
        uid = str(obj["metadata"].get("uid"))
        held = holding_of(obj, self.resource) if kind in ("ADDED", "MODIFIED") else None
        with self._lock:
            if held is None:
                self._holdings.pop(uid, None)
            else:
                self._holdings[uid] = held

    def taken(self) -> dict[str, int]:
        """GPUs per node that pods other than Tide's own hold."""
        counts: dict[str, int] = {}
        with self._lock:
            for held in self._holdings.values():
                if not self._own(held):
                    counts[held.node] = counts.get(held.node, 0) + held.gpus
        return counts

    def _own(self, held: Holding) -> bool:
        if not held.managed:
            return False
        if self.is_own is not None:
            return self.is_own(held.namespace, held.project)
        return held.namespace == self.own_namespace

    def replace(self, items: list[Obj]) -> None:
        with self._lock:
            self._objects = {o["metadata"]["name"]: o for o in items}

    def apply(self, kind: str, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        with self._lock:
            if kind == "DELETED":
                self._objects.pop(name, None)
            elif kind in ("ADDED", "MODIFIED"):
                before = self._objects.get(name)
                self._objects[name] = obj
                if before is not None and blockers(before, self.tolerations) != blockers(
                    obj, self.tolerations
                ):
                    log.info("node %s: %s", name, ", ".join(blockers(obj, self.tolerations)) or "schedulable")

    def nodes(self) -> tuple[Node, ...]:
        with self._lock:
            objects = list(self._objects.values())
        taken = self.taken()
        found = (
            node_of(
                o, self.resource, self.tolerations, self.topology_key, taken.get(o["metadata"]["name"], 0)
            )
            for o in objects
        )
        return tuple(sorted((n for n in found if n is not None), key=lambda n: n.name))

    def why(self, name: str) -> list[str]:
        with self._lock:
            obj = self._objects.get(name)
        return ["gone"] if obj is None else blockers(obj, self.tolerations)
