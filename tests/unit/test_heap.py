"""A long-lived process gives freed memory back: what a burst allocated and freed stays resident until the
heap is trimmed, and is returned by it (glibc; the engine trims each minute)."""

from __future__ import annotations

import platform
import time

import pytest

from api.server import heap

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")


def resident_mib() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def test_memory_a_burst_freed_stays_resident_until_the_heap_is_trimmed() -> None:
    before = resident_mib()
    burst = [bytearray(4000) for _ in range(25_000)]  # ~100 MiB from malloc, as a burst's rows would be
    last = bytearray(4000)  # allocated after the burst: the heap's top is in use, so free() alone keeps it
    del burst
    kept = resident_mib()
    assert kept - before > 60, "the freed burst stays resident"
    assert heap.trim()
    assert resident_mib() - before < 20, "the trim gave the burst's pages back"
    assert len(last) == 4000


def test_the_trimmer_trims_on_its_period_and_stops() -> None:
    trimmer = heap.Trimmer(0.05).start()
    burst = [bytearray(4000) for _ in range(25_000)]
    last = bytearray(4000)
    before = resident_mib()
    del burst
    deadline = 50
    while resident_mib() > before - 60 and deadline:
        time.sleep(0.05)
        deadline -= 1
    trimmer.stop()
    assert deadline, "the trimmer gave the freed burst back within 2.5 s"
    assert len(last) == 4000
