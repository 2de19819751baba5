"""Leader election: exactly one ``tide serve`` schedules; the others stand by.

Contract: ``holds()`` returns True while this process is the leader, trying to become it when nobody is.
Three elections, one per ``leadership_for``:

- PostgreSQL (``--leader-election postgres``): a session-level advisory lock held on a dedicated connection,
  keyed by the schema, so the lock goes with the connection when the leader dies and a standby's next
  ``holds()`` takes over. If that connection breaks, ``holds()`` turns False at once (the lock may already
  be someone else's). It needs a session that lasts: not behind a transaction-pooling PgBouncer.
- SQLite: an exclusive ``flock`` on a file beside the database, released by the kernel when the process dies.
- A Kubernetes Lease (``--leader-election lease``, ``LeaseLeadership``), as client-go's ``leaderelection``
  does it: a ``coordination.k8s.io/v1`` Lease written with optimistic concurrency (a replace carries the
  ``resourceVersion`` read; a 409 means someone else wrote first). A thread renews it every
  ``retry_period``; the leader steps down when it could not renew for ``renew_deadline`` (less than the
  lease's duration), and a standby takes it only once the lease it observed has not changed for
  ``lease_duration`` by its own clock (no clock is compared with another machine's). ``release()`` empties
  the holder, so a standby takes over at its next try rather than after the duration.

``PodLabel`` (in a pod) marks this pod ``tide.dev/leader=true`` while it leads and removes the label when
it stands by, so that the Service ``tide`` routes to the leader alone (docs/kubernetes.md, "High
availability"); ``Labelled`` wraps any election with it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from scheduler.executors.kube.retry import describe
from scheduler.store.db import Database

log = logging.getLogger(__name__)

LOCK_SQL = "SELECT pg_try_advisory_lock(hashtext('tide-leader:' || current_schema()))"


class Leadership(Protocol):
    def holds(self) -> bool: ...

    def release(self) -> None: ...


class FileLeadership:
    """Leader while holding ``flock`` on ``path`` (SQLite: one scheduler per database file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def holds(self) -> bool:
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class AdvisoryLockLeadership:
    """Leader while holding a PostgreSQL advisory lock on a connection of our own."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._conn: Connection | None = None

    def holds(self) -> bool:
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT 1"))
                return True
            except DBAPIError:
                log.warning("lost the leader connection to the database; standing by")
                self._drop()
                return False
        try:
            conn = self.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            if conn.execute(text(LOCK_SQL)).scalar():
                self._conn = conn
                return True
            conn.close()
        except DBAPIError as error:
            log.warning("cannot reach the database to elect a leader: %s", error)
        return False

    def release(self) -> None:
        self._drop()

    def _drop(self) -> None:
        if self._conn is not None:
            with suppress(DBAPIError):
                self._conn.invalidate()  # really close it: a pooled connection would keep the lock
                self._conn.close()
            self._conn = None


def leadership_for(db: Database) -> Leadership:
    """The database's election: SQLite's file lock, else PostgreSQL's advisory lock."""
    path = db.sqlite_path
    if path is not None:
        return FileLeadership(path.with_name(path.name + ".leader"))
    return AdvisoryLockLeadership(db)


LEADER_LABEL = "tide.dev/leader"
LEASE_NAME = "tide-leader"


def identity() -> str:
    """Who this process is in a Lease: the pod's name (or the host's) and a random suffix, as client-go's."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    """client-go's defaults are 15, 10 and 2 seconds; ``of(duration)`` keeps their ratios."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    @classmethod
    def of(cls, duration: float) -> LeaseTiming:
        return cls(duration, duration * 2 / 3, duration * 2 / 15)


def _micro_time(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseLeadership:
    """Leader while holding the Lease ``name`` in ``namespace``, renewed by a thread of its own."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        *,
        name: str = LEASE_NAME,
        holder: str | None = None,
        timing: LeaseTiming = LeaseTiming(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self.holder = holder or identity()
        self.timing, self.clock = timing, clock
        self._leading_at: float | None = None  # our clock at the last renewal that succeeded while leading
        self._observed: tuple[Any, ...] | None = (
            None  # the lease's (holder, renewTime, transitions) seen last
        )
        self._observed_at = 0.0
        self._taken = False  # the last try found the lease held by another, alive
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _coordination(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self.api)

    def holds(self) -> bool:
        if self._thread is None:
            self.try_acquire_or_renew()  # the first answer without waiting a period
            self._thread = threading.Thread(target=self._renew, name="tide-lease", daemon=True)
            self._thread.start()
        with self._lock:
            at = self._leading_at
        return at is not None and self.clock() - at < self.timing.renew_deadline

    def _renew(self) -> None:
        while not self._stop.wait(self.timing.retry_period):
            self.try_acquire_or_renew()

    def try_acquire_or_renew(self) -> bool:
        """One try: take a free or expired lease, or renew ours. Any failure is a no, and is logged."""
        now = self.clock()
        try:
            won = self._try(now)
        except Exception as error:  # any failure (a refusal, no connection: urllib3's errors) is a no
            log.warning("cannot reach the Lease %s/%s: %s", self.namespace, self.name, describe(error))
            won = False
        with self._lock:
            if won:
                if self._leading_at is None:
                    log.info(
                        "this service holds the Lease %s/%s as %s", self.namespace, self.name, self.holder
                    )
                self._leading_at = now
            elif self._leading_at is not None and (
                now - self._leading_at >= self.timing.renew_deadline or self._taken
            ):
                log.warning("lost the Lease %s/%s; standing by", self.namespace, self.name)
                self._leading_at = None
        return won

    def _try(self, now: float) -> bool:
        self._taken = False
        api = self._coordination()
        spec = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": max(1, round(self.timing.lease_duration)),
            "renewTime": _micro_time(time.time()),
            "acquireTime": _micro_time(time.time()),
            "leaseTransitions": 0,
        }
        try:
            current = self.api.sanitize_for_serialization(
                api.read_namespaced_lease(self.name, self.namespace)
            )
        except ApiException as error:
            if error.status != 404:
                raise
            body = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
            return self._write(
                lambda: api.create_namespaced_lease(self.namespace, client.V1Lease.model_validate(body))
            )
        old = current.get("spec") or {}
        seen = (old.get("holderIdentity"), old.get("renewTime"), old.get("leaseTransitions"))
        if seen != self._observed:
            self._observed, self._observed_at = seen, now
        holder = old.get("holderIdentity") or ""
        mine = holder == self.holder
        duration = float(old.get("leaseDurationSeconds") or self.timing.lease_duration)
        if holder and not mine and now - self._observed_at < duration:
            self._taken = True  # someone else's, and alive as far as we can tell
            return False
        transitions = int(old.get("leaseTransitions") or 0)
        if mine:
            spec["acquireTime"] = old.get("acquireTime") or spec["acquireTime"]
            spec["leaseTransitions"] = transitions
        else:
            spec["leaseTransitions"] = transitions + 1
        current["spec"] = spec  # metadata.resourceVersion stays: a replace fails with 409 if it moved
        return self._write(
            lambda: api.replace_namespaced_lease(
                self.name, self.namespace, client.V1Lease.model_validate(current)
            )
        )

    def _write(self, call: Callable[[], Any]) -> bool:
        try:
            written = self.api.sanitize_for_serialization(call())
        except ApiException as error:
            if error.status in (409, 422):  # someone else wrote first (or created it meanwhile)
                return False
            raise
        spec = written.get("spec") or {}
        self._observed = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        self._observed_at = self.clock()
        return True

    def release(self) -> None:
        """Stop renewing; if we lead, empty the holder so that a standby takes over at its next try."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timing.retry_period + 5)
        with self._lock:
            leading, self._leading_at = self._leading_at is not None, None
        if not leading:
            return
        api = self._coordination()
        try:
            current = self.api.sanitize_for_serialization(
                api.read_namespaced_lease(self.name, self.namespace)
            )
            if (current.get("spec") or {}).get("holderIdentity") != self.holder:
                return
            current["spec"].update(
                holderIdentity="", leaseDurationSeconds=1, renewTime=_micro_time(time.time())
            )
            api.replace_namespaced_lease(self.name, self.namespace, client.V1Lease.model_validate(current))
        except Exception as error:  # any failure (a refusal, no connection: urllib3's errors) is a no
            log.warning("could not release the Lease %s/%s: %s", self.namespace, self.name, describe(error))


class PodLabel:
    """Sets or removes ``tide.dev/leader`` on this pod (``POD_NAME`` in ``namespace``)."""

    def __init__(self, api: client.ApiClient, namespace: str, pod: str) -> None:
        self.api, self.namespace, self.pod = api, namespace, pod
        self._failing = False  # a failure is logged once, not at every retry

    def mark(self, leading: bool) -> bool:
        patch = {"metadata": {"labels": {LEADER_LABEL: "true" if leading else None}}}
        try:
            client.CoreV1Api(self.api).patch_namespaced_pod(self.pod, self.namespace, patch)
        except Exception as error:  # any failure (a refusal, no connection: urllib3's errors) is a no
            (log.debug if self._failing else log.warning)(
                "cannot label pod %s/%s %s: %s", self.namespace, self.pod, LEADER_LABEL, describe(error)
            )
            self._failing = True
            return False
        self._failing = False
        return True


class Labelled:
    """An election whose every change is written on the pod's label (tried again each call until it is)."""

    def __init__(self, inner: Leadership, label: PodLabel) -> None:
        self.inner, self.label = inner, label
        self._marked: bool | None = None

    def holds(self) -> bool:
        leading = self.inner.holds()
        if leading != self._marked and self.label.mark(leading):
            self._marked = leading
        return leading

    def release(self) -> None:
        if self._marked:
            self.label.mark(False)
        self._marked = None
        self.inner.release()
