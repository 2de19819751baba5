"""How much longer a job runs: from what it declared, or from finished jobs like it.

Contract: pure (no clock: the shell passes ``elapsed``). ``Estimator`` keeps the run times of recently
finished jobs, fed oldest first with ``add``; ``remaining(...)`` returns an ``Estimate``: the median (p50) and
an upper (p90) guess of the seconds a job still runs, and which ``Source`` they come from, tried in this order:

1. ``declared``: the job's own ``expected_duration`` (p90 allows 25 % more), while it has not run past it;
2. ``project``: the project's recent finished jobs of the same shape (``gpus_per_replica``, ``min_replicas``,
   ``max_replicas``), at least ``min_samples`` of them;
3. ``cluster``: the cluster's recent finished jobs of the same shape, then of any shape;
4. ``default``: nothing to go on (or the job has outlived every sample): ``default_seconds``, or as long
   again as it has run already (run times are heavy-tailed: a job that has run long tends to run long).

History estimates are *conditional* on the time already run: of the samples longer than ``elapsed``, the
median and 90th percentile of what is left. A fresh job gets the plain median and 90th percentile.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass
from enum import StrEnum

from scheduler.core.model import Job

Shape = tuple[int, int, int]


class Source(StrEnum):
    DECLARED = "declared"  # the job's expected_duration
    PROJECT = "project"  # the project's recent finished jobs of the same shape
    CLUSTER = "cluster"  # the cluster's recent finished jobs (same shape first)
    DEFAULT = "default"  # no history to go on


@dataclass(frozen=True, slots=True)
class Finished:
    """A finished job's run time: ``seconds`` from its first start to its end."""

    project: str
    shape: Shape
    seconds: float


@dataclass(frozen=True, slots=True)
class Estimate:
    """Seconds a job still runs: ``p50`` (median guess) <= ``p90`` (upper guess); where they come from."""

    p50: float
    p90: float
    source: Source


def shape_of(job: Job) -> Shape:
    """The shape that makes two jobs comparable: GPUs per replica and the replica range."""
    return (job.gpus_per_replica, job.min_replicas, job.max_replicas)


class _Samples:
    """The last ``size`` run times of one group, sorted on demand."""

    __slots__ = ("_recent", "_sorted")

    def __init__(self, size: int) -> None:
        self._recent: deque[float] = deque(maxlen=size)
        self._sorted: list[float] | None = None

    def add(self, seconds: float) -> None:
        self._recent.append(seconds)
        self._sorted = None

    def left_after(self, elapsed: float, min_samples: int) -> tuple[float, float] | None:
        """(p50, p90) of the time left, over the samples longer than ``elapsed``; None with too few."""
        if self._sorted is None:
            self._sorted = sorted(self._recent)
        s = self._sorted
        tail = len(s) - bisect_right(s, elapsed)
        if tail < min_samples:
            return None
        first = len(s) - tail
        return s[first + (tail - 1) // 2] - elapsed, s[first + (9 * (tail - 1)) // 10] - elapsed


class Estimator:
    """Run-time history of recently finished jobs, per project and shape, per shape and cluster-wide."""

    def __init__(self, *, recent: int = 50, min_samples: int = 3, default_seconds: float = 3600.0) -> None:
        self.recent, self.min_samples, self.default_seconds = recent, min_samples, default_seconds
        self._by_project: dict[tuple[str, Shape], _Samples] = {}
        self._by_shape: dict[Shape, _Samples] = {}
        self._all = _Samples(4 * recent)

    def add(self, done: Finished) -> None:
        """Record a finished job (call in the order jobs finish: only the ``recent`` last count)."""
        pkey = (done.project, done.shape)
        if pkey not in self._by_project:
            self._by_project[pkey] = _Samples(self.recent)
        if done.shape not in self._by_shape:
            self._by_shape[done.shape] = _Samples(self.recent)
        self._by_project[pkey].add(done.seconds)
        self._by_shape[done.shape].add(done.seconds)
        self._all.add(done.seconds)

    def remaining(self, job: Job, elapsed: float, declared: float | None = None) -> Estimate:
        """Seconds ``job`` still runs, having run ``elapsed`` seconds (0 for a job that has not started)."""
        if declared is not None and declared > elapsed:
            return Estimate(declared - elapsed, 1.25 * declared - elapsed, Source.DECLARED)
        shape = shape_of(job)
        levels = (
            (self._by_project.get((job.project, shape)), Source.PROJECT),
            (self._by_shape.get(shape), Source.CLUSTER),
            (self._all, Source.CLUSTER),
        )
        for group, source in levels:
            left = group.left_after(elapsed, self.min_samples) if group is not None else None
            if left is not None:
                return Estimate(left[0], left[1], source)
        guess = max(self.default_seconds, elapsed)
        return Estimate(guess, 4.0 * guess, Source.DEFAULT)
