"""A warm torchrun launcher: a process that imported torch before any replica needed it.

Contract: started by the local executor's pool (``warm_pool``) under the shim, as
``python -c "from scheduler.executors import warm_launcher as m; m.main()" SPEC_FILE``. It imports torch
and torchrun's launcher, builds a throw-away optimiser (the first one imports ``torch._dynamo``: ~1 s),
starts a single-threaded fork server that preloads this module, creates ``SPEC_FILE`` with the suffix
``.warm`` (it is ready), then waits for ``SPEC_FILE`` to appear:
one JSON object ``{"env", "argv", "log"}``. It then sends its output to ``log``, applies ``env`` and runs
torchrun's launcher in-process on ``argv`` (torchrun's arguments, without ``torchrun``) with start method
``forkserver``: the workers are forked from the preloaded server and run the training script unchanged
(``runpy``, ``sys.argv`` set, the replica's env applied again), so no process of a launch imports torch.
A worker sends its output to the replica's log too (``$TIDE_REPLICA_LOG``: the fork server's output is
the pool's) and creates ``$TIDE_WORKERS_FILE`` when it starts: the launch formed. Exit status: 0 when the worker
group succeeded, 1 when it failed, 143 when stopped by SIGTERM (workers closed, interpreter teardown
skipped). Never initialises CUDA itself: only workers touch the GPU. This module imports torch: the service
never imports it (docs/elastic-resize.md, "The warm launcher").
"""

from __future__ import annotations

import json
import multiprocessing
import os
import runpy
import signal
import sys
import time
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

import torch
import torch.distributed.run as torchrun
from torch.distributed.elastic.multiprocessing import api as mp_api
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.launcher.api import elastic_launch

WORKERS_FILE = "TIDE_WORKERS_FILE"
LOG_FILE = "TIDE_REPLICA_LOG"
STOPPED_EXIT = 143
_original_close = mp_api.MultiprocessContext._close


def _close_releasing_finished(self: Any, death_sig: signal.Signals, timeout: int = 30) -> None:
    # A worker that returned waits for this event before it exits; torch sets it only on success, so a
    # worker that saved and returned on SIGTERM would wait for SIGKILL (torch 2.13, pinned).
    self._worker_finished_event.set()
    _original_close(self, death_sig, timeout)


def worker(env: dict[str, str], path: str, *argv: str) -> None:
    """The entrypoint of one worker (forked from the fork server): the user's script, unchanged."""
    os.environ.update(env)  # the server predates the replica's env; torchrun's RANK etc. are set already
    _redirect(os.environ[LOG_FILE])  # the fork server's output is the pool's, not this replica's
    marker = os.environ.get(WORKERS_FILE)
    if marker:
        Path(marker).touch()
    sys.argv = [path, *argv]
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if code:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


def _warm_up() -> None:
    mp_api.MultiprocessContext._close = _close_releasing_finished  # type: ignore[method-assign]
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    multiprocessing.set_forkserver_preload([__name__])
    forkserver.ensure_running()


def _wait_for(spec_file: Path) -> dict[str, Any]:
    owner = int(os.environ.get("TIDE_POOL_OWNER", "0"))
    while not spec_file.exists():
        if owner and not _exists(owner):
            sys.exit(0)  # the service that started this launcher is gone: nobody will hand it a replica
        time.sleep(0.02)
    spec: dict[str, Any] = json.loads(spec_file.read_text())
    return spec


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _redirect(log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main() -> None:
    _warm_up()
    spec_file = Path(sys.argv[1])
    spec_file.with_suffix(".warm").touch()  # the pool hands out warm launchers first
    spec = _wait_for(spec_file)
    _redirect(spec["log"])
    env: dict[str, str] = spec["env"]
    os.environ.update(env)
    args = torchrun.parse_args(spec["argv"])  # type: ignore[no-untyped-call]
    config, _, _ = torchrun.config_from_args(args)
    config.start_method = "forkserver"
    try:
        elastic_launch(config, worker)(env, args.training_script, *args.training_script_args)
    except SignalException:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(STOPPED_EXIT)
    except Exception as error:  # the worker group failed: torchrun already printed why
        print(f"tide warm launcher: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        sys.exit(1)
    sys.exit(0)
