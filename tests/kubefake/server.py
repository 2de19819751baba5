"""A fake Kubernetes API server: real HTTP, the REST paths and semantics the ``kubernetes`` client uses.

Contract: ``FakeKubeApi().start()`` serves on a free port of 127.0.0.1 (``url``); ``kubeconfig(path)``
writes a kubeconfig pointing at it, so the real client is configured as it would be for a cluster.
Served (core/v1, networking.k8s.io/v1 NetworkPolicies and coordination.k8s.io/v1 Leases): nodes (list, get,
watch), pods in all namespaces (``/api/v1/pods``: list, watch), pods, services, secrets, events and
networkpolicies in any namespace (list, get, create, delete, watch; secrets also PUT and merge PATCH,
``stringData`` folded into ``data``: see ``secrets.py``), pods merge PATCH (labels, annotations),
``pods/{name}/log``, and Leases (list, get, create, replace with optimistic concurrency, delete:
``leases.py``). Lists carry ``metadata.resourceVersion``; ``?watch=true``
streams newline-delimited ``{"type", "object"}`` events with chunked encoding from the given
``resourceVersion`` (or synthetic ADDED events without one) until ``timeoutSeconds``; a
resourceVersion older than the last ``compact()`` gets an ``ERROR`` event carrying a 410 ``Expired``
Status, as a real server does. Creates are validated against the Kubernetes JSON schema (strict: an
unknown field is a 422) and answer 409 ``AlreadyExists`` for a taken name; deletes honour
``gracePeriodSeconds`` (a pod goes terminating with ``deletionTimestamp`` and disappears once its
container stopped; see ``kubelet.py``); unknown objects are 404. A garbage collector (``garbage_collector``,
on by default) deletes at once the objects whose ownerReferences name an object being deleted.

Test controls: ``requests`` (every request, in order), ``fail(...)`` (inject a status or a slow answer
into the next matching requests), ``drop_watches()`` (cut every open watch connection mid-stream),
``refuse_watches(code)`` (new watches fail until ``refuse_watches(None)``), ``compact()``, and the
node/pod helpers below. It is a fake: no scheduler, no controllers but that garbage collector, no
authentication, no RBAC, no network (a NetworkPolicy is stored, never enforced).

Process mode: ``FakeKubeApi(processes=ProcessOptions(work_dir=..., base_env={...}))`` runs each admitted
pod's container as a real local process (``processes.py``; the image is ignored, ``base_env`` plays its
environment; how env, Service names and volume mounts are mapped is in ``containers.py``), serves the
process's output as the pod's log, and ``stop()`` kills every process it started. Off by default.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from kubefake.faults import Fault, Request
from kubefake.handler import handler_for
from kubefake.kubelet import Kubelets, node_object
from kubefake.leases import LEASE_ROUTE, handle_lease
from kubefake.processes import ProcessOptions, ProcessRuntime
from kubefake.secrets import merge_patched, replaced, stored_secret
from kubefake.store import ApiError, Obj, Store, now_rfc3339, parse_selector
from kubefake.validate import validated

ROUTES = [
    (re.compile(r"^/api/v1/nodes$"), "nodes", False),
    (re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)$"), "nodes", True),
    (re.compile(r"^/api/v1/pods$"), "pods", False),  # every namespace: list and watch only
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<res>pods|services|secrets|events)$"), None, False),
    (
        re.compile(
            r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<res>pods|services|secrets|events)/(?P<name>[^/]+)$"
        ),
        None,
        True,
    ),
    (
        re.compile(r"^/apis/networking.k8s.io/v1/namespaces/(?P<ns>[^/]+)/networkpolicies$"),
        "networkpolicies",
        False,
    ),
    (
        re.compile(r"^/apis/networking.k8s.io/v1/namespaces/(?P<ns>[^/]+)/networkpolicies/(?P<name>[^/]+)$"),
        "networkpolicies",
        True,
    ),
]
LIST_KINDS = {
    "nodes": "NodeList",
    "pods": "PodList",
    "services": "ServiceList",
    "secrets": "SecretList",
    "events": "EventList",
    "networkpolicies": "NetworkPolicyList",
}
API_VERSIONS = {"networkpolicies": "networking.k8s.io/v1"}
LOG_ROUTE = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log$")


@dataclass
class _Watches:
    epoch: int = 0
    refusal: int | None = None


class FakeKubeApi:
    """The server, its store, its kubelets and the test controls; ``processes`` turns on process mode."""

    def __init__(self, *, sigterm_seconds: float = 0.05, processes: ProcessOptions | None = None) -> None:
        self.store = Store()
        self.processes = ProcessRuntime(processes) if processes is not None else None
        self.kubelets = Kubelets(self.store, sigterm_seconds=sigterm_seconds, processes=self.processes)
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self.on_request: Callable[[Request], None] | None = (
            None  # called with each request before it is served
        )
        self.watches = _Watches()
        self.garbage_collector = True  # dependents of a deleted object go with it (ownerReferences)
        self._lock = threading.Lock()
        self._stopping = False
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(self))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="kubefake", daemon=True)

    # life cycle -------------------------------------------------------------------------------------
    def start(self) -> FakeKubeApi:
        self._thread.start()
        self.kubelets.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        self.kubelets.stop()
        self.drop_watches()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "fake-token"}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "tester", "namespace": namespace}}
            ],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # test controls ----------------------------------------------------------------------------------
    def fail(self, method: str, path: str, code: int | None, **options: Any) -> Fault:
        fault = Fault(method, path, code, **options)
        with self._lock:
            self.faults.append(fault)
        return fault

    def drop_watches(self) -> None:
        """Cut every open watch connection without ending its stream (a dropped TCP connection)."""
        with self.store.changed:
            self.watches.epoch += 1
            self.store.changed.notify_all()

    def refuse_watches(self, code: int | None) -> None:
        self.watches.refusal = code
        if code is not None:
            self.drop_watches()

    def compact(self) -> int:
        return self.store.compact()

    def calls(self, method: str, path: str = "", *, watch: bool | None = None) -> list[Request]:
        return [
            r
            for r in list(self.requests)
            if r.method == method and re.search(path, r.path) and (watch is None or r.watch == watch)
        ]

    def add_node(self, name: str, gpus: int, **options: Any) -> Obj:
        return self.store.create("nodes", "", node_object(name, gpus, **options))

    def set_node(
        self,
        name: str,
        *,
        gpus: int | None = None,
        ready: bool | None = None,
        unschedulable: bool | None = None,
        taints: list[Obj] | None = None,
    ) -> Obj:
        def change(node: Obj) -> None:
            if gpus is not None:
                node["status"]["allocatable"]["nvidia.com/gpu"] = str(gpus)
            if ready is not None:
                condition = node["status"]["conditions"][0]
                condition.update(status="True" if ready else "False", lastTransitionTime=now_rfc3339())
            if unschedulable is not None:
                node["spec"]["unschedulable"] = unschedulable
            if taints is not None:
                node["spec"]["taints"] = taints

        return self.store.update("nodes", "", name, change)

    def remove_node(self, name: str) -> None:
        self.store.remove("nodes", "", name)

    def pods(self, namespace: str = "default", selector: str | None = None) -> list[Obj]:
        return self.store.list("pods", namespace, selector)[0]

    def pod(self, namespace: str, name: str) -> Obj:
        return self.store.get("pods", namespace, name)

    def finish(self, namespace: str, name: str, exit_code: int) -> None:
        self.kubelets.finish(namespace, name, exit_code)

    def delete_pod_behind_tides_back(self, namespace: str, name: str) -> None:
        """Someone (an admin, the node controller) removes a pod at once."""
        self.store.remove("pods", namespace, name)

    # request handling -------------------------------------------------------------------------------
    def fault_for(self, request: Request) -> Fault | None:
        hook = self.on_request
        if hook is not None:
            hook(request)  # before the request is carried out: a test may crash the client here
        with self._lock:
            self.requests.append(request)
            for fault in self.faults:
                if fault.matches(request):
                    fault.hits += 1
                    return fault
        return None

    def handle(self, request: Request, body: Obj | None) -> tuple[int, Obj | str]:
        if (match := LOG_ROUTE.match(request.path)) and request.method == "GET":
            return 200, self._log(match["ns"], match["name"], request.query)
        if match := LEASE_ROUTE.match(request.path):
            return handle_lease(self.store, request.method, match["ns"], match["name"], body)
        for pattern, fixed, named in ROUTES:
            match = pattern.match(request.path)
            if match is None:
                continue
            groups = match.groupdict()
            resource = fixed or groups["res"]
            ns = groups.get("ns")
            if named:
                return self._object(request, resource, ns or "", groups["name"], body)
            return self._collection(request, resource, ns, body)
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({request.path})")

    def _collection(
        self, request: Request, resource: str, ns: str | None, body: Obj | None
    ) -> tuple[int, Obj]:
        method, query = request.method, request.query
        if method == "GET":
            items, rv = self.store.list(
                resource, ns if resource != "nodes" else None, query.get("labelSelector")
            )
            return 200, {
                "kind": LIST_KINDS[resource],
                "apiVersion": API_VERSIONS.get(resource, "v1"),
                "metadata": {"resourceVersion": str(rv)},
                "items": items,
            }
        if method == "POST" and resource != "nodes" and ns is not None:
            obj = validated(resource, ns, body)
            if resource == "pods":
                obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
            if resource == "secrets":
                obj = stored_secret(obj)
            return 201, self.store.create(resource, ns, obj)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {resource}")

    def _object(
        self, request: Request, resource: str, ns: str, name: str, body: Obj | None
    ) -> tuple[int, Obj]:
        method, query = request.method, request.query
        if method == "GET":
            return 200, self.store.get(resource, ns, name)
        if method == "DELETE" and resource == "pods":
            return 200, self._delete_pod(ns, name, query, body)
        if method == "DELETE" and resource in ("services", "secrets", "networkpolicies", "events"):
            removed = self.store.remove(resource, ns, name)  # the API answers with the deleted object
            if self.garbage_collector:
                self._collect(ns, str(removed["metadata"].get("uid")))
            return 200, removed
        if method == "PATCH" and resource == "pods":
            return 200, self._patch_pod(ns, name, body)
        if method in ("PUT", "PATCH") and resource == "secrets":
            return 200, self._replace_secret(method, ns, name, body)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {resource}/{name}")

    def _delete_pod(self, ns: str, name: str, query: dict[str, str], body: Obj | None) -> Obj:
        pod = self.store.get("pods", ns, name)
        grace_text = query.get("gracePeriodSeconds") or (body or {}).get("gracePeriodSeconds")
        grace = (
            int(grace_text)
            if grace_text is not None
            else int(pod["spec"].get("terminationGracePeriodSeconds", 30))
        )
        preconditions = (body or {}).get("preconditions") or {}
        if preconditions.get("uid") and preconditions["uid"] != pod["metadata"]["uid"]:
            raise ApiError(
                409, "Conflict", f"Precondition failed: UID in precondition: {preconditions['uid']}"
            )
        if grace == 0 or pod["status"].get("phase") in ("Succeeded", "Failed", "Pending"):
            return self.store.remove("pods", ns, name)
        meta = pod["metadata"]
        if meta.get("deletionTimestamp") and int(meta.get("deletionGracePeriodSeconds", 0)) <= grace:
            return pod  # a deletion is under way; a longer grace never extends it

        def mark(p: Obj) -> None:
            deadline = time.time() + grace
            p["metadata"]["deletionTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(deadline))
            p["metadata"]["deletionGracePeriodSeconds"] = grace

        return self.store.update("pods", ns, name, mark)

    def _collect(self, ns: str, uid: str) -> None:
        """Kubernetes' garbage collector, in the background policy and at once: the dependents of the object
        with ``uid`` (an ownerReference to it) are deleted, pods with their grace period."""
        for resource in ("pods", "services", "secrets", "networkpolicies"):
            for obj in self.store.list(resource, ns, None)[0]:
                refs = obj["metadata"].get("ownerReferences") or []
                if not any(r.get("uid") == uid for r in refs):
                    continue
                name = obj["metadata"]["name"]
                with contextlib.suppress(ApiError):  # gone meanwhile
                    if resource == "pods":
                        self._delete_pod(ns, name, {}, None)
                    else:
                        self.store.remove(resource, ns, name)

    def _patch_pod(self, ns: str, name: str, body: Obj | None) -> Obj:
        """A merge patch of the pod's labels and annotations (what Tide patches: its leader label)."""
        if (
            not isinstance(body, dict)
            or set(body) - {"metadata"}
            or set(body.get("metadata") or {}) - {"labels", "annotations"}
        ):
            raise ApiError(
                422, "Invalid", "the fake patches a pod's metadata.labels and metadata.annotations only"
            )
        merged = merge_patched(self.store.get("pods", ns, name), body)
        return self.store.update(
            "pods",
            ns,
            name,
            lambda p: p["metadata"].update(
                labels=merged["metadata"].get("labels") or {},
                annotations=merged["metadata"].get("annotations") or {},
            ),
        )

    def _replace_secret(self, method: str, ns: str, name: str, body: Obj | None) -> Obj:
        old = self.store.get("secrets", ns, name)
        new = validated("secrets", ns, merge_patched(old, body) if method == "PATCH" else body)
        if new["metadata"].get("name") != name:
            raise ApiError(
                400,
                "BadRequest",
                f"the name of the object ({new['metadata'].get('name')}) does not match the name on the URL ({name})",
            )
        content = replaced(old, new)
        # the check and the write are not one transaction: fine for a fake with one writer per test
        return self.store.update("secrets", ns, name, lambda s: (s.clear(), s.update(content)))

    def _log(self, ns: str, name: str, query: dict[str, str]) -> str:
        pod = self.store.get("pods", ns, name)
        if self.processes is not None:
            text = self.processes.log_text(ns, name)
            if text is None:
                raise ApiError(400, "BadRequest", _waiting_message(pod))
            lines = text.splitlines()
        else:
            lines = self.kubelets.logs.get((ns, name), [])
        if "tailLines" in query:
            lines = lines[-int(query["tailLines"]) :] if int(query["tailLines"]) > 0 else []
        text = "".join(f"{line}\n" for line in lines)
        return text[-int(query["limitBytes"]) :] if "limitBytes" in query else text

    def watch_target(self, path: str) -> tuple[str, str | None]:
        """The resource and namespace (None: all) a watch on ``path`` streams; 404 for anything else."""
        for pattern, fixed, named in ROUTES:
            match = pattern.match(path)
            if match is not None and not named:
                return fixed or match["res"], match.groupdict().get("ns")
        raise ApiError(404, "NotFound", f"cannot watch {path}")

    def watch_events(self, resource: str, ns: str | None, query: dict[str, str], write: Any) -> None:
        """Stream events until the timeout, a drop, or the server stops. ``write(line)`` sends one."""
        terms = parse_selector(query.get("labelSelector"))
        deadline = time.monotonic() + float(query.get("timeoutSeconds", 1800))
        with self.store.changed:
            epoch = self.watches.epoch
            start = query.get("resourceVersion")
            if start in (None, "", "0"):
                cursor = self.store.rv
                initial = [("ADDED", o) for o in self.store.list(resource, ns, query.get("labelSelector"))[0]]
            else:
                cursor, initial = int(start), []
        for kind, obj in initial:
            write({"type": kind, "object": obj})
        while time.monotonic() < deadline and not self._stopping:
            with self.store.changed:
                if self.watches.epoch != epoch:
                    raise ConnectionAbortedError("watch dropped by the test")
                if cursor < self.store.compacted:
                    expired = ApiError(
                        410, "Expired", f"too old resource version: {cursor} ({self.store.compacted})"
                    )
                    events, error = [], expired
                else:
                    events, error = self.store.events_after(cursor, resource, ns, terms), None
                    if not events:
                        self.store.changed.wait(min(0.25, max(deadline - time.monotonic(), 0.0)))
                        continue
            if error is not None:
                write({"type": "ERROR", "object": error.status()})
                return
            for event in events:
                write({"type": event.type, "object": event.obj})
                cursor = event.rv


def _waiting_message(pod: Obj) -> str:
    """What a real API server answers for the log of a container that has not started."""
    container = pod["spec"]["containers"][0]["name"]
    statuses = pod["status"].get("containerStatuses") or [{}]
    reason = statuses[0].get("state", {}).get("waiting", {}).get("reason", "ContainerCreating")
    return f'container "{container}" in pod "{pod["metadata"]["name"]}" is waiting to start: {reason}'
