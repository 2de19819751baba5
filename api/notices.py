"""Wake-ups for the agents' long-polls (``api.agent_polls``), in this API process.

Contract: ``bump()`` says something an agent may wait for changed here (an agent's report: the master's
rendezvous port); ``wait_change(snapshot, engine, timeout)`` returns once ``bump`` was called or the
engine's ``changes`` counter moved since ``snapshot()`` was taken, or ``timeout`` seconds passed. Only a
hint: a waiter reads the database again either way, so a wake-up missed costs latency, never correctness.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

_POLL_S = 0.02
_bumps = [0]


def bump() -> None:
    _bumps[0] += 1


def snapshot(engine_changes: int) -> tuple[int, int]:
    return (_bumps[0], engine_changes)


async def wait_change(seen: tuple[int, int], changes: Callable[[], int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and snapshot(changes()) == seen:
        await asyncio.sleep(_POLL_S)
