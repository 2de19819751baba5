"""Polled reads served from memory while the state they show has not changed (the dashboard's hot path).

Contract: ``StateVersion`` counts changes this service knows of: every API write (``bump``, called by
``WriteCounter`` when a non-GET request under the API prefix starts, and again when its answer starts,
after its transaction committed) plus the engine's write transactions (``Engine.changes``, bumped after
each one that wrote something, and when it becomes leader; from the engine process through
``api.server.engine.link``). ``ViewCache.get(key, build)`` returns the bytes and ETag of a read: from
memory when they were built at the current version less than ``max_age`` seconds ago, else from ``build``
(run in a worker thread). One build per key runs at a time; requests that arrive meanwhile wait for it and take
its answer when it is recent enough for them (it started at or after their version), so a burst of
pollers costs one database read, not one each. Changes another service instance made (a standby's view
of the leader's cycles) show within ``max_age`` plus one read: a view of the current version older than
``max_age`` (but not twice that) is answered while one rebuild runs in the background, so pollers never
queue behind a rebuild that only looks for such changes (a failed rebuild drops the view). A read after
a write of this service always sees it: the write bumped the version first. At most ``max_entries`` keys are kept (the oldest goes first), so a
client varying query strings cannot grow it without bound. A build may return ``Payload`` instead of bytes
to send headers along with the body (a paged read's ``X-Total-Count``); they are kept with the view.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class StateVersion:
    def __init__(self, cycles: Callable[[], int] = lambda: 0) -> None:
        self.cycles = cycles  # the engine's change count, once the service runs
        self.writes = 0

    def bump(self) -> None:
        self.writes += 1

    def current(self) -> int:
        return self.writes + self.cycles()


@dataclass(frozen=True, slots=True)
class Payload:
    """A built answer with headers of its own (kept with the view and covered by its ETag: a poller's 304
    must not leave it with a stale header)."""

    body: bytes
    headers: dict[str, str]


Build = Callable[[], bytes | Payload]


@dataclass(frozen=True, slots=True)
class View:
    version: int
    built_at: float
    body: bytes
    etag: str
    headers: tuple[tuple[str, str], ...] = ()


def etag_of(body: bytes) -> str:
    return f'W/"{hashlib.blake2b(body, digest_size=16).hexdigest()}"'


class ViewCache:
    def __init__(
        self,
        version: StateVersion,
        *,
        max_age: float = 1.0,
        max_entries: int = 64,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.version = version
        self.clock = clock
        self.max_age = max_age
        self.max_entries = max_entries
        self._views: OrderedDict[str, View] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}
        self._refreshing: dict[str, asyncio.Task[None]] = {}

    def _view(self, key: str, version: int, max_age: float) -> View | None:
        """The view of ``key`` if it was built at ``version`` or later, at most ``max_age`` seconds ago."""
        view = self._views.get(key)
        if view is None or view.version < version or self.clock() - view.built_at > max_age:
            return None
        return view

    async def get(self, key: str, build: Build) -> View:
        wanted = self.version.current()
        view = self._view(key, wanted, self.max_age)
        if view is not None:
            return view
        view = self._view(key, wanted, 2 * self.max_age)  # aged, not twice as old: served while rebuilt
        if view is not None:  # only another instance's changes can be missing: nobody waits for them
            self._refresh(key, build)
            return view
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        try:
            async with lock:
                return await self._build(key, wanted, build)
        finally:
            if key not in self._views and not lock.locked():
                self._locks.pop(key, None)  # a failed build (a 404) leaves no lock behind

    def _refresh(self, key: str, build: Build) -> None:
        if key not in self._refreshing:
            self._refreshing[key] = asyncio.create_task(self._refresh_now(key, build))

    async def _refresh_now(self, key: str, build: Build) -> None:
        try:
            lock = self._locks.setdefault(key, asyncio.Lock())
            async with lock:
                await self._build(key, self.version.current(), build)
        except Exception:  # the database went away: the next request builds, and gets the error
            self._views.pop(key, None)
        finally:
            self._refreshing.pop(key, None)

    async def _build(self, key: str, wanted: int, build: Build) -> View:
        view = self._view(key, wanted, self.max_age)  # built while this request waited
        if view is not None:
            return view
        version, started = self.version.current(), self.clock()  # before reading: a write meanwhile
        built = await run_in_threadpool(build)  # makes this view stale at once
        view = _view_of(built, version, started)
        self._views[key] = view
        self._views.move_to_end(key)
        while len(self._views) > self.max_entries:
            old, _ = self._views.popitem(last=False)
            self._locks.pop(old, None)
        return view


def _view_of(built: bytes | Payload, version: int, started: float) -> View:
    if not isinstance(built, Payload):
        return View(version=version, built_at=started, body=built, etag=etag_of(built))
    headers = tuple(built.headers.items())
    tag = etag_of(built.body + repr(headers).encode())
    return View(version=version, built_at=started, body=built.body, etag=tag, headers=headers)


def cached_response(view: View) -> Response:
    return Response(
        view.body, media_type="application/json", headers={"ETag": view.etag, **dict(view.headers)}
    )


class WriteCounter:
    """ASGI middleware: bump the state version after every request that may have changed something."""

    def __init__(self, app: ASGIApp, version: StateVersion, prefix: str) -> None:
        self.app = app
        self.version = version
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] in SAFE_METHODS
            or not scope["path"].startswith(self.prefix)
        ):
            await self.app(scope, receive, send)
            return
        self.version.bump()  # before: a view built while the write runs is stale once it ends
        bumped = False

        async def answer(message: Message) -> None:
            nonlocal bumped
            if message["type"] == "http.response.start":
                bumped = True
                self.version.bump()  # committed, not yet answered: a read after the answer sees it
            await send(message)

        try:
            await self.app(scope, receive, answer)
        finally:
            if not bumped:
                self.version.bump()
