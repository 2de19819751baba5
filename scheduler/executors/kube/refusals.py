"""A create the API server refused: whether the replica's job fails or its replica waits, and until when.

Contract: ``judge(error, what)`` turns a non-transient answer to a create (``kube/retry.py`` already
retried the transient ones) into the error the engine acts on, carrying the API server's own message:

- 400, 422 (the body is invalid) and a 403 from admission (Pod Security, a Gatekeeper or Kyverno policy,
  any webhook that denies): ``ExecutorError``; the same body would be refused again, so the job fails.
- a 403 ``exceeded quota`` (a ResourceQuota), a 403 that Tide's own account may not create the object
  (RBAC: the service's setup, not the job) and a 404 (the jobs namespace is missing): ``LaunchDeferred``;
  these pass without the job changing, so the replica waits and is tried again.
- anything else: ``KubeApiError`` (the cycle fails and is tried again).

``Backoff`` keeps, per replica id, when a deferred replica may be tried again: ``initial`` seconds after
its first refusal, doubling up to ``cap``. Until then ``check`` raises the last ``LaunchDeferred`` again,
without a call to the API and in the same words (the job's message does not change each cycle);
``clear`` forgets a replica once it started or was forgotten.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kubernetes.client.exceptions import ApiException

from scheduler.executors.base import ExecutorError, LaunchDeferred
from scheduler.executors.kube.retry import KubeApiError, describe, status_of

QUOTA = "exceeded quota"
RBAC = "cannot create resource"


def judge(error: ApiException, what: str) -> Exception:
    """The error to raise for ``what`` (``pod NAME``, ``service NAME``) refused with ``error``."""
    message = status_of(error)[1]
    if error.status in (400, 422):
        return ExecutorError(f"Kubernetes refused {what}: {message}")
    if error.status == 404 or (error.status == 403 and (QUOTA in message or RBAC in message)):
        return LaunchDeferred(f"Kubernetes refused {what} for now ({error.status}): {message}")
    if error.status == 403:
        return ExecutorError(f"Kubernetes refused {what} ({error.status}): {message}")
    return KubeApiError(f"create {what}: {describe(error)}")


@dataclass
class _Wait:
    until: float
    attempts: int
    error: LaunchDeferred


@dataclass
class Backoff:
    """When each deferred replica may be tried again."""

    initial: float = 2.0
    cap: float = 60.0
    clock: Callable[[], float] = time.monotonic
    _waits: dict[int, _Wait] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self, replica_id: int) -> None:
        """Raise the replica's last refusal again while its wait has not passed."""
        with self._lock:
            wait = self._waits.get(replica_id)
            if wait is not None and self.clock() < wait.until:
                raise LaunchDeferred(str(wait.error))

    def defer(self, replica_id: int, error: LaunchDeferred) -> LaunchDeferred:
        """Note a refusal of ``replica_id``; return the error to raise."""
        with self._lock:
            attempts = self._waits[replica_id].attempts + 1 if replica_id in self._waits else 1
            delay = min(self.initial * 2 ** (attempts - 1), self.cap)
            said = LaunchDeferred(f"{error} (tried {attempts} times)" if attempts > 1 else str(error))
            self._waits[replica_id] = _Wait(self.clock() + delay, attempts, said)
        return said

    def clear(self, replica_id: int) -> None:
        with self._lock:
            self._waits.pop(replica_id, None)
