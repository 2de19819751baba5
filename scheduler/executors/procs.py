"""Finding a replica's training processes by parentage, for the preemption notice (SIGUSR1).

Contract: ``descendants(pid, depth)`` lists the live processes exactly ``depth`` generations below ``pid``
(1: its children), read from ``/proc`` in one pass; ``signal_generation(pid, depth, signum)`` sends them
``signum`` and returns how many it reached. Why not the process group: SIGUSR1 ends a process that does not
handle it, so it must reach the training processes only. Measured with torch 2.13.0: ``torchrun`` does
not forward SIGUSR1 (its agent is ended by it, and its workers, each in a session of its own, never see
it); a group signal would also end the shim, a warm launcher's agent and a DataLoader's worker processes.
Linux only (``/proc``); elsewhere nothing is found.
"""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path


def _parents() -> dict[int, int]:
    """pid -> parent pid of every live (not zombie) process."""
    found: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with suppress(OSError, ValueError, IndexError):
            raw = (proc / "stat").read_text()
            fields = raw[raw.rindex(")") + 2 :].split()
            if fields[0] not in ("Z", "X"):
                found[int(proc.name)] = int(fields[1])
    return found


def descendants(pid: int, depth: int) -> list[int]:
    parents = _parents()
    level = {pid}
    for _ in range(depth):
        level = {child for child, parent in parents.items() if parent in level}
    return sorted(level)


def signal_generation(pid: int, depth: int, signum: int) -> int:
    reached = 0
    for target in descendants(pid, depth):
        with suppress(ProcessLookupError, PermissionError):
            os.kill(target, signum)
            reached += 1
    return reached
