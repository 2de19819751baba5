"""A child process that dies with its parent, so that no helper outlives the process that needs it.

Contract: ``die_with_parent(parent)``, called first thing in a child, has the kernel SIGKILL it when its
parent dies (Linux ``PR_SET_PDEATHSIG``; elsewhere nothing), and exits at once if ``parent`` is already gone.
Used by the engine process (its parent: ``tide serve``'s API process) and the start-time forecast's child
(its parent: the engine), so a SIGKILLed service leaves neither behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
from contextlib import suppress

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(0)
