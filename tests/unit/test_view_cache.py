"""The polled reads' cache (``api.server.cache.ViewCache``) on its own, with a clock of the test's.

A view is answered from memory while nothing changed; a write makes the next reader wait for a view built
after it (a read after a write sees it); a view only past its age (another instance may have changed
something) is answered at once while one rebuild runs behind it; a view much older is rebuilt first; a
rebuild that fails drops the view, so the next reader gets the error rather than old data.
"""

from __future__ import annotations

import asyncio

import pytest

from api.server.cache import StateVersion, ViewCache


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
