"""Progress a job reports: its training speed, read from a mark file next to its checkpoint mark (R19).

Contract: a training script reports its speed by writing one JSON object to
``$TIDE_CHECKPOINT_DIR/tide-progress`` (a temporary file renamed over it, so a reader never sees half of one;
``write_progress`` does that, and any script can do the same with the standard library alone)::

    {"samples_per_second": 812.5, "steps_per_second": 3.17, "world_size": 8}

``samples_per_second`` is required (a positive number: its whole job's throughput, all replicas together);
``steps_per_second`` is optional; ``world_size`` (optional) is the number of training processes it measured
at, so a report written before a resize is not booked at the new size. ``read_progress(directory)`` returns a
``Progress``, or None when there is no mark or it is not such an object. The local executor reports it with
its observations of the job's master replica, the pod agents with theirs; the service keeps the newest
samples per second at each size the job ran (``scheduler.store.lifecycle.progressed``) and fits the core's
``Job.throughput`` from them (``scheduler.core.goodput.fit``).
"""

from __future__ import annotations

import json
import math
import os
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

PROGRESS_FILE = "tide-progress"


@dataclass(frozen=True, slots=True)
class Progress:
    samples_per_second: float
    steps_per_second: float | None = None
    world_size: int | None = None


def _positive(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number > 0 else None


def parse(data: object) -> Progress | None:
    """A ``Progress`` from a decoded JSON object, or None when it is not one (the module contract)."""
    if not isinstance(data, dict):
        return None
    samples = _positive(data.get("samples_per_second"))
    if samples is None:
        return None
    world = data.get("world_size")
    world_size = world if isinstance(world, int) and not isinstance(world, bool) and world > 0 else None
    return Progress(samples, _positive(data.get("steps_per_second")), world_size)


def read_progress(directory: str | Path) -> Progress | None:
    with suppress(OSError, ValueError):
        return parse(json.loads((Path(directory) / PROGRESS_FILE).read_text()))
    return None


def write_progress(
    directory: str | Path,
    samples_per_second: float,
    steps_per_second: float | None = None,
    world_size: int | None = None,
) -> None:
    data: dict[str, float | int] = {"samples_per_second": samples_per_second}
    if steps_per_second is not None:
        data["steps_per_second"] = steps_per_second
    if world_size is not None:
        data["world_size"] = world_size
    path = Path(directory) / PROGRESS_FILE
    tmp = path.with_name(f"{PROGRESS_FILE}.tmp.{os.getpid()}")
    tmp.write_text(json.dumps(data) + "\n")
    os.replace(tmp, path)
