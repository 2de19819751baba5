"""Tide's decisions as Kubernetes Events on the job's pods (``kubectl describe pod``, ``kubectl get events``).

Contract: ``event_body(pod, announcement, now)`` is a core/v1 Event about one pod (``involvedObject``: its
name, namespace and uid), reason ``Tide<Kind>`` (``TideStart``, ``TideGrow``, ``TideShrink``, ``TideEvict``,
``TideFailed``, ...; ``TideRefused`` on the job's Service when the API refused one of its pods), the
decision's reason text as its message, type ``Warning`` for what takes GPUs away
from a job against its will (an eviction, a shrink by reclaim, preemption, a limit, a quota, a lost node)
and a job that failed, ``Normal`` otherwise; source component ``tide``. ``EventPoster`` posts them from
a thread of its own, so the cycle never waits on the API server: ``post(body)`` only queues (and drops
what is over the rate: a burst of ``burst``, then ``per_second``; or over a full queue), and a post that
fails is logged and dropped, never retried and never raised: an Event is a courtesy, a launch never fails
for one.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from scheduler.executors.base import Announcement

log = logging.getLogger(__name__)
Body = dict[str, Any]
COMPONENT = "tide"
AGAINST_ITS_WILL = {"reclaim", "preempt", "limit", "quota", "node"}
WARNING_KINDS = {"evict", "failed", "refused"}
MAX_MESSAGE = 1024


def reason_of(kind: str) -> str:
    """``shrink`` -> ``TideShrink`` (an Event's reason is one CamelCase word)."""
    return "Tide" + "".join(part.capitalize() for part in kind.replace("_", "-").split("-"))


def event_type(announcement: Announcement) -> str:
    if announcement.kind in WARNING_KINDS or announcement.cause in AGAINST_ITS_WILL:
        return "Warning"
    return "Normal"


def event_body(obj: Body, announcement: Announcement, now: float) -> Body:
    """A core/v1 Event about ``obj`` (a pod unless its ``kind`` says otherwise; its ``metadata``: name,
    namespace, uid) saying ``announcement``."""
    meta = obj["metadata"]
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{secrets.token_hex(8)}", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": obj.get("kind") or "Pod",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "reason": reason_of(announcement.kind),
        "message": announcement.reason[:MAX_MESSAGE],
        "type": event_type(announcement),
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EventPoster:
    """Posts Events from a daemon thread: rate-limited, bounded, best effort."""

    def __init__(
        self,
        send: Callable[[Body], None],
        *,
        burst: int = 25,
        per_second: float = 1.0,
        capacity: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send = send
        self._burst, self._rate, self._clock = float(burst), per_second, clock
        self._tokens, self._at = float(burst), clock()
        self._queue: queue.Queue[Body | None] = queue.Queue(maxsize=capacity)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.posted = 0
        self.dropped = 0
        self.failed = 0

    def _allowed(self) -> bool:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def post(self, body: Body) -> None:
        """Queue ``body``; dropped (and counted) when over the rate or the queue is full."""
        with self._lock:
            if not self._allowed():
                self.dropped += 1
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kube-events", daemon=True)
                self._thread.start()
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        while (body := self._queue.get()) is not None:
            try:
                self._send(body)
                self.posted += 1
            except Exception as error:  # an Event is a courtesy: never fail anything for one
                self.failed += 1
                log.info("could not post an Event (%s): %s", body.get("reason"), error)
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until what was queued has been posted or dropped (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self) -> None:
        if self._thread is not None:
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(None)
