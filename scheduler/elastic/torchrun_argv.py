"""Reading a job's command as a torchrun launch: whether it is one, its arguments, its restart budget.

Contract: pure (standard library only; ``argv_for`` looks at ``PATH`` and the file system). A job opts in to
Tide's coordinated resize by launching with ``torchrun ...`` or ``python -m torch.distributed.run ...``
(``uses_torchrun``); any other command runs as given. ``job_max_restarts`` is the job's restart budget,
which Tide counts across launches (a resize is a new launch, never a failure).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path

_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_MAX_RESTARTS_FLAGS = ("--max-restarts", "--max_restarts")
DEFAULT_MAX_RESTARTS = 3


def uses_torchrun(argv: Sequence[str]) -> bool:
    """Whether a job's command is a torchrun launch: ``torchrun ...`` or ``python -m torch.distributed.run``.

    This is how a job opts in to Tide's coordinated resize; any other command runs as given.
    """
    return torchrun_args(argv) is not None


def torchrun_args(argv: Sequence[str]) -> tuple[str, ...] | None:
    """The arguments torchrun gets from a torchrun launch (after ``torchrun`` or ``-m torch.distributed.run``),
    or None when ``argv`` is no torchrun launch."""
    if not argv:
        return None
    if argv[0].rsplit("/", 1)[-1] == "torchrun":
        return tuple(argv[1:])
    for i, (a, b) in enumerate(pairwise(argv)):
        if a == "-m" and b in _TORCHRUN_MODULES:
            return tuple(argv[i + 2 :])
    return None


def torchrun_argv(command: Sequence[str]) -> tuple[str, ...]:
    """The command as ``torchrun ARGS`` (``python -m torch.distributed.run ARGS`` has the same ARGS)."""
    return ("torchrun", *(torchrun_args(command) or ()))


def job_max_restarts(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """The failures a job may survive: ``--max-restarts`` in its command, else ``PET_MAX_RESTARTS`` in its
    env, else torchrun's usual 3. Tide counts them across launches (a resize is a new launch)."""
    for i, arg in enumerate(argv):
        for flag in _MAX_RESTARTS_FLAGS:
            value = argv[i + 1] if arg == flag and i + 1 < len(argv) else arg.removeprefix(f"{flag}=")
            if (arg == flag or arg.startswith(f"{flag}=")) and value.isdigit():
                return int(value)
    raw = env.get("PET_MAX_RESTARTS", "")
    return int(raw) if raw.isdigit() else DEFAULT_MAX_RESTARTS


def argv_for(argv: tuple[str, ...]) -> tuple[str, ...]:
    """``torchrun`` from ``PATH``, else the one installed beside the service's Python."""
    if argv and argv[0] == "torchrun" and shutil.which("torchrun") is None:
        beside = Path(sys.executable).parent / "torchrun"
        if beside.is_file():
            return (str(beside), *argv[1:])
    return argv
