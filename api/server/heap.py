"""The C heap of a long-lived Tide process: fewer malloc arenas, and free memory handed back to the system.

Contract: glibc only (Linux); elsewhere every call does nothing and says so by returning False.

- ``limit_arenas(n)``: at most ``n`` malloc arenas (``mallopt(M_ARENA_MAX)``); call it before the process
  starts threads. By default glibc gives each thread that meets a locked arena one of its own, up to eight
  per core, and memory freed in one arena never serves another.
- ``trim()``: ``malloc_trim(0)``, which returns the free pages inside every arena to the system, not only the
  top of the main heap as ``free`` does by itself.
- ``Trimmer(every)``: a daemon thread that calls ``trim()`` every ``every`` seconds until ``stop()``.

Why: the scheduling engine allocates and frees most of a cycle's memory at once, and a burst of submits or
an outage's backlog makes one cycle far larger than the rest. Without a trim the process keeps that peak
resident for hours, spread over the heap in pages glibc holds for reuse (measured with ``bench/soak.py``:
the Python objects an engine held stayed flat while its resident memory rose 20 % after two bursts).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from functools import cache

M_ARENA_MAX = -8  # glibc's malloc.h


@cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim, libc.mallopt  # noqa: B018 - glibc's, absent from musl and macOS
    except (OSError, AttributeError):
        return None
    return libc


def limit_arenas(arenas: int) -> bool:
    libc = _libc()
    return libc is not None and libc.mallopt(M_ARENA_MAX, arenas) == 1


def trim() -> bool:
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


class Trimmer:
    def __init__(self, every: float) -> None:
        self.every = every
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tide-heap-trim", daemon=True)

    def start(self) -> Trimmer:
        if _libc() is not None:
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stopped.wait(self.every):
            trim()

    def stop(self) -> None:
        self._stopped.set()
