"""What a pod (the JSON the API serves) says about its replica: running, stopping, or ended and how.

Contract (pure): ``PodView.of(pod)`` reads a Tide pod: its replica id (``tide.dev/replica-id``), whether
it is being deleted (``metadata.deletionTimestamp``), and once it ended (phase ``Succeeded``/``Failed``)
its exit code: the container's own, or ``LOST_EXIT_CODE`` with the pod's reason when it never ran or was
evicted (a kubelet that rejects a pod for want of GPUs says ``OutOfnvidia.com/gpu``). ``gone`` describes a
pod that disappeared: the code it last showed, else a signal code when Tide deleted it, else lost.
While the pod is ``Pending`` its replica is alive but not started (``Observation.waiting``): why, when the
pod says something is wrong (``waiting_reason``: a container waiting for another reason than being created,
``ImagePullBackOff``, ``ErrImagePull``, ``CreateContainerConfigError`` ...; or ``PodScheduled`` false, a
volume that does not bind), else ``""``.
A pod's replica reports ``pid`` 1: the container's main process is PID 1 in its own PID namespace.
A fractional replica's pod names the pod that reserves its GPU (``reservation``, R20).
``ReplicaRecord`` is what the executor keeps per replica (its pod's view, whether Tide asked to stop it,
whether the pod is gone); ``identity(pod)`` reads the pod's project, job and replica index from its labels.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

from scheduler.executors.base import LOST_EXIT_CODE, Observation
from scheduler.executors.kube import names

POD_PID = 1


def _terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            return dict(terminated)
    return None


BENIGN = frozenset({"ContainerCreating", "PodInitializing"})


def waiting_reason(pod: dict[str, Any]) -> str | None:
    """Why a Pending pod has not started, for a person ("" when nothing is wrong); None once it started."""
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return None
    name = (pod.get("metadata") or {}).get("name")
    for container in status.get("initContainerStatuses") or [], status.get("containerStatuses") or []:
        for entry in container:
            waiting = (entry.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") and waiting["reason"] not in BENIGN:
                said = ": ".join(p for p in (waiting["reason"], waiting.get("message")) if p)
                return f"pod {name}: container {entry.get('name')}: {said}"
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            said = ": ".join(p for p in (condition.get("reason"), condition.get("message")) if p)
            return f"pod {name}: not scheduled: {said}"
    return ""


def replica_id_of(pod: dict[str, Any]) -> int | None:
    raw = ((pod.get("metadata") or {}).get("labels") or {}).get(names.REPLICA_ID, "")
    return int(raw) if raw.isdigit() else None


@dataclass(frozen=True, slots=True)
class PodView:
    """One pod of a replica, as last seen."""

    replica_id: int
    name: str
    uid: str
    node: str
    deleting: bool
    exit_code: int | None
    detail: str | None
    waiting: str | None = None
    reservation: str | None = None  # a fractional replica's: the pod that reserves its shared GPU (R20)

    @staticmethod
    def of(pod: dict[str, Any]) -> PodView | None:
        replica_id = replica_id_of(pod)
        if replica_id is None:
            return None
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        code, detail = None, None
        if status.get("phase") in ("Succeeded", "Failed"):
            terminated = _terminated(pod)
            if terminated is not None and terminated.get("exitCode") is not None:
                code = int(terminated["exitCode"])
            else:
                code = 0 if status.get("phase") == "Succeeded" else LOST_EXIT_CODE
            reason = status.get("reason") or (terminated or {}).get("reason")
            message = status.get("message") or (terminated or {}).get("message")
            if code == LOST_EXIT_CODE or status.get("reason"):
                detail = f"pod {meta.get('name')}: {': '.join(p for p in (reason, message) if p)}"
        return PodView(
            replica_id=replica_id,
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            node=str((pod.get("spec") or {}).get("nodeName", "")),
            deleting=bool(meta.get("deletionTimestamp")),
            exit_code=code,
            detail=detail,
            waiting=waiting_reason(pod) if code is None else None,
            reservation=(meta.get("labels") or {}).get(names.GPU_RESERVATION),
        )

    def observation(self) -> Observation:
        return Observation(
            replica_id=self.replica_id,
            pid=POD_PID,
            running=self.exit_code is None,
            exit_code=self.exit_code,
            stopping=self.deleting,
            detail=self.detail,
            waiting=self.waiting,
        )


def gone(last: PodView, *, deleted_by_tide: bool) -> Observation:
    """The replica of a pod that no longer exists."""
    if last.exit_code is not None:
        return Observation(
            last.replica_id, POD_PID, running=False, exit_code=last.exit_code, detail=last.detail
        )
    if deleted_by_tide:
        return Observation(last.replica_id, POD_PID, running=False, exit_code=-int(signal.SIGTERM))
    detail = f"pod {last.name} was deleted outside Tide"
    return Observation(last.replica_id, POD_PID, running=False, exit_code=LOST_EXIT_CODE, detail=detail)


@dataclass
class ReplicaRecord:
    """The executor's record of one replica's pod."""

    project: str
    job: str
    index: int
    view: PodView
    stop_requested: bool = False
    gone: bool = False
    unreserved: str | None = None  # a fraction stopped because its GPU's reservation vanished: why (R20)

    def observation(self) -> Observation:
        if self.unreserved is not None and (self.gone or self.view.exit_code is not None):
            return Observation(
                self.view.replica_id, POD_PID, running=False, exit_code=LOST_EXIT_CODE, detail=self.unreserved
            )
        if self.gone:
            return gone(self.view, deleted_by_tide=self.stop_requested)
        return self.view.observation()


def identity(obj: dict[str, Any]) -> tuple[str, str, int]:
    labels = obj["metadata"].get("labels") or {}
    index = labels.get(names.REPLICA, "")
    return labels.get(names.PROJECT, ""), labels.get(names.JOB, ""), int(index) if index.isdigit() else -1
