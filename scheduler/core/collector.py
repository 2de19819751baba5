"""The cyclic garbage collector paused for the length of a block.

Contract: ``with paused():`` disables the collector and, on the way out, enables it again if it was enabled
when the block began (blocks nest: only the outermost one turns it back on). Nothing is collected
explicitly: objects freed by reference counting inside the block never counted, so a block that frees what it
allocated leaves the collector's count where it found it and costs no collection at all.

Why: a scheduling cycle allocates a few objects per job and frees them at its end. With the collector
running, those short-lived objects trigger collections meanwhile that walk everything allocated since the
last one; the plan, the kept snapshot's new rows and the ORM's objects are still alive then, so each walk is
long (three young collections of 80 ms in eight cycles at 10,240 GPUs) and lands wherever the cycle happens
to allocate. The plan does not depend on it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """Disable the cyclic collector for the block; re-enable it after if this block disabled it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
