"""The fake API server's object store: what etcd and the API server's watch cache do, in memory.

Contract: objects are plain dicts in the JSON shape the Kubernetes API serves (camelCase), keyed by
``(resource, namespace, name)`` (namespace ``""`` for nodes). Every write bumps one global
``resourceVersion`` (like an etcd revision), stamps it on the object, and appends a watch event
(``ADDED``/``MODIFIED``/``DELETED``) to the history. ``compact()`` forgets the history up to now: a watch
from an older resourceVersion is then answered ``410 Gone``, as a real server does once etcd compacted.
``changed`` is a condition that writers notify, so watch streams can wait for new events.
"""

from __future__ import annotations

import copy
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
Key = tuple[str, str, str]


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    """An error the API server answers with a ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    def status(self) -> Obj:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


@dataclass(frozen=True)
class Event:
    rv: int
    resource: str
    namespace: str
    type: str
    obj: Obj


def parse_selector(selector: str | None) -> list[tuple[str, str, str | None]]:
    """Equality-based label selectors (``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``), comma-separated."""
    terms: list[tuple[str, str, str | None]] = []
    for raw in (selector or "").split(","):
        term = raw.strip()
        if not term:
            continue
        if "!=" in term:
            key, value = term.split("!=", 1)
            terms.append(("!=", key.strip(), value.strip()))
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            terms.append(("=", key.strip(), value.strip()))
        elif term.startswith("!"):
            terms.append(("!", term[1:].strip(), None))
        else:
            terms.append(("exists", term, None))
    return terms


def matches(obj: Obj, terms: list[tuple[str, str, str | None]]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for op, key, value in terms:
        if (
            (op == "=" and labels.get(key) != value)
            or (op == "!=" and labels.get(key) == value)
            or (op == "exists" and key not in labels)
            or (op == "!" and key in labels)
        ):
            return False
    return True


class Store:
    """Objects, the global resourceVersion and the watch history."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.rv = 1
        self.compacted = 0
        self.objects: dict[Key, Obj] = {}
        self.history: list[Event] = []

    def _record(self, resource: str, namespace: str, kind: str, obj: Obj) -> Obj:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append(Event(self.rv, resource, namespace, kind, copy.deepcopy(obj)))
        self.changed.notify_all()
        return copy.deepcopy(obj)

    def create(self, resource: str, namespace: str, obj: Obj) -> Obj:
        with self.changed:
            name = obj["metadata"]["name"]
            if (resource, namespace, name) in self.objects:
                raise ApiError(409, "AlreadyExists", f'{resource} "{name}" already exists')
            meta = obj["metadata"]
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339())
            if namespace:
                meta["namespace"] = namespace
            self.objects[(resource, namespace, name)] = obj
            return self._record(resource, namespace, "ADDED", obj)

    def get(self, resource: str, namespace: str, name: str) -> Obj:
        with self.changed:
            obj = self.objects.get((resource, namespace, name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
            return copy.deepcopy(obj)

    def update(self, resource: str, namespace: str, name: str, mutate: Any) -> Obj:
        """Apply ``mutate(obj)`` in place and record a MODIFIED event (404 when it is gone)."""
        with self.changed:
            obj = self.objects.get((resource, namespace, name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
            mutate(obj)
            return self._record(resource, namespace, "MODIFIED", obj)

    def remove(self, resource: str, namespace: str, name: str) -> Obj:
        with self.changed:
            obj = self.objects.pop((resource, namespace, name), None)
            if obj is None:
                raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
            return self._record(resource, namespace, "DELETED", obj)

    def items(self, resource: str, namespace: str | None = None) -> list[Obj]:
        with self.changed:
            return [
                copy.deepcopy(o)
                for (r, ns, _), o in sorted(self.objects.items())
                if r == resource and (namespace is None or ns == namespace)
            ]

    def list(self, resource: str, namespace: str | None, selector: str | None) -> tuple[list[Obj], int]:
        terms = parse_selector(selector)
        with self.changed:
            return [o for o in self.items(resource, namespace) if matches(o, terms)], self.rv

    def events_after(
        self, rv: int, resource: str, namespace: str | None, terms: list[tuple[str, str, str | None]]
    ) -> list[Event]:
        """Events after ``rv`` for this resource (caller holds ``changed``)."""
        return [
            e
            for e in self.history
            if e.rv > rv
            and e.resource == resource
            and (namespace is None or e.namespace == namespace)
            and matches(e.obj, terms)
        ]

    def compact(self) -> int:
        """Forget the history up to now: watches from an older resourceVersion get 410 Gone."""
        with self.changed:
            self.compacted = self.rv
            self.history.clear()
            return self.rv
