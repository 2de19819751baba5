"""Leases (``coordination.k8s.io/v1``) in the fake API server: what leader election reads and writes.

Contract: ``LEASE_ROUTE`` matches ``/apis/coordination.k8s.io/v1/namespaces/NS/leases[/NAME]``;
``handle_lease(store, method, ns, name, body)`` answers it as the real API server does for what client-go's
``leaderelection`` and Tide use: list and get; create (validated against the schema, strict; 409
``AlreadyExists`` for a taken name); replace (PUT), which requires ``metadata.resourceVersion`` and answers
409 ``Conflict`` with the real message when it is not the stored one (optimistic concurrency: two
candidates that read the same version cannot both write); delete. Every write bumps the global
resourceVersion (``store.py``), so a replace after another's write is always stale.
"""

from __future__ import annotations

import copy
import re

import kubernetes_validate

from kubefake.store import ApiError, Obj, Store

LEASE_ROUTE = re.compile(
    r"^/apis/coordination\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/leases(?:/(?P<name>[^/]+))?$"
)
API_VERSION = "coordination.k8s.io/v1"


def _validated(ns: str, body: Obj | None, name: str | None = None) -> Obj:
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the request body is not a JSON object")
    body.setdefault("apiVersion", API_VERSION)
    body.setdefault("kind", "Lease")
    try:
        kubernetes_validate.validate(body, "1.30", strict=True)
    except kubernetes_validate.ValidationError as error:
        raise ApiError(422, "Invalid", f"Lease is invalid: {str(error).splitlines()[0]}") from error
    meta = body.get("metadata") or {}
    if meta.get("namespace") not in (None, ns):
        raise ApiError(
            400, "BadRequest", "the namespace of the object does not match the namespace of the request"
        )
    if name is not None and meta.get("name") != name:
        raise ApiError(
            400,
            "BadRequest",
            f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})",
        )
    return body


def _replace(store: Store, ns: str, name: str, body: Obj | None) -> Obj:
    new = _validated(ns, body, name)
    wanted = new["metadata"].get("resourceVersion")
    if not wanted:
        raise ApiError(
            422,
            "Invalid",
            f'Lease.coordination.k8s.io "{name}" is invalid: metadata.resourceVersion: Invalid value: 0x0: '
            "must be specified for an update",
        )

    def write(old: Obj) -> None:
        if old["metadata"]["resourceVersion"] != wanted:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
            )
        kept = {k: old["metadata"][k] for k in ("name", "namespace", "uid", "creationTimestamp")}
        old.clear()
        old.update(copy.deepcopy(new))
        old["metadata"].update(kept)

    return store.update("leases", ns, name, write)  # the check and the write under the store's lock


def handle_lease(store: Store, method: str, ns: str, name: str | None, body: Obj | None) -> tuple[int, Obj]:
    if name is None and method == "GET":
        items, rv = store.list("leases", ns, None)
        return 200, {
            "kind": "LeaseList",
            "apiVersion": API_VERSION,
            "metadata": {"resourceVersion": str(rv)},
            "items": items,
        }
    if name is None and method == "POST":
        return 201, store.create("leases", ns, _validated(ns, body))
    if name is not None and method == "GET":
        return 200, store.get("leases", ns, name)
    if name is not None and method == "PUT":
        return 200, _replace(store, ns, name, body)
    if name is not None and method == "DELETE":
        return 200, store.remove("leases", ns, name)
    raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on leases")
