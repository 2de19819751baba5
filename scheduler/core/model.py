"""The scheduling core's input: a frozen snapshot of the cluster.

Contract: plain frozen dataclasses, no behaviour beyond derived read-only properties. The shell (engine,
simulator, tests) builds a ``ClusterState`` and passes it to ``plan_cycle``; nothing here reads a clock,
generates ids or touches I/O. Times are plain floats (seconds on whatever clock the shell uses).

Identity: a project, department and node are named; a job is ``(project, name)``. Replica 0 of a job is the
master (it hosts the torchrun rendezvous), replicas 1..N are workers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction

# a count or number of GPUs that no cap, step or memo reaches: no limit
UNLIMITED = 1 << 30


class JobPhase(StrEnum):
    """Where a job stands as the core sees it. Finished jobs are not part of a snapshot."""

    PENDING = "pending"
    RUNNING = "running"


@dataclass(frozen=True, slots=True)
class Node:
    """A machine with ``gpus`` whole GPUs. An unschedulable (cordoned) node takes no new replicas.

    ``domain``: its topology domain (a rack, an NVLink domain), if the cluster names them (R17).
    """

    name: str
    gpus: int
    schedulable: bool = True
    domain: str | None = None


@dataclass(frozen=True, slots=True)
class Department:
    """Optional parent of projects; fair share is divided department-first (R1)."""

    name: str
    deserved_gpus: int
    over_quota_weight: float = 1.0
    limit_gpus: int | None = None
    created_at: float = 0.0
    # R15: its projects' jobs younger than this are spared by reclaim (projects without their own inherit it)
    min_runtime_seconds: float = 0.0
    # R18: seconds a resize pauses its projects' jobs not yet measured (projects without their own inherit it)
    resize_cost_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Project:
    """A tenant with a guaranteed quota (``deserved_gpus``).

    ``over_quota_weight`` is its share of GPUs beyond quotas (0: it may borrow only what nobody else wants);
    ``limit_gpus`` is a hard cap (R11); ``allow_over_quota=False`` keeps it inside its quota.
    ``usage_gpu_seconds`` is its decayed GPU-seconds above quota so far (R14; ``scheduler.core.usage``).
    ``min_runtime_seconds``: a job of it started or resized less than that ago is not a reclaim victim unless
    a guarantee needs it (R15; ``None``: its department's, else 0; ``scheduler.core.minruntime``).
    ``resize_cost_seconds``: what a resize costs its jobs not yet measured (R18; ``None``: its department's,
    else the config's; ``scheduler.core.resize_cost``).
    """

    name: str
    deserved_gpus: int
    over_quota_weight: float = 1.0
    limit_gpus: int | None = None
    allow_over_quota: bool = True
    department: str | None = None
    created_at: float = 0.0
    usage_gpu_seconds: float = 0.0
    min_runtime_seconds: float | None = None
    resize_cost_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Replica:
    """One placed replica. ``releasing`` means it was told to stop and still holds its GPUs.

    A replica of a fractional job (R20) holds no whole GPU (``gpus`` 0): ``share`` of the shared GPU ``gpu`` of
    its node (the core's number for that GPU on that node, not a device id; ``scheduler.core.fractions``).
    """

    index: int
    node: str
    gpus: int
    releasing: bool = False
    share: Fraction | None = None
    gpu: int | None = None

    @property
    def is_master(self) -> bool:
        return self.index == 0


@dataclass(frozen=True, slots=True)
class Throughput:
    """A job's progress rate as a function of its size, fitted from what it reported (R19; ``goodput.fit``).

    One training step at ``n`` replicas takes ``compute / n + sync * (n - 1)`` (relative) seconds: the
    computation its replicas split (at the job's fixed global batch) plus a synchronisation term that grows
    with every replica beyond the first, as Pollux models it. Only ratios matter to the core: how much faster
    the job runs at one size than at another. ``sync = 0`` is linear scaling.
    """

    compute: float
    sync: float = 0.0


@dataclass(frozen=True, slots=True)
class Job:
    """A distributed PyTorch job: ``min_replicas..max_replicas`` replicas of ``gpus_per_replica`` GPUs.

    ``replicas`` holds the placed ones (active and releasing). A job with no active replica is pending.
    ``last_resized_at`` is when it last started, grew or shrank (for the settle time, R7; every resize
    restarts the job from its checkpoint). ``checkpointed_at`` is when it last completed a checkpoint, as it
    reported it (``None``: never): R5's least-work-lost tie-break weighs what each victim would lose.
    ``allowed_replicas``: the only counts it may run at besides ``min_replicas`` and ``max_replicas`` (R16).
    ``topology``: ``preferred`` or ``required``: whether its replicas may span topology domains (R17).
    ``throughput``: its fitted speed by size, if it reports progress (R19; ``None``: today's rule).
    ``resize_cost_seconds``: the seconds a resize pauses it, as measured (``None``: not yet; its project's
    default then applies): R18 weighs growth against it and lengthens its settle time.
    ``gpu_fraction``: each replica takes this share of one GPU instead of ``gpus_per_replica`` whole GPUs
    (R20; ``scheduler.core.fractions``): replicas of one project's jobs share a GPU; such a job is rigid.
    """

    project: str
    name: str
    min_replicas: int
    max_replicas: int
    gpus_per_replica: int = 1
    interactive: bool = False
    priority: int = 0
    submitted_at: float = 0.0
    replicas: tuple[Replica, ...] = ()
    last_resized_at: float | None = None
    checkpointed_at: float | None = None
    # R16: the replica counts it may run at (empty: any count in min..max); see ``sizes``
    allowed_replicas: tuple[int, ...] = ()
    # R17: "preferred" (start inside one topology domain where it fits) or "required" (only there)
    topology: str = "preferred"
    # R19: its speed by size, fitted from the progress it reported (None: it reports none)
    throughput: Throughput | None = None
    # R18: measured seconds a resize pauses it (None: its project's, department's or the config's default)
    resize_cost_seconds: float | None = None
    # R20: the share of one GPU each replica takes (None: whole GPUs, ``gpus_per_replica`` of them)
    gpu_fraction: Fraction | None = None
    # ``(project, name)``, computed once: the core looks it up millions of times per replay
    key: tuple[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", (self.project, self.name))

    @property
    def elastic(self) -> bool:
        return self.max_replicas > self.min_replicas

    @property
    def preemptible(self) -> bool:
        return not self.interactive

    @property
    def active(self) -> tuple[Replica, ...]:
        return tuple(r for r in self.replicas if not r.releasing)

    @property
    def phase(self) -> JobPhase:
        return JobPhase.RUNNING if any(not r.releasing for r in self.replicas) else JobPhase.PENDING

    @property
    def demand_gpus(self) -> int:
        """The most GPUs it asks for; R1 counts only what today's nodes could hold (`fairshare.placeable_demand`)."""
        return self.max_replicas * self.gpus_per_replica


@dataclass(frozen=True, slots=True)
class ClusterState:
    """Everything ``plan_cycle`` reads. Order inside each tuple does not change the plan."""

    nodes: tuple[Node, ...]
    projects: tuple[Project, ...]
    jobs: tuple[Job, ...] = ()
    departments: tuple[Department, ...] = ()


@dataclass(frozen=True, slots=True)
class Config:
    """Policy knobs. ``settle_seconds``: a job just resized is not grown or shrunk for a borrower (R7).

    ``borrowing`` off caps every project at its deserved quota (static partitioning); ``elastic`` off makes
    every job rigid at ``max_replicas`` and reclaim evict whole jobs (what whole-job preemption schedulers do).
    Both exist so the simulator can compare Tide with those baselines through this same core.
    ``usage_half_life`` (seconds; 0 = off) turns on fair share over time (R14): a project's over-quota
    weight shrinks with its decayed usage above quota.
    ``least_work_lost`` (R5): among victims the rules leave equal, take those that lose the fewest
    GPU-seconds since their last checkpoint first; off, the newest job goes first as before.
    ``goodput`` (R19): among a project's growth claims and for idle GPUs, jobs that report their throughput
    are ranked by the progress one more GPU adds (``scheduler.core.goodput``) and never grown past the size
    where their speed peaks; off, every job grows by today's rule (oldest first).
    ``resize_cost_seconds`` (R18): what a resize costs a job with no estimate of its own and no project or
    department default (0: free, the rules as before); ``settle_restarts``: a job's settle time is at least
    this many of its resize costs (``scheduler.core.resize_cost``). ``next_plan_seconds``: about how long until
    the caller plans again (the live loop's cycle period; a simulator's step): a job started now grows into
    GPUs being released for it no sooner than that, so with a settle time longer than it the job starts whole
    instead (decision 71).
    """

    settle_seconds: float = 10.0
    borrowing: bool = True
    elastic: bool = True
    reclaim: bool = True
    topology: bool = True  # R17: place gangs by node domains (where nodes carry them); off ignores them
    usage_half_life: float = 0.0
    least_work_lost: bool = True
    # R19: idle GPUs and a project's share go first to the jobs that turn a GPU into the most progress
    goodput: bool = True
    resize_cost_seconds: float = 0.0
    settle_restarts: float = 10.0
    next_plan_seconds: float = 1.0
