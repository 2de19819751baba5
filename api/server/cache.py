"""Polled reads served from memory while the state they show has not changed (the dashboard's hot path).

Contract: ``StateVersion`` counts changes this service knows of: every API write (``bump``, called by
``WriteCounter`` when a non-GET request under the API prefix starts, and again when its answer starts,
after its transaction committed) plus the engine's write transactions (``Engine.changes``, bumped after
each one that wrote something, and when it becomes leader; from the engine process through
``api.server.engine.link``). ``StateVersion.nodes`` counts fewer: the changes that may alter what nodes
show, every API write but a submit or a checkpoint report (``WriteCounter.NODELESS``) and the engine's
writes of nodes, jobs and replicas (``Engine.placements``: not its notes, fair shares, usage);
``StateVersion.node_rows`` fewer still: those API writes and the engine's writes of nodes (``Engine.node_rows``);
``StateVersion.rows`` all but those API writes. ``ViewCache.get(key, build)`` returns the bytes and ETag of a read: from
memory when they were built at the current version (``version=``: of that count, ``current`` unless told)
less than its age limit ago, else from ``build`` (run in a worker thread; ``get_async`` awaits one, a view made
of other views, which reads its version before those parts). The age limit is ``max_age``, or ``COST_AGES``
times what the view took to build if that is longer (megabytes of nodes at 10,240 nodes: rebuilt for
another instance's changes at most a tenth of the time). One build per key runs at a time; requests that
arrive meanwhile wait for it and take
its answer when it is recent enough for them (it started at or after their version), so a burst of
pollers costs one database read, not one each. Changes another service instance made (a standby's view
of the leader's cycles) show within the age limit plus one read: a view of the current version older than
its limit (but not twice that) is answered while one rebuild runs in the background, so pollers never
queue behind a rebuild that only looks for such changes (a failed rebuild drops the view). A read after
a write of this service always sees it: the write bumped the version first. At most ``max_entries`` keys are kept (the oldest goes first), so a
client varying query strings cannot grow it without bound. A build may return ``Payload`` instead of bytes
to send headers along with the body (a paged read's ``X-Total-Count``), an ETag of its own (one of the
parts it spliced, not of megabytes) and a ``value`` for views made of it; they are kept with the view.
``ViewCache.value(key, build, version=)`` is the same for a value a write path reads (from any thread, built
in the caller's): a submit's check of which node sizes exist reads them once per change of the nodes' version
(or ``max_age``), not once per submit.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar, cast

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
T = TypeVar("T")
COST_AGES = 10.0  # a view is kept at least this many times what it took to build: rebuilds <= 10 % of a core


class StateVersion:
    def __init__(self, cycles: Callable[[], int] = lambda: 0) -> None:
        self.cycles = cycles  # the engine's change count, once the service runs
        # the engine's count of its writes that may change what nodes show (None: every change counts)
        self.placements: Callable[[], int] | None = None
        # the engine's count of its writes that may change the nodes themselves (None: as ``placements``)
        self.node_rows_of: Callable[[], int] | None = None
        self.writes = 0
        self.node_writes = 0  # the API writes that may change what a node shows (not a submit)

    def bump(self, *, nodes: bool = True) -> None:
        self.writes += 1
        if nodes:
            self.node_writes += 1

    def current(self) -> int:
        return self.writes + self.cycles()

    def nodes(self) -> int:
        """A version of what nodes show (who holds which GPU, their states): the API writes but those that
        cannot touch them (``WriteCounter.NODELESS``: a submit only adds a pending job), and the engine's
        writes of nodes, jobs and replicas (``Engine.placements``: not its notes, fair shares, usage)."""
        return self.node_writes + (self.placements or self.cycles)()

    def node_rows(self) -> int:
        """A version of the nodes themselves (their sizes, whether they are schedulable), not of who holds
        their GPUs: the API writes but submits, and the engine's writes of nodes (``Engine.node_rows``); it
        moves whenever a node's row may have, and less often than ``nodes``."""
        return self.node_writes + (self.node_rows_of or self.placements or self.cycles)()

    def rows(self) -> int:
        """A version of everything but the jobs a submit adds (and a checkpoint report's time): of the
        projects' and departments' rows (their quotas, and the engine's fair shares and usage) and of what
        nodes show; it moves whenever ``nodes`` does."""
        return self.node_writes + self.cycles() + (self.placements or (lambda: 0))()


@dataclass(frozen=True, slots=True)
class Payload:
    """A built answer with headers of its own (kept with the view and covered by its ETag: a poller's 304
    must not leave it with a stale header)."""

    body: bytes
    headers: dict[str, str]
    etag: str | None = None  # one the build already knows (a hash of the parts it spliced), else the body's
    value: object = None  # what a view made of this one reads beside its body (kept with it, never sent)


Build = Callable[[], bytes | Payload]
AsyncBuild = Callable[[], Awaitable[bytes | Payload]]
Version = Callable[[], int]


@dataclass(frozen=True, slots=True)
class View:
    version: int
    built_at: float
    body: bytes
    etag: str
    headers: tuple[tuple[str, str], ...] = ()
    value: object = None  # ``Payload.value``
    cost: float = 0.0  # seconds its build took


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
        self._values: dict[str, tuple[int, float, object]] = {}  # ``value``'s: version, built at, value
        self._values_lock = threading.Lock()

    def _view(self, key: str, version: int, ages: float) -> View | None:
        """The view of ``key`` if it was built at ``version`` or later, at most ``ages`` times its age limit
        ago (``max_age``, or ``COST_AGES`` times what it took to build if that is longer)."""
        view = self._views.get(key)
        if view is None or view.version < version:
            return None
        if self.clock() - view.built_at > ages * max(self.max_age, COST_AGES * view.cost):
            return None
        return view

    def value(self, key: str, build: Callable[[], T], *, version: Version | None = None) -> T:
        """What ``build`` returned at ``version`` (``current`` unless told) less than ``max_age`` ago, else
        what it returns now (run in the caller's thread; two callers at once may both run it). One key, one
        ``build`` (of one type)."""
        wanted = (version or self.version.current)()
        kept = self._value_kept(key, wanted)
        if kept is not None:
            return cast(T, kept[0])
        return self._value_built(key, wanted, build)

    async def value_async(self, key: str, build: Callable[[], T], *, version: Version | None = None) -> T:
        """As ``value``, on the event loop: what is kept is answered there, ``build`` runs in a worker thread."""
        wanted = (version or self.version.current)()
        kept = self._value_kept(key, wanted)
        if kept is not None:
            return cast(T, kept[0])
        return await run_in_threadpool(self._value_built, key, wanted, build)

    def _value_kept(self, key: str, wanted: int) -> tuple[object] | None:
        with self._values_lock:
            kept = self._values.get(key)
        if kept is not None and kept[0] >= wanted and self.clock() - kept[1] <= self.max_age:
            return (kept[2],)
        return None

    def _value_built(self, key: str, wanted: int, build: Callable[[], T]) -> T:
        started = self.clock()
        built = build()
        with self._values_lock:
            self._values[key] = (wanted, started, built)
        return built

    async def get(self, key: str, build: Build, *, version: Version | None = None) -> View:
        """The view of ``key``, ``build`` run in a worker thread when it must be built. ``version``: the count
        of the changes it shows (``StateVersion.nodes``: fewer than ``current``, the default); one key, one
        version."""
        return await self.get_async(key, lambda: run_in_threadpool(build), version=version)

    async def get_async(self, key: str, build: AsyncBuild, *, version: Version | None = None) -> View:
        """As ``get``, ``build`` awaited in the event loop: a view made of other views (their ``get``s), which
        it awaits after this view's version was read, so that a change meanwhile leaves this one stale."""
        counted = version or self.version.current
        wanted = counted()
        view = self._view(key, wanted, 1)
        if view is not None:
            return view
        view = self._view(key, wanted, 2)  # aged, not twice as old: served while rebuilt
        if view is not None:  # only another instance's changes can be missing: nobody waits for them
            self._refresh(key, build, counted)
            return view
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        try:
            async with lock:
                return await self._build(key, wanted, build, counted)
        finally:
            if key not in self._views and not lock.locked():
                self._locks.pop(key, None)  # a failed build (a 404) leaves no lock behind

    def _refresh(self, key: str, build: AsyncBuild, counted: Version) -> None:
        if key not in self._refreshing:
            self._refreshing[key] = asyncio.create_task(self._refresh_now(key, build, counted))

    async def _refresh_now(self, key: str, build: AsyncBuild, counted: Version) -> None:
        try:
            lock = self._locks.setdefault(key, asyncio.Lock())
            async with lock:
                await self._build(key, counted(), build, counted)
        except Exception:  # the database went away: the next request builds, and gets the error
            self._views.pop(key, None)
        finally:
            self._refreshing.pop(key, None)

    async def _build(self, key: str, wanted: int, build: AsyncBuild, counted: Version) -> View:
        view = self._view(key, wanted, 1)  # built while this request waited
        if view is not None:
            return view
        version, started = counted(), self.clock()  # before reading: a write meanwhile
        built = await build()  # makes this view stale at once
        view = _view_of(built, version, started, self.clock() - started)
        self._views[key] = view
        self._views.move_to_end(key)
        while len(self._views) > self.max_entries:
            old, _ = self._views.popitem(last=False)
            self._locks.pop(old, None)
        return view


def _view_of(built: bytes | Payload, version: int, started: float, cost: float = 0.0) -> View:
    if not isinstance(built, Payload):
        return View(version=version, built_at=started, body=built, etag=etag_of(built), cost=cost)
    headers = tuple(built.headers.items())
    tag = built.etag or etag_of(built.body + repr(headers).encode())
    return View(
        version=version,
        built_at=started,
        body=built.body,
        etag=tag,
        headers=headers,
        value=built.value,
        cost=cost,
    )


def cached_response(view: View) -> Response:
    return Response(
        view.body, media_type="application/json", headers={"ETag": view.etag, **dict(view.headers)}
    )


class WriteCounter:
    """ASGI middleware: bump the state version after every request that may have changed something.

    ``NODELESS``: the writes (a ``POST`` to one of these paths under the prefix) that change nothing a node
    shows: a submit inserts a pending job (a finished job it replaces has no process left,
    ``api.server.services.jobs``), a checkpoint report a time. Every other write counts for nodes too."""

    NODELESS = re.compile(r"/projects/[^/]+/(?:jobs|pytorchjobs|jobs/[^/]+/checkpointed)/?")

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
        nodes = not (
            scope["method"] == "POST" and self.NODELESS.fullmatch(scope["path"], len(self.prefix)) is not None
        )
        self.version.bump(nodes=nodes)  # before: a view built while the write runs is stale once it ends
        bumped = False

        async def answer(message: Message) -> None:
            nonlocal bumped
            if message["type"] == "http.response.start":
                bumped = True
                self.version.bump(nodes=nodes)  # committed, not yet answered: a read after the answer sees it
            await send(message)

        try:
            await self.app(scope, receive, answer)
        finally:
            if not bumped:
                self.version.bump(nodes=nodes)
