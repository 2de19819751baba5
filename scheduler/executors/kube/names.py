"""Names and labels of the objects Tide makes in Kubernetes: deterministic, valid, and never shared.

Contract (pure): ``pod_name(project, job, index, replica_id)`` is a DNS-1123 label of at most 63 characters
that only that replica ever gets: the store's replica id is unique, so creating it twice answers 409 and
Tide adopts the pod instead of duplicating it. ``service_name(project, job)`` is a DNS-1035 label (it must
start with a letter) for the job's headless Service. A short hash of the full ``project/job`` keeps two
jobs apart when truncation or dashes would make their readable parts equal (``a-b``/``c`` and ``a``/``b-c``).
Labels: ``tide.dev/project``, ``tide.dev/job``, ``tide.dev/role`` (``master``/``worker``),
``tide.dev/replica`` (the index), ``tide.dev/replica-id`` (the store's id) and
``app.kubernetes.io/managed-by=tide``, which is what adoption selects on. A fractional replica's pod (R20)
also carries ``tide.dev/gpu-reservation``, the name of the pod that reserves its shared GPU
(``kube/reservations.py``).
"""

from __future__ import annotations

import hashlib

from scheduler.elastic.launch import Role, role_of

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "tide"
PROJECT = "tide.dev/project"
JOB = "tide.dev/job"
ROLE = "tide.dev/role"
REPLICA = "tide.dev/replica"
REPLICA_ID = "tide.dev/replica-id"
GPU_IDS = "tide.dev/gpu-ids"
GPU_RESERVATION = "tide.dev/gpu-reservation"  # a fractional replica's pod: its GPU's reservation pod (R20)
GPU_SHARE = "tide.dev/gpu-share"  # a fractional replica's pod: its share of the GPU ("0.5")
MANAGED_SELECTOR = f"{MANAGED_BY}={MANAGER}"
_MAX = 63


def _digest(project: str, job: str) -> str:
    return hashlib.blake2b(f"{project}/{job}".encode(), digest_size=3).hexdigest()


def _readable(project: str, job: str, room: int) -> str:
    return f"{project}-{job}"[:room].rstrip("-")


def service_name(project: str, job: str) -> str:
    """``tide-<project>-<job>-<hash>``, cut to 63 characters."""
    suffix = f"-{_digest(project, job)}"
    return f"tide-{_readable(project, job, _MAX - len('tide-') - len(suffix))}{suffix}"


def pod_name(project: str, job: str, index: int, replica_id: int) -> str:
    """``tide-<project>-<job>-<hash>-<index>-<replica id>``, the readable part cut to fit 63 characters."""
    suffix = f"-{_digest(project, job)}-{index}-{replica_id}"
    return f"tide-{_readable(project, job, _MAX - len('tide-') - len(suffix))}{suffix}"


def pod_labels(project: str, job: str, index: int, replica_id: int) -> dict[str, str]:
    return {
        MANAGED_BY: MANAGER,
        PROJECT: project,
        JOB: job,
        ROLE: role_of(index).value,
        REPLICA: str(index),
        REPLICA_ID: str(replica_id),
    }


def master_selector(project: str, job: str) -> dict[str, str]:
    """What the job's headless Service selects: its master, the rendezvous host."""
    return {MANAGED_BY: MANAGER, PROJECT: project, JOB: job, ROLE: Role.MASTER.value}


def service_host(project: str, job: str, namespace: str) -> str:
    """The name every replica of the job resolves to reach the master (via the pod's DNS search path)."""
    return f"{service_name(project, job)}.{namespace}.svc"
