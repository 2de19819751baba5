"""Progress model of a simulated job: work done as a function of time, restarts and checkpoints.

Contract: a ``Run`` is the simulator's mutable record of one job. Between two scheduling decisions its
allocation is constant, so its progress is a straight line: a *segment* starting at ``seg_start`` with
``base`` GPU-seconds done, no progress for ``seg_delay`` seconds (the restart cost of a start after an
eviction, or of a resize), then ``rate`` GPU-seconds per second. Work is measured in GPU-seconds at the
requested size, so a rigid job at its requested size finishes in exactly its trace duration.

Speed: ``rate(a) = requested x (a / requested) ** efficiency`` for ``a`` allocated GPUs (efficiency 1: linear
scaling; below 1: each extra GPU helps less, and running smaller loses less than proportionally).
A resize saves a checkpoint first (elastic restart), so it costs only its restart delay; an eviction rolls the
job back to its last periodic checkpoint, taken every ``checkpoint_seconds`` since the segment began.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scheduler.simulator.workload import JobSpec


def speed(requested: int, allocated: int, efficiency: float) -> float:
    """GPU-seconds of reference work per second with ``allocated`` GPUs (see the module docstring)."""
    if allocated <= 0:
        return 0.0
    return float(requested * (allocated / requested) ** efficiency)


@dataclass(slots=True)
class Run:
    """One job's life in the simulation (sim-side only; the core sees ``scheduler.core.Job``)."""

    spec: JobSpec
    gpus: int = 0
    seg_start: float = 0.0
    seg_delay: float = 0.0
    rate: float = 0.0
    base: float = 0.0
    first_start: float | None = None
    finished_at: float | None = None
    version: int = 0

    def progress(self, now: float) -> float:
        """GPU-seconds of work done by ``now`` (within the current segment)."""
        if self.gpus <= 0:
            return self.base
        return self.base + self.rate * max(0.0, now - self.seg_start - self.seg_delay)

    def finish_time(self) -> float:
        """When the current segment completes the job (infinite while pending)."""
        if self.gpus <= 0 or self.rate <= 0:
            return math.inf
        left = max(0.0, self.spec.work - self.base)
        return self.seg_start + self.seg_delay + left / self.rate

    def restart_loss(self, now: float) -> float:
        """GPU-seconds spent restarting in the current segment up to ``now``."""
        return self.gpus * min(self.seg_delay, max(0.0, now - self.seg_start))

    def last_checkpoint(self, now: float, checkpoint_seconds: float) -> float:
        """When the job last saved a checkpoint by ``now``: the segment's start (a resize saves one, a start
        resumes from one) or a periodic one since."""
        since = now - self.seg_start
        return self.seg_start + math.floor(since / checkpoint_seconds) * checkpoint_seconds

    def rollback(self, now: float, checkpoint_seconds: float) -> tuple[float, float]:
        """(progress at the last checkpoint, GPU-seconds of computation thrown away) for an eviction now."""
        last = self.last_checkpoint(now, checkpoint_seconds)
        kept = self.progress(last)
        wasted = self.gpus * max(0.0, now - max(last, self.seg_start + self.seg_delay))
        return kept, wasted

    def begin(self, now: float, gpus: int, base: float, delay: float, efficiency: float) -> None:
        """Start a new segment with ``gpus`` GPUs (0: pending) from ``base`` work done."""
        self.gpus, self.base, self.seg_start, self.seg_delay = gpus, base, now, delay
        self.rate = speed(self.spec.gpus, gpus, efficiency)
        self.version += 1
        if gpus > 0 and self.first_start is None:
            self.first_start = now
