"""A warm torchrun launcher: a process that imported torch before any replica needed it.

Contract: started by the local executor's pool (``pool``) under the shim, as
``python -c "from scheduler.elastic.agent import launcher as m; m.main()" SPEC_FILE``. It imports torch
and torchrun's launcher and builds a throw-away optimiser (the first one imports ``torch._dynamo``: ~1 s,
4 s with four of them on two busy cores), creates ``SPEC_FILE`` with the suffix ``.warm`` (it is ready),
then waits for ``SPEC_FILE`` to appear: one JSON object ``{"env", "argv", "log"}``. It sends its output to
``log``, applies ``env`` and parses ``argv`` (torchrun's arguments, without ``torchrun``) with torchrun's
own parser.

When ``torchrun_agent.plan`` accepts the launch (a fixed-size launch of a script; see there), this process
plays torchrun's agent (``torchrun_agent.run``): no rendezvous round trips, no agent threads, and the workers are
forked from this preloaded process, so no process of a launch imports torch. A worker runs the training
script unchanged as torchrun's would (``runpy``, ``sys.argv`` set, the script's directory first on
``sys.path``, unbuffered output, ``$TIDE_WORKERS_FILE`` created once the launch formed), then runs the
``atexit`` handlers and exits without the interpreter's teardown (seconds with torch loaded: the script has
returned, its files are closed). Exit status: 0 when every worker returned 0, 1 when one failed, 143 when
stopped by SIGTERM. Otherwise (or with ``TIDE_TORCHRUN_AGENT=torchrun``) it replaces itself with torchrun
(``python -m torch.distributed.run ARGV``): the plain, cold path. Never initialises CUDA itself: only
workers touch the GPU. This module imports torch: the service never imports it (docs/elastic-resize.md).
"""

from __future__ import annotations

import atexit
import io
import json
import os
import runpy
import sys
import time
import traceback
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed.run as torchrun
from torch.nn.parallel import DistributedDataParallel  # noqa: F401 - preloaded for the workers

from scheduler.elastic.agent import torchrun_agent
from scheduler.elastic.agent.procs import exists
from scheduler.elastic.agent.trace import trace

WORKERS_FILE = "TIDE_WORKERS_FILE"


def _warm_up() -> None:
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)  # the lazy torch._dynamo import


def _wait_for(spec_file: Path) -> dict[str, Any]:
    owner = int(os.environ.get("TIDE_POOL_OWNER", "0"))
    while not spec_file.exists():
        if owner and not exists(owner):
            sys.exit(0)  # the service that started this launcher is gone: nobody will hand it a replica
        time.sleep(0.02)
    spec: dict[str, Any] = json.loads(spec_file.read_text())
    return spec


def _redirect(log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _unbuffered() -> None:
    """What ``python -u`` (torchrun's worker command) gives: output written through at once."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        raw = open(fd, "wb", buffering=0, closefd=False)  # noqa: SIM115 - lives as long as the process
        stream = io.TextIOWrapper(raw, encoding=old.encoding, errors=old.errors, write_through=True)
        setattr(sys, name, stream)


def _exit(code: int) -> NoReturn:
    """Exit as the interpreter would, minus its teardown: ``atexit`` handlers run, output is flushed."""
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_script(path: str, argv: list[str], module: bool) -> NoReturn:
    """A worker: the user's training script (or ``-m`` module), unchanged, as ``python -u`` would run it."""
    trace("worker-start", rank=os.environ.get("RANK"))
    _unbuffered()
    sys.argv = [path, *argv]
    sys.path.insert(0, os.getcwd() if module else str(Path(path).resolve().parent))
    code = 0
    try:
        if module:
            runpy.run_module(path, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(path, run_name="__main__")
    except SystemExit as stop:
        if isinstance(stop.code, int) or stop.code is None:
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    trace("worker-script-returned", code=code)
    _exit(code)


def _torchrun(argv: list[str]) -> NoReturn:
    """torchrun's own launcher, in place of this process (cold: its workers import torch again)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", *argv])


def main() -> None:
    _warm_up()
    spec_file = Path(sys.argv[1])
    spec_file.with_suffix(".warm").touch()  # the pool hands out warm launchers first
    spec = _wait_for(spec_file)
    trace("launcher-got-spec")
    _redirect(spec["log"])
    os.environ.update(spec["env"])
    argv: list[str] = spec["argv"]
    try:
        args = torchrun.parse_args(argv)  # type: ignore[no-untyped-call]
    except SystemExit:
        _torchrun(argv)  # torchrun prints the usage error itself
    launch = torchrun_agent.plan(args, os.environ)
    if isinstance(launch, str):
        print(f"tide launcher: torchrun's own agent runs this launch: {launch}", file=sys.stderr, flush=True)
        _torchrun(argv)
    script: str = args.training_script
    rest: list[str] = list(args.training_script_args)

    def entry(local_rank: int) -> None:
        run_script(script, rest, bool(args.module))

    code = torchrun_agent.run(launch, entry, os.environ.get(WORKERS_FILE))
    trace("launcher-exit", code=code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
