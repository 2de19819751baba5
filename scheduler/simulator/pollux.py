"""Pollux's workloads through Tide's core: the Pollux simulator's cluster, clock and progress model.

Contract: ``replay(rows, policy)`` runs one workload (``load_workload``; the bundled ones are the Pollux
artifact's, ``data/pollux/``) to the last completion and returns a ``PolluxResult``; it is deterministic.
The model is the Pollux artifact's, re-implemented here (``docs/simulator.md``, "Pollux workloads"):

- 16 nodes of 4 GPUs. Every 60 s all jobs advance, then the policy allocates; a job is first seen at the
  first tick at or after its submission. Any new allocation, the first included, stalls the job for 30 s.
- A job runs at its given global batch ``B`` (Tide does not tune batch sizes): on ``R`` GPUs its local batch
  is ``ceil(B/R)``, split into micro-batches past the largest measured local batch; its step time comes from
  the measured ``placements.csv`` (by the GPUs used on each node) or, for placements not measured, is
  interpolated over nodes, replicas and local batch (piecewise-linearly on each axis: the artifact
  triangulates with SciPy, so the two differ slightly off the measured placements). Progress per second is
  the statistical gain at the effective batch divided by the step time; the job is done after its last epoch.

Policies (``POLICIES``): ``tide-goodput`` (the core with R19 on; each job reports its samples per second at
the sizes it ran and the shell fits ``scheduler.core.goodput.fit`` into ``Job.throughput``),
``tide-goodput-cost`` (and R18 told that a resize costs the 30 s stall), ``tide-goodput-cost-usage`` (and R14,
fair share over time, with a one-hour half-life), ``tide-goodput-cost-usage-half-to-given`` (as
``tide-goodput-cost-usage``, each job elastic from half its given size to that size instead of 1 GPU to twice
it), ``tide-one-project-goodput-cost`` (as ``tide-goodput-cost``, with the whole cluster one project instead
of a project per job), ``tide`` (the core with R19 off: today's rule) and ``tiresias`` (the jobs' given sizes,
two-queue least-attained-service with a 16 GPU-hour threshold and no starvation limit, first-fit in queue
order, most-free node first, as the Pollux artifact's baseline). Two references that are not Tide policies, to
tell what allocation alone can reach with every batch size fixed: ``pollux-fixed-batch``
(``PolluxFixedBatch``: the Pollux simulator's objective, searched greedily over the model's true speeds) and
``oracle-fixed-batch`` (``RemainingWorkOracle``: the job with the least work left first, which no scheduler
knows). How Tide sees the jobs (a project each, or all in one project; which sizes) is in ``TidePolicy``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from itertools import pairwise
from pathlib import Path

from scheduler.core import ClusterState, Config, Job, Node, Project, apply_plan, plan_cycle
from scheduler.core.goodput import fit
from scheduler.core.usage import accrue
from scheduler.simulator.bundled import DATA

POLLUX = DATA / "pollux"
WORKLOADS = POLLUX / "workloads"
NODES, GPUS_PER_NODE = 16, 4
INTERVAL, RESTART = 60, 30
EPOCHS = {"bert": 2, "cifar10": 100, "deepspeech2": 80, "imagenet": 90, "ncf": 10, "yolov3": 50}
MAX_LOCAL = {"yolov3": 8}  # the artifact's cap below the measured maximum
TIRESIAS_THRESHOLD = 16 * 3600  # GPU-seconds of attained service before a job drops to the second queue

Point = tuple[float, float, float]  # local batch, step time, sync time


def _lerp(points: Sequence[Point], x: float) -> tuple[float, float]:
    """Step and sync time at local batch ``x``, linear between the measured ones (clamped at the ends)."""
    if x <= points[0][0]:
        return points[0][1], points[0][2]
    for (x0, s0, y0), (x1, s1, y1) in pairwise(points):
        if x <= x1:
            w = (x - x0) / (x1 - x0)
            return s0 + w * (s1 - s0), y0 + w * (y1 - y0)
    return points[-1][1], points[-1][2]


def _around(keys: Sequence[int], x: float) -> tuple[int, int, float]:
    """The keys either side of ``x`` (clamped) and the weight of the upper one."""
    if x <= keys[0]:
        return keys[0], keys[0], 0.0
    if x >= keys[-1]:
        return keys[-1], keys[-1], 0.0
    for lo, hi in pairwise(keys):
        if lo <= x <= hi:
            return lo, hi, (x - lo) / (hi - lo) if hi > lo else 0.0
    raise AssertionError("unreachable")


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.read_text().splitlines()))


class App:
    """One application's measurements (``traces/<name>/``)."""

    def __init__(self, folder: Path, epochs: int, max_local: int | None = None) -> None:
        self.name = folder.name
        self.epochs = epochs
        self.validation: dict[int, list[tuple[float, float, float]]] = {}  # B -> (progress, sqr, var)
        for path in folder.glob("validation-*.csv"):
            rows = _rows(path)
            batch = int(path.stem.split("-")[-1])
            self.validation[batch] = [
                (float(r["progress"]), float(r["grad_sqr"]), float(r["grad_var"])) for r in rows
            ]
        self.batches = sorted(self.validation)
        self.b0, self.bmax = self.batches[0], self.batches[-1]
        self.epoch_end = [min(v[e][0] for v in self.validation.values()) for e in range(epochs)]
        placements: dict[tuple[int, ...], list[Point]] = {}
        sums: dict[tuple[int, int, float], list[tuple[float, float]]] = {}
        for r in _rows(folder / "placements.csv"):
            key = tuple(int(c) for c in r["placement"])
            point = (float(r["local_bsz"]), float(r["step_time"]), float(r["sync_time"]))
            placements.setdefault(key, []).append(point)
            sums.setdefault((len(key), sum(key), point[0]), []).append(point[1:])
        self.placements = {k: sorted(v) for k, v in placements.items()}
        self.lmin = int(min(p[0] for v in placements.values() for p in v))
        self.lmax = max_local or int(max(p[0] for v in placements.values() for p in v))
        grid: dict[int, dict[int, list[Point]]] = {}
        for (n, reps, m), vals in sums.items():
            step = sum(v[0] for v in vals) / len(vals)
            sync = sum(v[1] for v in vals) / len(vals)
            grid.setdefault(n, {}).setdefault(reps, []).append((m, step, sync))
        for r in _rows(folder / "scalability.csv"):
            n, reps = int(r["num_nodes"]), int(r["num_replicas"])
            point = (float(r["local_bsz"]), float(r["step_time"]), float(r["sync_time"]))
            grid.setdefault(n, {}).setdefault(reps, []).append(point)
        self.grid = {n: {r: sorted(v) for r, v in by.items()} for n, by in grid.items()}

    def micro_batches(self, batch: int, replicas: int) -> tuple[int, int]:
        """(micro-batch ``m``, extra accumulation steps ``a``) for global ``batch`` on ``replicas`` GPUs."""
        local = math.ceil(batch / replicas - 1e-8)
        a = math.ceil(local / self.lmax - 1e-8) - 1
        if replicas == 1 and batch > self.b0:
            a = max(1, a)
        m = math.ceil(local / (a + 1) - 1e-8)
        return min(m, int(self.bmax / (replicas * (a + 1)))), a

    def step_time(self, placement: tuple[int, ...], m: int) -> tuple[float, float]:
        """(step, sync) seconds of one micro-batch step on ``placement`` (GPUs per node)."""
        return _step_time(self, placement, m)

    def grad_stats(self, batch: float, epoch: int) -> tuple[float, float]:
        """Gradient squared norm and variance during ``epoch`` at effective batch ``batch``."""
        lo = max((b for b in self.batches if b <= batch), default=self.b0)
        hi = min((b for b in self.batches if b >= batch), default=self.bmax)
        s0, v0 = self.validation[lo][epoch][1:]
        if lo == hi:
            return s0, v0
        s1, v1 = self.validation[hi][epoch][1:]
        w = (batch - lo) / (hi - lo)
        return s0 + w * (s1 - s0), v0 + w * (v1 - v0)

    def _grid(self, nodes: int, replicas: int, m: float) -> tuple[float, float]:
        def at_nodes(n: int) -> tuple[float, float]:
            by = self.grid[n]
            lo, hi, w = _around(sorted(by), replicas)
            a, b = _lerp(by[lo], m), _lerp(by[hi], m)
            return a[0] + w * (b[0] - a[0]), a[1] + w * (b[1] - a[1])

        lo, hi, w = _around(sorted(self.grid), min(nodes, 16))
        a, b = at_nodes(lo), at_nodes(hi)
        return a[0] + w * (b[0] - a[0]), a[1] + w * (b[1] - a[1])


@cache
def _step_time(app: App, placement: tuple[int, ...], m: int) -> tuple[float, float]:
    used = tuple(g for g in placement if g)
    key = min(used[i:] + used[:i] for i in range(len(used)))
    if key in app.placements:
        return _lerp(app.placements[key], m)
    return app._grid(len(key), sum(key), m)


@cache
def load_app(name: str) -> App:
    if name not in EPOCHS:
        raise ValueError(f"unknown application {name!r}; the workloads use: {', '.join(sorted(EPOCHS))}")
    return App(POLLUX / "traces" / name, EPOCHS[name], MAX_LOCAL.get(name))


@dataclass(frozen=True, slots=True)
class WorkloadRow:
    name: str
    submit: int
    app: str
    replicas: int
    batch: int


def load_workload(path: Path, limit: int | None = None) -> list[WorkloadRow]:
    """A Pollux workload CSV (``name,time,application,num_replicas,batch_size``), first ``limit`` rows."""
    out: list[WorkloadRow] = []
    with path.open() as f:
        reader = csv.DictReader(f)
        need = {"name", "time", "application", "num_replicas", "batch_size"}
        if not need <= set(reader.fieldnames or ()):
            raise ValueError(f"{path}: expected the columns {', '.join(sorted(need))}")
        for i, r in enumerate(reader, start=2):
            try:
                row = WorkloadRow(
                    r["name"], int(r["time"]), r["application"], int(r["num_replicas"]), int(r["batch_size"])
                )
            except ValueError as e:
                raise ValueError(f"{path} line {i}: {e}") from None
            load_app(row.app)
            if row.replicas < 1 or row.replicas > NODES * GPUS_PER_NODE or row.batch < 1:
                raise ValueError(f"{path} line {i}: num_replicas 1-64 and a positive batch_size, please")
            out.append(row)
    return out[:limit] if limit is not None else out


@dataclass(slots=True)
class SimJob:
    """One job's life under the progress model (the shell's side)."""

    row: WorkloadRow
    app: App
    placement: tuple[int, ...] = ()
    m: int = 0
    a: int = 0
    progress: float = 0.0
    epoch: int = 0
    stall: float = 0.0
    done: float | None = None
    allocations: int = 0
    measured: dict[int, float] = field(default_factory=dict)  # GPUs -> samples per second (what it reports)

    @property
    def gpus(self) -> int:
        return sum(self.placement)

    def reallocate(self, placement: tuple[int, ...]) -> None:
        self.placement = tuple(g for g in placement if g)
        if self.placement:
            self.m, self.a = self.app.micro_batches(self.row.batch, self.gpus)
            self.stall = RESTART
            self.allocations += 1

    def advance(self, start: float, seconds: float) -> None:
        """Run from ``start`` for ``seconds`` on the current placement."""
        if not self.placement or self.done is not None:
            return
        used = min(self.stall, seconds)
        self.stall -= used
        left = seconds - used
        while left > 0 and self.done is None:
            n = self.gpus
            batch = n * self.m * (self.a + 1)
            step, sync = self.app.step_time(self.placement, self.m)
            sqr, var = self.app.grad_stats(batch, self.epoch)
            gain = (var + sqr) / (var * self.app.b0 / batch + sqr)
            total = step + self.a * (step - sync)
            self.measured[n] = batch / total
            rate = gain / total
            end = self.app.epoch_end[self.epoch]
            if self.progress + rate * left < end:
                self.progress += rate * left
                return
            delta = round((end - self.progress) / rate)
            self.epoch += 1
            self.progress = end
            left -= delta
            if self.epoch >= self.app.epochs:
                self.done = start + seconds - left


# a policy: (the jobs alive, now) -> each job's node index per GPU (absent: no GPUs)
Policy = Callable[[Sequence[SimJob], int], Mapping[str, tuple[int, ...]]]


def _placement(nodes: Iterable[int]) -> tuple[int, ...]:
    """GPUs per node from a list of node indices (runs of the same node count together)."""
    out: list[int] = []
    last = None
    for n in nodes:
        if n == last:
            out[-1] += 1
        else:
            out.append(1)
        last = n
    return tuple(out)


class Tiresias:
    """The Pollux artifact's Tiresias baseline (module contract): rigid jobs at their given size."""

    def __init__(self) -> None:
        self.queues: tuple[list[str], list[str]] = ([], [])
        self.running: dict[str, bool] = {}
        self.executed: dict[str, int] = {}
        self.checked: dict[str, int] = {}
        self.alloc: dict[str, list[int]] = {}

    def __call__(self, jobs: Sequence[SimJob], now: int) -> Mapping[str, tuple[int, ...]]:
        alive = {j.row.name: j for j in jobs}
        q0, q1 = self.queues
        q0[:] = [k for k in q0 if k in alive]
        q1[:] = [k for k in q1 if k in alive]
        self.alloc = {k: v for k, v in self.alloc.items() if k in alive}
        for key in alive:
            if key not in self.running:
                self.running[key] = False
                q0.append(key)
        for key, job in alive.items():
            if self.running[key]:
                self.executed[key] = self.executed.get(key, 0) + now - self.checked.get(key, 0)
                if key in q0 and self.executed[key] * job.row.replicas >= TIRESIAS_THRESHOLD:
                    q0.remove(key)
                    q1.append(key)
            self.checked[key] = now
        room = NODES * GPUS_PER_NODE
        for key in (*q0, *q1):
            want = alive[key].row.replicas
            self.running[key] = want <= room
            if want <= room:
                room -= want
            else:
                self.alloc.pop(key, None)
        free = [GPUS_PER_NODE] * NODES
        for nodes in self.alloc.values():
            for n in nodes:
                free[n] -= 1
        for key in (*q0, *q1):
            if self.running[key] and not self.alloc.get(key):
                got: list[int] = []
                want = alive[key].row.replicas
                while len(got) < want:
                    node = max(range(NODES), key=lambda i: (free[i], -i))
                    take = min(free[node], want - len(got))
                    got += [node] * take
                    free[node] -= take
                self.alloc[key] = got
        return {k: tuple(v) for k, v in self.alloc.items()}


def _compact(gpus: int) -> tuple[int, ...]:
    """``gpus`` on as few nodes as hold them: whole nodes, then the rest on one more."""
    whole, rest = divmod(gpus, GPUS_PER_NODE)
    return (GPUS_PER_NODE,) * whole + ((rest,) if rest else ())


def rate(app: App, batch: int, placement: tuple[int, ...], epoch: int) -> float:
    """Progress per second at global ``batch`` on ``placement`` during ``epoch`` (the model's own)."""
    replicas = sum(placement)
    m, a = app.micro_batches(batch, replicas)
    step, sync = app.step_time(placement, m)
    sqr, var = app.grad_stats(replicas * m * (a + 1), epoch)
    effective = replicas * m * (a + 1)
    return (var + sqr) / (var * app.b0 / effective + sqr) / (step + a * (step - sync))


def _pack(sizes: Iterable[int]) -> int:
    """Nodes that first-fit decreasing needs for single-node jobs of ``sizes`` GPUs."""
    bins: list[int] = []
    for size in sorted(sizes, reverse=True):
        for i, free in enumerate(bins):
            if free >= size:
                bins[i] -= size
                break
        else:
            bins.append(GPUS_PER_NODE - size)
    return len(bins)


class PolluxFixedBatch:
    """A reference, not a Tide policy: Pollux's allocation with every job's batch size fixed.

    Each round it maximises the Pollux simulator's objective, the power mean (p = -1) of the jobs' speedups,
    each speedup the job's progress rate on its allocation over its rate on a fair share (``ceil(64 / J)``
    GPUs on as few nodes), a changed allocation's speedup multiplied by the restart factor
    ``max(age - 30 x restarts, 0) / (age + 30)``; as in Pollux, a job spanning nodes has them to itself, no
    quotas, a job from 0 GPUs up to what its batch can be split over (64 at most). Unlike Pollux, which
    searches with a genetic algorithm over fitted models, it reads the progress model's true rates (an oracle)
    and searches greedily: sizes 1-4 on one node or whole nodes, the next GPUs always to the move (any job,
    any larger size) that lowers ``sum(1 / speedup)`` the most per GPU, while the jobs still fit the nodes.
    Jobs that keep their size keep their GPUs; the others are placed on whole free nodes or, within one node,
    on the fullest node that fits.
    """

    def __init__(self) -> None:
        self.alloc: dict[str, tuple[int, ...]] = {}  # job -> node index per GPU
        self.attained: dict[str, float] = {}  # GPU-seconds, the order among equal moves
        self.last = 0

    def __call__(self, jobs: Sequence[SimJob], now: int) -> Mapping[str, tuple[int, ...]]:
        alive = {j.row.name: j for j in jobs}
        self.alloc = {k: v for k, v in self.alloc.items() if k in alive}
        for key, job in alive.items():
            self.attained[key] = self.attained.get(key, 0.0) + job.gpus * (now - self.last)
        self.last = now
        order = sorted(alive, key=lambda k: (self.attained[k], alive[k].row.submit, k))
        fair = max(1, math.ceil(NODES * GPUS_PER_NODE / len(alive)))
        values: dict[str, dict[int, float]] = {}
        for key in order:
            job = alive[key]
            top = max(1, min(NODES * GPUS_PER_NODE, job.row.batch // job.app.lmin))
            sizes = [n for n in (1, 2, 3, 4, *range(8, 65, 4)) if n <= top]
            epoch = min(job.epoch, job.app.epochs - 1)
            base = rate(job.app, job.row.batch, _compact(min(fair, top)), epoch)
            age = now - job.row.submit
            factor = max(age - RESTART * job.allocations, 0) / (age + RESTART)
            held = len(self.alloc.get(key, ()))
            values[key] = {0: 1e-3}
            for n in sizes:
                speedup = 0.25 * rate(job.app, job.row.batch, _compact(n), epoch) / base
                values[key][n] = speedup * (1.0 if n == held else factor) + 1e-3
        size = dict.fromkeys(order, 0)

        def gain(key: str, have: int, n: int) -> float:
            return (1 / values[key][have] - 1 / values[key][n]) / (n - have)

        _grow_greedily(size, order, {k: sorted(v) for k, v in values.items()}, gain, self._fits)
        return self._place(size, order)

    @staticmethod
    def _fits(size: Mapping[str, int], key: str, n: int) -> bool:
        sizes = [n if k == key else s for k, s in size.items() if (n if k == key else s)]
        whole = sum(s // GPUS_PER_NODE for s in sizes if s > GPUS_PER_NODE)
        return whole + _pack(s for s in sizes if s <= GPUS_PER_NODE) <= NODES

    def _place(self, size: Mapping[str, int], order: Sequence[str]) -> dict[str, tuple[int, ...]]:
        free = [GPUS_PER_NODE] * NODES
        owner: list[str | None] = [None] * NODES  # a node a distributed job has to itself
        out: dict[str, tuple[int, ...]] = {}
        for key in order:  # jobs that keep their size keep their GPUs
            old = self.alloc.get(key, ())
            if size[key] and len(old) == size[key]:
                out[key] = old
                for n in old:
                    free[n] -= 1
                    if size[key] > GPUS_PER_NODE:
                        owner[n] = key
        moved = [k for k in order if size[k] and k not in out]
        for key in sorted(moved, key=lambda k: -size[k]):
            n = size[key]
            if n > GPUS_PER_NODE:
                empty = [i for i in range(NODES) if free[i] == GPUS_PER_NODE]
                if len(empty) < n // GPUS_PER_NODE:
                    continue  # fragmented by jobs kept in place: it waits a round
                nodes = empty[: n // GPUS_PER_NODE]
                out[key] = tuple(i for i in nodes for _ in range(GPUS_PER_NODE))
                for i in nodes:
                    free[i], owner[i] = 0, key
            else:
                fits = [i for i in range(NODES) if owner[i] is None and free[i] >= n]
                if not fits:
                    continue
                i = min(fits, key=lambda i: (free[i], i))
                free[i] -= n
                out[key] = (i,) * n
        self.alloc = out
        return out


def remaining_seconds(job: SimJob, gpus: int) -> float:
    """Seconds ``job`` still needs on ``gpus`` GPUs placed compactly (the model's truth: an oracle's view)."""
    seconds, progress = 0.0, job.progress
    for epoch in range(job.epoch, job.app.epochs):
        seconds += (job.app.epoch_end[epoch] - progress) / rate(job.app, job.row.batch, _compact(gpus), epoch)
        progress = job.app.epoch_end[epoch]
    return seconds


class RemainingWorkOracle(PolluxFixedBatch):
    """A reference, not a Tide policy: what allocation alone reaches when it knows every job's remaining work.

    Each round the jobs go in order of the GPU-seconds they still need at their given size (shortest
    remaining processing time first, read from the progress model: no scheduler knows it), each at its given
    size rounded down to 1-4 GPUs on one node or whole nodes, as many as fit; the GPUs left over then go, one
    move at a time, to the running job whose step time a larger size cuts by the largest fraction per added
    GPU. Batch sizes stay fixed; jobs that keep their size keep their GPUs, as in ``PolluxFixedBatch``.
    """

    def __call__(self, jobs: Sequence[SimJob], now: int) -> Mapping[str, tuple[int, ...]]:
        alive = {j.row.name: j for j in jobs}
        self.alloc = {k: v for k, v in self.alloc.items() if k in alive}
        sizes: dict[str, list[int]] = {}
        speed: dict[str, dict[int, float]] = {}
        for key, job in alive.items():
            top = max(1, min(NODES * GPUS_PER_NODE, job.row.batch // job.app.lmin))
            sizes[key] = [n for n in (1, 2, 3, 4, *range(8, 65, 4)) if n <= top]
            epoch = min(job.epoch, job.app.epochs - 1)
            speed[key] = {n: rate(job.app, job.row.batch, _compact(n), epoch) for n in sizes[key]}
        given = {k: max(n for n in sizes[k] if n <= max(alive[k].row.replicas, 1)) for k in alive}
        order = sorted(alive, key=lambda k: (given[k] * remaining_seconds(alive[k], given[k]), k))
        size = dict.fromkeys(order, 0)
        for key in order:
            size[key] = next(
                (n for n in reversed(sizes[key]) if n <= given[key] and self._fits(size, key, n)), 0
            )

        def gain(key: str, have: int, n: int) -> float:
            return (1 - speed[key][have] / speed[key][n]) / (n - have) if have else 0.0

        _grow_greedily(size, order, sizes, gain, self._fits)
        return self._place(size, order)


def _grow_greedily(
    size: dict[str, int],
    order: Sequence[str],
    sizes: Mapping[str, Sequence[int]],
    gain: Callable[[str, int, int], float],
    fits: Callable[[Mapping[str, int], str, int], bool],
) -> None:
    """Move one job at a time to the larger size with the highest positive ``gain(key, have, n)`` that
    ``fits``, until none has one (ties: the first in ``order``, then the smaller size)."""
    while True:
        best: tuple[float, str, int] | None = None
        for key in order:
            have = size[key]
            for n in sizes[key]:
                if n <= have:
                    continue
                g = gain(key, have, n)
                if g > 0 and (best is None or g > best[0]) and fits(size, key, n):
                    best = (g, key, n)
        if best is None:
            return
        size[best[1]] = best[2]


JOB_PROJECTS, ONE_PROJECT = "job-projects", "one-project"
MAPPINGS = (JOB_PROJECTS, ONE_PROJECT)
CLUSTER_PROJECT = "cluster"  # the one project of ``ONE_PROJECT``


class TidePolicy:
    """Tide's core on the Pollux cluster; ``config.goodput`` switches R19.

    The Pollux cluster has no teams or quotas; ``mapping`` says how Tide sees that:

    - ``job-projects`` (the default): each job is a project of its own with no quota and equal weight. R1
      then divides the cluster equally among the jobs that want GPUs (up to what each can use), R2/R7 reclaim
      for a new job down to equal shares, and R19 decides where what a job cannot use goes. With
      ``usage_half_life`` set, R14 weighs each job's decayed GPU-seconds.
    - ``one-project``: one project owns the cluster (quota = every GPU) and every job is one of its jobs, so
      R19 decides which of them grows ("a project's share among its own jobs goes first to the jobs that turn
      a GPU into the most progress"). A job of a project never takes a running job's extras at equal
      priority (decision 47), so a new job starts only on GPUs that are idle or freed by an ending job.

    A job runs from ``min_factor x`` its given size (1 GPU at least; by default 1 GPU) to ``max_factor x``
    it (by default twice, as the Philly replays let elastic jobs grow to twice their request), at most what
    its batch can be split over (a local batch no smaller than the smallest measured one) and 64.
    """

    def __init__(
        self, config: Config, max_factor: float = 2.0, mapping: str = JOB_PROJECTS, min_factor: float = 0.0
    ) -> None:
        if mapping not in MAPPINGS:
            raise ValueError(f"unknown mapping {mapping!r}; choose from {', '.join(MAPPINGS)}")
        self.max_factor, self.mapping = max_factor, mapping
        self.config = replace(config, next_plan_seconds=INTERVAL)  # it plans once a round (decision 71)
        self.min_factor = min_factor
        self.nodes = tuple(Node(f"node{i:02d}", GPUS_PER_NODE) for i in range(NODES))
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.jobs: dict[str, Job] = {}
        self.usage: dict[str, float] = {}  # R14: each job's (project's) decayed GPU-seconds above quota
        self.last = 0

    def _job(self, sim: SimJob) -> Job:
        job = self.jobs.get(sim.row.name)
        if job is None:
            row = sim.row
            top = max(1, min(NODES * GPUS_PER_NODE, row.batch // sim.app.lmin))
            top = min(top, max(row.replicas, math.floor(row.replicas * self.max_factor)))
            project = CLUSTER_PROJECT if self.mapping == ONE_PROJECT else row.name
            low = min(top, max(1, math.floor(row.replicas * self.min_factor)))
            job = Job(project, row.name, low, top, submitted_at=row.submit)
        if self.config.goodput:  # what it reported: samples per second at each size it ran
            job = replace(job, throughput=fit(sim.measured.items()))
        return job

    def __call__(self, jobs: Sequence[SimJob], now: int) -> Mapping[str, tuple[int, ...]]:
        half_life = self.config.usage_half_life
        for j in jobs:
            self.usage[j.row.name] = accrue(
                self.usage.get(j.row.name, 0.0), j.gpus, now - self.last, half_life
            )
        self.last = now
        projects = (
            (Project(CLUSTER_PROJECT, NODES * GPUS_PER_NODE),)
            if self.mapping == ONE_PROJECT
            else tuple(
                Project(j.row.name, 0, created_at=j.row.submit, usage_gpu_seconds=self.usage[j.row.name])
                for j in jobs
            )
        )
        state = ClusterState(self.nodes, projects, tuple(self._job(j) for j in jobs))
        plan = plan_cycle(state, self.config, now=float(now), explain_waiting=False)
        after = apply_plan(state, plan, now=float(now))
        self.jobs = {j.name: j for j in after.jobs}
        out: dict[str, tuple[int, ...]] = {}
        for job in after.jobs:
            nodes = sorted(self.index[r.node] for r in job.active for _ in range(r.gpus))
            if nodes:
                out[job.name] = tuple(nodes)
        return out


@dataclass(frozen=True, slots=True)
class PolluxResult:
    jct: Mapping[str, float]  # name -> completion - submission (s)
    allocations: int  # allocation changes (each stalled a job 30 s), first starts included
    makespan: float

    @property
    def avg_jct(self) -> float:
        return sum(self.jct.values()) / len(self.jct) if self.jct else 0.0


def replay(rows: Sequence[WorkloadRow], policy: Policy, max_seconds: float = 30 * 86400) -> PolluxResult:
    """One workload to the last completion (``max_seconds`` of simulated time at most: an error past it)."""
    jobs = [SimJob(r, load_app(r.app)) for r in rows]
    held: dict[str, tuple[int, ...]] = {}
    now = 0
    while any(j.done is None for j in jobs):
        if now > max_seconds:
            raise RuntimeError(f"the replay passed {max_seconds:.0f} s with jobs unfinished")
        for job in jobs:
            job.advance(now, INTERVAL)
        now += INTERVAL
        alive = [j for j in jobs if j.row.submit <= now and j.done is None]
        if not alive:
            continue
        wanted = policy(alive, now)
        for job in alive:
            new = wanted.get(job.row.name, ())
            if new != held.get(job.row.name, ()):
                job.reallocate(_placement(new))
                held[job.row.name] = new
    jct = {j.row.name: float(j.done) - j.row.submit for j in jobs if j.done is not None}
    last = max((j.done for j in jobs if j.done is not None), default=0.0)
    return PolluxResult(jct, sum(j.allocations for j in jobs), last)


STALL_SECONDS = 30.0  # what each allocation costs a job in the Pollux model: R18's resize cost, if known
USAGE_HALF_LIFE = 3600.0  # R14's half-life for the policy that weighs usage (an hour: the jobs' scale)


def tide_config(goodput: bool, resize_cost: float = 0.0, usage_half_life: float = 0.0) -> Config:
    """Tide's defaults (whatever they are where this runs), R19 on or off; ``resize_cost``: R18's cost of
    every job's resize (0: resizes free, R18 off); ``usage_half_life``: R14 (0: off)."""
    return replace(
        Config(), goodput=goodput, resize_cost_seconds=resize_cost, usage_half_life=usage_half_life
    )


POLICIES: dict[str, Callable[[], Policy]] = {
    "tide-goodput": lambda: TidePolicy(tide_config(goodput=True)),
    "tide-goodput-cost": lambda: TidePolicy(tide_config(goodput=True, resize_cost=STALL_SECONDS)),
    "tide-goodput-cost-usage": lambda: TidePolicy(
        tide_config(goodput=True, resize_cost=STALL_SECONDS, usage_half_life=USAGE_HALF_LIFE)
    ),
    "tide-goodput-cost-usage-half-to-given": lambda: TidePolicy(
        tide_config(goodput=True, resize_cost=STALL_SECONDS, usage_half_life=USAGE_HALF_LIFE),
        min_factor=0.5,
        max_factor=1.0,
    ),
    "tide-one-project-goodput-cost": lambda: TidePolicy(
        tide_config(goodput=True, resize_cost=STALL_SECONDS), mapping=ONE_PROJECT
    ),
    "tide": lambda: TidePolicy(tide_config(goodput=False)),
    "tiresias": Tiresias,
    "pollux-fixed-batch": PolluxFixedBatch,
    "oracle-fixed-batch": RemainingWorkOracle,
}
