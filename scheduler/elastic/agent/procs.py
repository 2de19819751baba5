"""Processes on this machine, as ``/proc`` shows them: the one reader of ``/proc`` for Tide's launches.

Contract: Linux only (``/proc``); elsewhere nothing is found. Readers never raise for a process that ends
while it is read: it is simply not found.

- ``start_ticks(pid)``: the process's start time in clock ticks since boot, None when it is gone or a zombie
  (the local executor trusts a recorded pid only while this is unchanged: a reused pid is never signalled).
- ``descendants(pid, depth)`` lists the live processes exactly ``depth`` generations below ``pid`` (1: its
  children), read in one pass; ``signal_generation(pid, depth, signum)`` sends them ``signum`` and returns
  how many it reached. This is how a preemption notice (SIGUSR1) reaches the training processes only: SIGUSR1
  ends a process that does not handle it. Measured with torch 2.13.0: ``torchrun`` does not forward
  SIGUSR1 (its agent is ended by it, and its workers, each in a session of its own, never see it); a group
  signal would also end the shim, a warm launcher's agent and a DataLoader's worker processes.
- ``kill_marked(marker)`` SIGKILLs every other process whose environment holds ``marker`` (``NAME=value``):
  what a replica left behind outside its process group. ``with_workers(uids)`` returns the replica uids
  (``TIDE_REPLICA_UID`` values) of which a torchrun worker (a process with ``TORCHELASTIC_RUN_ID``) exists.
- ``poll_child(pid)``: a child's exit code once it ended (``-N`` when signal N ended it; it is reaped), None
  while it runs, ``ChildProcessError`` for a process that is not this process's child. ``exists(pid)``: any
  process, by ``kill(pid, 0)``.

``STOPPED_EXIT`` (143, 128 + SIGTERM) is how a launch stopped by SIGTERM exits, for the launcher and the pod.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Iterator
from contextlib import suppress

REPLICA_UID = "TIDE_REPLICA_UID"  # in the environment of every process of a local replica (kills leftovers)
STOPPED_EXIT = 143
_GONE = ("Z", "X")  # zombie, dead: no longer running


def _stat(pid: int | str) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name: state, parent pid, ... (``OSError`` when
    the process is gone)."""
    raw = _read(f"/proc/{pid}/stat")
    return raw[raw.rindex(b")") + 2 :].decode().split()  # the command name before it may be any bytes


def _read(path: str) -> bytes:
    """A ``/proc`` file's bytes. Plain strings, not ``pathlib``: it interns every path part it parses, and a
    scan of ``/proc`` each cycle would keep growing the interpreter's table of interned strings."""
    with open(path, "rb") as file:
        return file.read()


def _pids(*, others: bool) -> Iterator[str]:
    """Every process's pid directory name (with ``others``, this process's excepted)."""
    own = str(os.getpid()) if others else ""
    for name in os.listdir("/proc"):
        if name.isdigit() and name != own:
            yield name


def start_ticks(pid: int) -> int | None:
    try:
        fields = _stat(pid)
    except OSError:
        return None
    return None if fields[0] in _GONE else int(fields[19])


def _parents() -> dict[int, int]:
    """pid -> parent pid of every live (not zombie) process."""
    found: dict[int, int] = {}
    for name in _pids(others=False):
        with suppress(OSError, ValueError, IndexError):
            fields = _stat(name)
            if fields[0] not in _GONE:
                found[int(name)] = int(fields[1])
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


def _environs() -> Iterator[tuple[int, bytes]]:
    """(pid, raw ``/proc/PID/environ``) of every other process this one may read."""
    for name in _pids(others=True):
        with suppress(OSError):
            yield int(name), _read(f"/proc/{name}/environ")


def kill_marked(marker: str) -> None:
    """SIGKILL every process of ours whose environment carries ``marker`` (``NAME=value``)."""
    needle = b"\0" + marker.encode() + b"\0"
    for pid, environ in _environs():
        if needle in b"\0" + environ + b"\0":
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def with_workers(uids: Iterable[str]) -> set[str]:
    """The replica uids (``TIDE_REPLICA_UID`` values) of which a torchrun worker process exists now."""
    wanted = {f"{REPLICA_UID}={uid}".encode(): uid for uid in uids}
    found: set[str] = set()
    if not wanted:
        return found
    for _pid, environ in _environs():
        variables = environ.split(b"\0")
        if any(v.startswith(b"TORCHELASTIC_RUN_ID=") for v in variables):
            found.update(wanted[v] for v in variables if v in wanted)
    return found


def poll_child(pid: int) -> int | None:
    """The child's exit code once it ended (reaped), None while it runs."""
    done, status = os.waitpid(pid, os.WNOHANG)
    return None if done == 0 else os.waitstatus_to_exitcode(status)


def exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
