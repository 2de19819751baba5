"""The cluster's GPU nodes as the core sees them, from Node objects kept current by a watch.

Contract: ``node_of(obj, ...)`` (pure) turns a Node into ``core.Node(name, gpus, schedulable, domain)``: ``gpus``
is ``status.allocatable["nvidia.com/gpu"]`` (a node without GPUs is left out); it is schedulable only
while its ``Ready`` condition is ``True``, it is not cordoned (``spec.unschedulable``) and it carries no
``NoSchedule``/``NoExecute`` taint that Tide's pods do not tolerate. ``blockers(obj, ...)`` says why not,
for people. ``domain`` (R17) is the value of the node label named by ``--topology-key`` (a rack or NVLink
domain label), ``None`` without the key or the label. ``Inventory`` holds the latest Node objects (fed by a
``Reflector``) and answers ``nodes()``.
Tide assumes the GPUs of the nodes it selects are its own to place: pods that other schedulers put there
are not subtracted (select Tide's nodes with ``--node-selector``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.core.model import Node

log = logging.getLogger(__name__)
Obj = dict[str, Any]
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


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
    obj: Obj, resource: str, tolerations: Sequence[Mapping[str, str]], topology_key: str | None = None
) -> Node | None:
    gpus = gpu_count(obj, resource)
    if gpus <= 0:
        return None
    labels = obj["metadata"].get("labels") or {}
    domain = str(labels[topology_key]) if topology_key and labels.get(topology_key) else None
    return Node(
        name=obj["metadata"]["name"], gpus=gpus, schedulable=not blockers(obj, tolerations), domain=domain
    )


class Inventory:
    """The latest Node objects; thread-safe (the watch writes, the engine reads)."""

    def __init__(
        self, resource: str, tolerations: Sequence[Mapping[str, str]], topology_key: str | None = None
    ) -> None:
        self.resource = resource
        self.tolerations = tuple(tolerations)
        self.topology_key = topology_key
        self._objects: dict[str, Obj] = {}
        self._lock = threading.Lock()

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
        found = (node_of(o, self.resource, self.tolerations, self.topology_key) for o in objects)
        return tuple(sorted((n for n in found if n is not None), key=lambda n: n.name))

    def why(self, name: str) -> list[str]:
        with self._lock:
            obj = self._objects.get(name)
        return ["gone"] if obj is None else blockers(obj, self.tolerations)
