"""Runs start-time forecasts in a child process at a lower CPU priority, so the loop never waits on one.

Contract: ``EtaWorker(every)`` paces and runs ``scheduler.engine.eta.compute``:
- ``due(now)``: no forecast in flight, and ``every`` seconds passed since the last one began, and ``SPACING``
  times what the last one took (a forecast of tens of thousands of jobs takes tens of seconds of a core: they
  come less often rather than keep a core of a small host busy);
- ``start(task)``: hand one to the child (started on first use: a ``spawn``ed process at ``nice`` +10 that
  imports only the core, so it inherits no thread, lock or database connection of the loop; it dies with the
  engine: ``lifeline``);
- ``poll()``: the finished forecast's ``(etas, seconds)`` once, else None; a forecast that raised (or a child
  that died) is re-raised here once, and the next ``start`` gets a fresh child;
- ``close()``: end the child without waiting for a forecast in flight (it is terminated), and the pool's
  thread with it, so the process exits cleanly.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from scheduler.engine.eta import EtaTask, compute
from scheduler.engine.lifeline import die_with_parent

NICE = 10
SPACING = 10.0  # a forecast starts no sooner than this many times what the last one took after it began


def _child_start(parent: int) -> None:
    die_with_parent(parent)  # a SIGKILLed engine leaves no forecast running
    os.nice(NICE)


def _timed(task: EtaTask) -> tuple[dict[str, dict[str, Any]], float]:
    began = time.perf_counter()
    etas = compute(task)
    return etas, time.perf_counter() - began


class EtaWorker:
    def __init__(self, every: float) -> None:
        self.every = every
        self.last_start = -math.inf
        self.took = 0.0  # seconds the last finished forecast took
        self._pool: ProcessPoolExecutor | None = None
        self._future: Future[tuple[dict[str, dict[str, Any]], float]] | None = None

    def due(self, now: float) -> bool:
        return self._future is None and now - self.last_start >= max(self.every, SPACING * self.took)

    def start(self, task: EtaTask) -> None:
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(
                1, mp_context=context, initializer=_child_start, initargs=(os.getpid(),)
            )
        self.last_start = task.now
        self._future = self._pool.submit(_timed, task)

    def poll(self) -> tuple[dict[str, dict[str, Any]], float] | None:
        future = self._future
        if future is None or not future.done():
            return None
        self._future = None
        try:
            done = future.result()
        except BaseException:
            self._drop_pool()  # a broken pool (the child died) never recovers: the next start makes a new one
            raise
        self.took = done[1]
        return done

    def _drop_pool(self, *, end: bool = False) -> None:
        """Shut the pool down; with ``end``, its child is terminated first (a forecast in flight is dropped)
        and the pool's thread joined: a pool left shutting down when the interpreter exits made it print a
        traceback (its wake-up pipe was closed)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            for process in list((pool._processes or {}).values()) if end else []:
                process.terminate()
            pool.shutdown(wait=end, cancel_futures=True)

    def close(self) -> None:
        self._future = None
        self._drop_pool(end=True)
