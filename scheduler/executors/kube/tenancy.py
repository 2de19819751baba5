"""Per-project namespaces, per-job NetworkPolicies and ownerReferences: what keeps jobs apart and tidy.

Contract (pure): ``project_namespace(project)`` is ``tide-<project>``, a DNS-1123 label of at most 63
characters (a long project name is cut and a short hash of the whole name added, so two projects never
share one). ``owner_reference(obj)`` points at a job's headless Service (its owner object: made before
the job's first pod, deleted after its last), with ``blockOwnerDeletion`` false, so that Kubernetes'
garbage collector removes the job's pods, NetworkPolicy and agent Secret once the Service is gone, should
Tide miss them. ``network_policy_body(project, job, namespace)`` admits ingress to the job's pods only from
pods of the same job (the rendezvous port, NCCL's ports, anything between them): another job's pods, in
the same namespace or another, cannot join its rendezvous. Job pods connect out to the service (the
agent's long-poll); nothing connects in to them from Tide, so no other ingress is needed.
"""

from __future__ import annotations

import hashlib
from typing import Any

from scheduler.executors.kube import names

Body = dict[str, Any]
NAMESPACE_PREFIX = "tide-"
_MAX = 63


def project_namespace(project: str) -> str:
    """``tide-<project>``; a name that would pass 63 characters is cut and ends with a hash of the project."""
    whole = f"{NAMESPACE_PREFIX}{project}"
    if len(whole) <= _MAX:
        return whole
    digest = hashlib.blake2b(project.encode(), digest_size=3).hexdigest()
    return f"{whole[: _MAX - len(digest) - 1].rstrip('-')}-{digest}"


def job_selector(project: str, job: str) -> dict[str, str]:
    """Every pod of the job (master and workers)."""
    return {names.MANAGED_BY: names.MANAGER, names.PROJECT: project, names.JOB: job}


def owner_reference(owner: Body) -> Body:
    """A reference to ``owner`` (a job's Service as the API answered it: its uid) for the job's objects."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner.get("apiVersion") or "v1",
        "kind": owner.get("kind") or "Service",
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": False,
        "controller": False,
    }


def network_policy_body(project: str, job: str, namespace: str) -> Body:
    """Ingress to the job's pods from the job's own pods only, on every port."""
    selector = job_selector(project, job)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": names.service_name(project, job),
            "namespace": namespace,
            "labels": dict(selector),
        },
        "spec": {
            "podSelector": {"matchLabels": dict(selector)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": dict(selector)}}]}],
        },
    }


def owned(body: Body, owner: Body | None) -> Body:
    """``body`` with ``owner``'s reference in its metadata (unchanged when the owner is not known)."""
    if owner is not None:
        body["metadata"]["ownerReferences"] = [owner_reference(owner)]
    return body
