"""Wake-ups for the agents' long-polls (``api.server.routes.agent``), in this API process.

Contract: ``bump()`` says something an agent may wait for changed here (an agent's report: the master's
rendezvous port); ``wake()`` says the engine's ``changes`` counter moved (the engine link calls it, from
its thread, when the engine process reports a change; an in-process engine calls it as its
``on_change``). ``wait_change(snapshot, changes, timeout)`` returns once ``bump`` was called or the
engine's ``changes`` counter moved since ``snapshot()`` was taken, or ``timeout`` seconds passed. Waiters
sleep on an event each (no polling): thousands of job pods long-polling cost nothing while nothing
changes. Only a hint: a waiter reads the database again either way, so a wake-up missed costs latency,
never correctness. Safe to call ``bump``/``wake`` from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

_bumps = [0]
_waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
_lock = threading.Lock()


def bump() -> None:
    _bumps[0] += 1
    wake()


def wake() -> None:
    with _lock:
        waiting = list(_waiters)
    for loop, event in waiting:
        with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits there any more
            loop.call_soon_threadsafe(event.set)


def snapshot(engine_changes: int) -> tuple[int, int]:
    return (_bumps[0], engine_changes)


async def wait_change(seen: tuple[int, int], changes: Callable[[], int], timeout: float) -> None:
    if snapshot(changes()) != seen:
        return
    waiter = (asyncio.get_running_loop(), asyncio.Event())
    with _lock:
        _waiters.add(waiter)
    try:
        if snapshot(changes()) == seen:  # a change between the check and the registration is not lost
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter[1].wait(), timeout)
    finally:
        with _lock:
            _waiters.discard(waiter)
