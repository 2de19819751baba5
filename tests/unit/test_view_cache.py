"""The polled reads' cache (``api.server.cache.ViewCache``) on its own, with a clock of the test's.

A view is answered from memory while nothing changed; a write makes the next reader wait for a view built
after it (a read after a write sees it); a view only past its age (another instance may have changed
something) is answered at once while one rebuild runs behind it; a view much older is rebuilt first; a
rebuild that fails drops the view, so the next reader gets the error rather than old data.
"""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Message, Receive, Scope, Send

from api.server.cache import StateVersion, ViewCache, WriteCounter


class Reads:
    """A build function whose answers are numbered, and a clock the test moves."""

    def __init__(self) -> None:
        self.count = 0
        self.now = 100.0
        self.fail = False

    def build(self) -> bytes:
        if self.fail:
            raise ConnectionError("the database went away")
        self.count += 1
        return str(self.count).encode()


async def _settled(cache: ViewCache) -> None:
    await asyncio.gather(*list(cache._refreshing.values()))


def test_views_follow_writes_and_age() -> None:
    async def scenario() -> None:
        reads, version = Reads(), StateVersion()
        cache = ViewCache(version, max_age=1.0, clock=lambda: reads.now)
        assert (await cache.get("k", reads.build)).body == b"1"
        assert (await cache.get("k", reads.build)).body == b"1"  # nothing changed: from memory
        version.bump()
        assert (await cache.get("k", reads.build)).body == b"2"  # after a write: rebuilt first
        reads.now += 1.5  # aged: answered now, rebuilt behind
        assert (await cache.get("k", reads.build)).body == b"2"
        await _settled(cache)
        assert (await cache.get("k", reads.build)).body == b"3"
        reads.now += 5  # far too old to answer: rebuilt first
        assert (await cache.get("k", reads.build)).body == b"4"

    asyncio.run(scenario())


def test_a_failed_rebuild_behind_an_aged_view_drops_it() -> None:
    async def scenario() -> None:
        reads = Reads()
        cache = ViewCache(StateVersion(), max_age=1.0, clock=lambda: reads.now)
        await cache.get("k", reads.build)
        reads.now += 1.5
        reads.fail = True
        assert (await cache.get("k", reads.build)).body == b"1"
        await _settled(cache)
        with pytest.raises(ConnectionError):
            await cache.get("k", reads.build)

    asyncio.run(scenario())


def test_a_view_of_what_nodes_show_stays_through_submits() -> None:
    async def scenario() -> None:
        reads, version = Reads(), StateVersion()
        cache = ViewCache(version, max_age=1.0, clock=lambda: reads.now)
        assert (await cache.get("nodes", reads.build, version=version.nodes)).body == b"1"
        version.bump(nodes=False)  # a submit: a new version, not of what nodes show
        assert (await cache.get("nodes", reads.build, version=version.nodes)).body == b"1"
        assert (await cache.get("all", reads.build)).body == b"2"  # the whole version moved
        version.bump()  # any other write
        assert (await cache.get("nodes", reads.build, version=version.nodes)).body == b"3"
        cycles = [0]
        version.cycles = lambda: cycles[0]
        cycles[0] += 1  # the engine wrote
        assert (await cache.get("nodes", reads.build, version=version.nodes)).body == b"4"

    asyncio.run(scenario())


def test_a_view_made_of_views_is_stale_after_a_change_during_its_build() -> None:
    """``get_async`` reads its version before its build awaits the parts: an engine write (counted once, after
    its commit) landing between the part's read and the view's is not hidden behind the new version."""

    async def scenario() -> None:
        reads, version = Reads(), StateVersion()
        cache = ViewCache(version, max_age=1.0, clock=lambda: reads.now)

        async def whole() -> bytes:
            part = await cache.get("part", reads.build, version=version.nodes)
            version.bump()  # a change right after the part was read
            return b"whole of " + part.body

        assert (await cache.get_async("whole", whole)).body == b"whole of 1"
        assert (await cache.get_async("whole", whole)).body == b"whole of 2"  # rebuilt: the change is seen

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("method", "path", "nodes"),
    [
        ("POST", "/api/v1/projects/p/jobs", False),
        ("POST", "/api/v1/projects/p/pytorchjobs", False),
        ("POST", "/api/v1/projects/p/jobs/j/checkpointed", False),
        ("DELETE", "/api/v1/projects/p/jobs/j", True),
        ("POST", "/api/v1/projects/p/jobs/j/replicas/3", True),
        ("POST", "/api/v1/nodes/n/cordon", True),
        ("PATCH", "/api/v1/projects/p", True),
        ("POST", "/api/v1/projects", True),
    ],
)
def test_only_submits_and_checkpoints_leave_what_nodes_show(method: str, path: str, nodes: bool) -> None:
    version = StateVersion()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def send(message: Message) -> None:
        pass

    async def receive() -> Message:
        return {"type": "http.request"}

    counter = WriteCounter(app, version, "/api/v1")
    asyncio.run(counter({"type": "http", "method": method, "path": path}, receive, send))
    assert version.current() == 2  # before and after: every write moves the whole version
    assert version.nodes() == (2 if nodes else 0)


def test_a_costly_view_is_kept_ten_times_its_build() -> None:
    """A view that took 0.5 s to build is kept 5 s (not ``max_age``, 1 s) for another instance's changes,
    answered while rebuilt up to 10 s, rebuilt first after that; a write still rebuilds it at once."""

    async def scenario() -> None:
        reads, version = Reads(), StateVersion()
        cache = ViewCache(version, max_age=1.0, clock=lambda: reads.now)

        def slow() -> bytes:
            reads.now += 0.5
            return reads.build()

        assert (await cache.get("k", slow)).body == b"1"
        reads.now += 3  # past max_age, within 10 x its build
        assert (await cache.get("k", slow)).body == b"1"
        assert not cache._refreshing
        reads.now += 3  # aged: answered now, rebuilt behind
        assert (await cache.get("k", slow)).body == b"1"
        await _settled(cache)
        assert (await cache.get("k", slow)).body == b"2"
        reads.now += 20  # far too old to answer: rebuilt first
        assert (await cache.get("k", slow)).body == b"3"
        version.bump()
        assert (await cache.get("k", slow)).body == b"4"

    asyncio.run(scenario())


def test_a_value_the_write_path_reads_is_built_once_per_change_of_its_version() -> None:
    """A submit's check of the node sizes: read once while nothing that nodes show changed, read again after
    such a change (not after a submit, which ``nodes`` does not count), or once it is past its age."""
    reads, version = Reads(), StateVersion()
    cache = ViewCache(version, max_age=1.0, clock=lambda: reads.now)
    sizes = version.nodes
    assert cache.value("sizes", reads.build, version=sizes) == b"1"
    assert cache.value("sizes", reads.build, version=sizes) == b"1"  # from memory
    version.bump(nodes=False)  # a submit: what nodes show did not change
    assert cache.value("sizes", reads.build, version=sizes) == b"1"
    version.bump()  # a cordon, a node gone
    assert cache.value("sizes", reads.build, version=sizes) == b"2"
    reads.now += 1.5  # past its age: another instance may have changed the nodes
    assert cache.value("sizes", reads.build, version=sizes) == b"3"
    assert reads.count == 3
