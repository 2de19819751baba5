"""A long-lived process gives freed memory back: what a burst allocated and freed stays resident until the
heap is trimmed, and is returned by it (glibc; the engine trims each minute).

Each check runs in a fresh interpreter: in the test process, memory freed by earlier tests would serve the
burst without growing it."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

MEASURE = """
import time
from api.server import heap

def resident_mib():
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024

before = resident_mib()
burst = [bytearray(4000) for _ in range(25_000)]  # ~100 MiB from malloc, as a burst's rows would be
last = bytearray(4000)  # allocated after the burst: the heap's top is in use, so free() alone keeps it
del burst
kept = resident_mib()
"""


def run(code: str) -> list[float]:
    out = subprocess.run(
        [sys.executable, "-c", MEASURE + textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    return [float(x) for x in out.stdout.split()]


def test_memory_a_burst_freed_stays_resident_until_the_heap_is_trimmed() -> None:
    before, kept, trimmed = run("""
        trimmed_ok = heap.trim()
        print(before, kept, resident_mib() if trimmed_ok else -1)
    """)
    assert kept - before > 60, "the freed burst stays resident"
    assert 0 <= trimmed - before < 20, "the trim gave the burst's pages back"


def test_the_trimmer_trims_on_its_period_and_stops() -> None:
    before, kept, after = run("""
        trimmer = heap.Trimmer(0.05).start()
        deadline = time.monotonic() + 5
        while resident_mib() > kept - 60 and time.monotonic() < deadline:
            time.sleep(0.05)
        trimmer.stop()
        print(before, kept, resident_mib())
    """)
    assert kept - before > 60
    assert after - before < 20, "the trimmer gave the freed burst back within 5 s"
