"""Keep a local copy of a Kubernetes collection current: list once, then watch, for as long as it runs.

Contract: ``Reflector.start()`` lists the collection (synchronously, through the ``Retrier``: when the API
cannot be reached it raises ``KubeApiError`` and nothing runs) and hands the items to ``on_list``; a
daemon thread then watches from the list's ``resourceVersion`` and hands every event to ``on_event``
(``ADDED``/``MODIFIED``/``DELETED`` with the object as the API serves it). It never loses an event:

- a watch that ends (the server's ``timeoutSeconds``) or drops (a broken connection) is resumed from the
  last resourceVersion it delivered (bookmarks included): ``resumes`` counts these;
- a ``410 Gone`` (the resourceVersion was compacted away, as an ``ERROR`` event or an HTTP status) makes
  it list again and hand the whole new list to ``on_list``: ``relists`` counts these;
- any other failure (5xx, 429, refused connection) waits with backoff (capped) and tries again.

``stop()`` ends the thread, cutting an open watch at once. Callbacks run on the reflector's thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from scheduler.executors.kube.retry import Retrier, describe

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class Reflector:
    """List + watch of one collection (``lister`` is a ``CoreV1Api.list_*`` method, ``args`` its path)."""

    def __init__(
        self,
        name: str,
        lister: Callable[..., Any],
        args: tuple[str, ...],
        *,
        to_dict: Callable[[Any], Any],
        on_list: Callable[[list[Obj]], None],
        on_event: Callable[[str, Obj], None],
        selector: str | None = None,
        retrier: Retrier | None = None,
        watch_seconds: int = 300,
        connect_timeout: float = 5.0,
    ) -> None:
        self.name = name
        self._lister, self._args, self._to_dict = lister, args, to_dict
        self._on_list, self._on_event = on_list, on_event
        self._selector = selector
        self._retrier = retrier or Retrier()
        self._watch_seconds = watch_seconds
        self._connect_timeout = connect_timeout
        self.resource_version: str | None = None
        self.lists = 0
        self.relists = 0
        self.resumes = 0
        self.last_error: str | None = None
        self._stopped = threading.Event()
        self._watch = watch.Watch()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._list()
        self._thread = threading.Thread(target=self._run, name=f"tide-watch-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the thread. ``Watch.stop`` cuts only a stream already open (and a stream that opens after it
        forgets it), so it is repeated until the thread has gone."""
        self._stopped.set()
        deadline = time.monotonic() + 10
        while self._thread is not None and self._thread.is_alive() and time.monotonic() < deadline:
            self._watch.stop()
            self._thread.join(timeout=0.05)

    def _list(self) -> None:
        answer = self._retrier.call(
            f"list {self.name}",
            lambda: self._lister(
                *self._args,
                label_selector=self._selector,
                _request_timeout=(self._connect_timeout, 30),
            ),
        )
        body = self._to_dict(answer)
        self.lists += 1
        self._on_list(list(body.get("items") or []))
        self.resource_version = str(body["metadata"]["resourceVersion"])

    def _run(self) -> None:
        failures = 0
        while not self._stopped.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                    self.relists += 1
                self._watch_once()
                failures = 0
            except ApiException as error:
                if error.status == 410:
                    log.info("watch of %s expired (410 Gone): listing again", self.name)
                    self.resource_version = None
                    continue
                failures += 1
                self._pause(error, failures)
            except Exception as error:  # a dropped connection, a timeout, a refused connection...
                failures += 1
                self._pause(error, failures)
            if not self._stopped.is_set():
                self.resumes += 1

    def _pause(self, error: BaseException, failures: int) -> None:
        self.last_error = describe(error)
        if failures > 1:  # a single drop is resumed at once; repeated failures back off
            delay = self._retrier.delay(min(failures - 2, 6), error)
            log.warning("watch of %s failed (%s); again in %.2f s", self.name, self.last_error, delay)
            self._stopped.wait(delay)

    def _watch_once(self) -> None:
        stream = self._watch.stream(
            self._lister,
            *self._args,
            label_selector=self._selector,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_seconds,
            _request_timeout=(self._connect_timeout, self._watch_seconds + 30),
        )
        for event in stream:
            if self._stopped.is_set():
                self._watch.stop()
                break
            raw: Obj = event["raw_object"]
            if event["type"] != "BOOKMARK":
                self._on_event(str(event["type"]), raw)
            version = (raw.get("metadata") or {}).get("resourceVersion")
            if version:
                self.resource_version = str(version)
