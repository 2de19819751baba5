"""Launchers of the local executor's torchrun replicas, kept warm ahead of need (docs/elastic-resize.md).

Contract: ``WarmPool(state_dir, instance, spawn, size)`` keeps up to ``size`` idle launchers
(``launcher``), each a process tree started by ``spawn`` (the executor's: shim, own session, the
pool's ``TIDE_REPLICA_UID`` marker) with its output in ``state_dir/pool/N.log``. ``take(env, argv, log)``
hands one launcher a replica (torchrun's arguments, the replica's env, its log file) by writing its spec
file (warm ones first: a launcher marks itself ``N.warm`` once it is ready; a new one when none is idle),
and returns the ``Launcher`` (pid, its exit file, its kill marker, the file its workers create).
``refill()`` starts launchers up to ``size`` (the executor calls it once no launch formed for a moment,
off a resize's critical path); ``close()`` kills the idle ones. A launcher still importing torch when it
is taken just starts its replica once it is ready. Used for plain ``torchrun`` commands only
(``eligible``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from scheduler.elastic.agent.procs import REPLICA_UID, poll_child

LAUNCHER_CODE = "from scheduler.elastic.agent import launcher as m; m.main()"
OWNER = "TIDE_POOL_OWNER"  # an idle launcher exits when the service that started it is gone


@dataclass(frozen=True, slots=True)
class Launcher:
    pid: int
    exit_file: Path
    spec_file: Path
    marker: str  # the TIDE_REPLICA_UID its processes carry (kills leftovers)
    workers_file: Path


# spawn(argv, env, log, exit_file) -> pid
Spawn = Callable[[list[str], Mapping[str, str], Path, Path], int]


def eligible(argv: tuple[str, ...]) -> bool:
    """A plain ``torchrun ARGS...`` (what a launcher can run in-process)."""
    return len(argv) > 1 and argv[0] == "torchrun"


class WarmPool:
    def __init__(self, state_dir: Path, instance: str, spawn: Spawn, size: int) -> None:
        self.dir = state_dir / "pool"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.instance = instance
        self.spawn = spawn
        self.size = size
        self.idle: list[Launcher] = []
        self._count = 0

    def refill(self) -> None:
        while len(self.idle) < self.size:
            self.idle.append(self._start())

    def _start(self) -> Launcher:
        self._count += 1
        name = f"{os.getpid()}-{self._count}"
        marker = f"{self.instance}-pool-{name}"
        launcher = Launcher(
            pid=0,
            exit_file=self.dir / f"{name}.exit",
            spec_file=self.dir / f"{name}.spec",
            marker=marker,
            workers_file=self.dir / f"{name}.workers",
        )
        for path in (launcher.exit_file, launcher.spec_file, launcher.workers_file, _warm_file(launcher)):
            path.unlink(missing_ok=True)
        env = {**os.environ, REPLICA_UID: marker, OWNER: str(os.getpid())}
        argv = [sys.executable, "-c", LAUNCHER_CODE, str(launcher.spec_file)]
        pid = self.spawn(argv, env, self.dir / f"{name}.log", launcher.exit_file)
        return Launcher(pid, launcher.exit_file, launcher.spec_file, marker, launcher.workers_file)

    def warm(self) -> int:
        """Idle launchers done warming up."""
        return sum(1 for launcher in self.idle if _warm_file(launcher).exists())

    def take(self, env: Mapping[str, str], argv: tuple[str, ...], log: Path) -> Launcher:
        """An idle launcher (warm ones first) for this replica, else a new one started for it."""
        self.idle.sort(key=lambda launcher: not _warm_file(launcher).exists())
        while self.idle:
            launcher = self.idle.pop(0)
            if _alive(launcher.pid):
                return self._hand(launcher, env, argv, log)
        return self._hand(self._start(), env, argv, log)

    @staticmethod
    def _hand(launcher: Launcher, env: Mapping[str, str], argv: tuple[str, ...], log: Path) -> Launcher:
        files = {"TIDE_WORKERS_FILE": str(launcher.workers_file), "TIDE_REPLICA_LOG": str(log)}
        spec = {"env": {**env, **files}, "argv": list(argv[1:]), "log": str(log)}
        tmp = launcher.spec_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(spec))
        os.replace(tmp, launcher.spec_file)
        return launcher

    def close(self) -> None:
        for launcher in self.idle:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(launcher.pid, signal.SIGKILL)
            with suppress(ChildProcessError):
                os.waitpid(launcher.pid, os.WNOHANG)
        self.idle.clear()


def _warm_file(launcher: Launcher) -> Path:
    return launcher.spec_file.with_suffix(".warm")


def _alive(pid: int) -> bool:
    try:
        return poll_child(pid) is None
    except ChildProcessError:
        return False
