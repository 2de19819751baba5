"""What the fake API server checks on create: the Kubernetes JSON schema (strict) and object names.

Contract: ``validated(resource, ns, body)`` returns the body with ``apiVersion``/``kind`` filled in, or
raises ``ApiError`` 400/422 with a Status message as a real API server words it (roughly). Pods and
Services are named by a DNS-1123 label, Secrets, Events and NetworkPolicies by a DNS-1123 subdomain.
"""

from __future__ import annotations

import re

import kubernetes_validate

from kubefake.store import ApiError, Obj

SCHEMA_VERSION = "1.30"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
KINDS = {
    "pods": "Pod",
    "services": "Service",
    "secrets": "Secret",
    "events": "Event",
    "networkpolicies": "NetworkPolicy",
}
API_VERSIONS = {"networkpolicies": "networking.k8s.io/v1"}
SUBDOMAIN_NAMED = ("Secret", "Event", "NetworkPolicy")


def validated(resource: str, ns: str, body: Obj | None) -> Obj:
    """What the API server checks on create that matters here: the schema (strict) and names."""
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the request body is not a JSON object")
    kind = KINDS[resource]
    body.setdefault("apiVersion", API_VERSIONS.get(resource, "v1"))
    body.setdefault("kind", kind)
    if body["kind"] != kind:
        raise ApiError(400, "BadRequest", f"expected kind {kind}, got {body['kind']}")
    try:
        kubernetes_validate.validate(body, SCHEMA_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        raise ApiError(422, "Invalid", f"{kind} is invalid: {str(error).splitlines()[0]}") from error
    meta = body.get("metadata") or {}
    name = meta.get("name", "")
    if kind in SUBDOMAIN_NAMED:
        if not DNS_SUBDOMAIN.match(name) or len(name) > 253:
            raise ApiError(
                422, "Invalid", f'{kind} "{name}" is invalid: metadata.name: must be a DNS-1123 subdomain'
            )
    elif not DNS_LABEL.match(name) or len(name) > 63:
        raise ApiError(422, "Invalid", f'{kind} "{name}" is invalid: metadata.name: must be a DNS-1123 label')
    if meta.get("namespace") not in (None, ns):
        raise ApiError(
            400, "BadRequest", "the namespace of the object does not match the namespace of the request"
        )
    for key, value in (meta.get("labels") or {}).items():
        if len(value) > 63 or (value and not re.match(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", value)):
            raise ApiError(422, "Invalid", f'{kind} "{name}" is invalid: metadata.labels: {key}={value!r}')
    return body
