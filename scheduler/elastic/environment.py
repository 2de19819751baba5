"""Every variable a replica process starts with: Tide's identity and, for torchrun, a fixed-size launch.

Contract: pure (standard library only, no clock, I/O or randomness). Three layers, each built here only:

1. ``replica_env(ctx, extra)``: what the engine gives every replica. The job's own ``env`` first, then
   whatever the pluggable ``EnvBuilder`` adds, then the identity (``identity_env``), which a job cannot
   override: ``TIDE_PROJECT``, ``TIDE_JOB``, ``TIDE_JOB_ID``; ``TIDE_REPLICA_INDEX`` (0 is the master) and
   ``TIDE_REPLICA_ROLE`` (``master``/``worker``, ``launch.role_of``); ``TIDE_NUM_REPLICAS`` (replicas the job
   has now), ``TIDE_MIN_REPLICAS``, ``TIDE_MAX_REPLICAS``; ``TIDE_NODE``, ``TIDE_MASTER_NODE``,
   ``TIDE_GPU_IDS`` (comma separated), ``TIDE_GPUS_PER_REPLICA``; ``TIDE_GENERATION`` (bumped at every
   start and resize: the launch); ``TIDE_ALLOWED_REPLICAS`` (the counts the job may run at, comma
   separated: every count in min..max unless it gave ``allowed_replicas``).
2. ``torchrun_env(launch)``: the ``PET_*`` settings of one replica of a torchrun launch, as Kubeflow's
   training operator does: torchrun reads ``PET_<OPTION>`` for every option it declares with
   ``action=env`` (``torch/distributed/argparse_util.py``), so an unchanged ``torchrun train.py`` is
   elastic under Tide. ``fixed_size_launch`` is that launch at the job's current size
   (``TIDE_NUM_REPLICAS``) with a run id per ``TIDE_GENERATION``, for both executors; ``with_job_env``
   merges it with the job's env (Tide's launch settings win where ``forced``).
3. ``relaunch_env(...)``: what a pod's agent sets on top of its pod's environment for each launch the
   service orders (an in-place relaunch at a new size, rank and port).

Variables of ``torchrun_env``, each checked against ``torch/distributed/run.py`` of torch 2.13
(tests/unit/test_torchrun_env.py parses them with torchrun's own parser):

=====================================  ==========================================================
``PET_NNODES``                         ``MIN:MAX`` replicas (``N:N`` for a launch at a fixed size)
``PET_NPROC_PER_NODE``                 workers per replica: its GPUs, or 1 on CPU
``PET_RDZV_BACKEND``                   ``c10d``: the store lives in the master replica's agent
``PET_RDZV_ENDPOINT``                  ``host:port`` of the master replica; the port is Tide's
``PET_RDZV_ID``                        the run id (torchrun's option is ``--rdzv-id``; a ``PET_RUN_ID``
                                       would be ignored). A new one per launch: a fresh rendezvous
``PET_RDZV_CONF``                      ``is_host`` (1 on the master only), keep-alive, timeouts
``PET_MAX_RESTARTS``                   failures torchrun absorbs by itself before the replica fails
``PET_MONITOR_INTERVAL``               seconds between the agent's checks of its workers/waiting nodes
``PET_SHUTDOWN_TIMEOUT``               seconds the agent gives its workers after SIGTERM, then SIGKILL
``PET_LOCAL_ADDR``                     (optional) this replica's address, when the host name will not do
``TORCH_DISABLE_SHARE_RDZV_TCP_STORE`` ``1``: workers get their own store (needed to scale up at all)
``TIDE_JOB``/``TIDE_PROJECT``          the job's identity
``TIDE_REPLICA_INDEX``                 the replica's index; ``TIDE_REPLICA_ROLE`` ``master`` for 0
``TIDE_CHECKPOINT_DIR``                the job's checkpoint directory (same for every replica)
=====================================  ==========================================================

Why these values: docs/torchrun-notes.md and docs/elastic-resize.md. With torchrun's
defaults a scale-up deadlocked (shared TCP store) and dead peers were noticed only after 15 s of keep-alive.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from scheduler.elastic.launch import Role, endpoint, role_of, run_id_for

NODE_RANK = "TIDE_NODE_RANK"  # the replica's rank in an in-place launch (members ranked by index)
# What a launch must be for Tide's resize to work: these are Tide's, whatever the job's env says.
FORCED = ("PET_NNODES", "PET_RDZV_ENDPOINT", "PET_RDZV_ID", "PET_RDZV_CONF", "PET_MAX_RESTARTS")
_MAX_PORT = 65535


# 1. Tide's identity ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ReplicaContext:
    """What is known about a replica when it is launched."""

    project: str
    job: str
    job_id: int
    index: int
    num_replicas: int
    min_replicas: int
    max_replicas: int
    gpus_per_replica: int
    node: str
    master_node: str
    gpu_ids: tuple[int, ...]
    generation: int
    job_env: Mapping[str, str] = field(default_factory=dict)
    allowed_replicas: tuple[int, ...] = ()  # R16: the only counts it runs at; empty: any in min..max
    gpu_fraction: str | None = None  # R20: its share of its one GPU as a decimal ("0.5"); None: whole GPUs

    @property
    def role(self) -> Role:
        return role_of(self.index)


EnvBuilder = Callable[[ReplicaContext], Mapping[str, str]]


def identity_env(ctx: ReplicaContext) -> dict[str, str]:
    env = _identity(ctx)
    if ctx.gpu_fraction is not None:  # R20: the share of the GPU its process is to cap its memory at
        env["TIDE_GPU_FRACTION"] = ctx.gpu_fraction
    return env


def _identity(ctx: ReplicaContext) -> dict[str, str]:
    return {
        "TIDE_PROJECT": ctx.project,
        "TIDE_JOB": ctx.job,
        "TIDE_JOB_ID": str(ctx.job_id),
        "TIDE_REPLICA_INDEX": str(ctx.index),
        "TIDE_REPLICA_ROLE": ctx.role.value,
        "TIDE_NUM_REPLICAS": str(ctx.num_replicas),
        "TIDE_MIN_REPLICAS": str(ctx.min_replicas),
        "TIDE_MAX_REPLICAS": str(ctx.max_replicas),
        "TIDE_NODE": ctx.node,
        "TIDE_MASTER_NODE": ctx.master_node,
        "TIDE_GPU_IDS": ",".join(str(g) for g in ctx.gpu_ids),
        "TIDE_GPUS_PER_REPLICA": str(ctx.gpus_per_replica),
        "TIDE_GENERATION": str(ctx.generation),
        "TIDE_ALLOWED_REPLICAS": ",".join(str(n) for n in ctx.allowed_replicas)
        or ",".join(str(n) for n in range(ctx.min_replicas, ctx.max_replicas + 1)),
    }


def replica_env(ctx: ReplicaContext, extra: EnvBuilder | None = None) -> dict[str, str]:
    env = dict(ctx.job_env)
    if extra is not None:
        env.update(extra(ctx))
    env.update(identity_env(ctx))
    return env


# 2. torchrun's settings of one launch ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RendezvousTuning:
    """Timing of torchrun's agent and c10d rendezvous, in whole seconds where torchrun wants integers.

    The defaults are the settings measured to resize reliably on this project's machines:
    keep-alive every second and a peer declared dead after 3 misses (torchrun: 5 s x 3), a last call of 3 s
    once ``min`` nodes joined (torchrun: 30 s). ``shutdown_timeout_s`` is the agent's grace for its workers
    after SIGTERM; the executor's own grace must be longer, or checkpoints are cut short.
    """

    keep_alive_interval_s: int = 1
    keep_alive_max_attempt: int = 3
    last_call_timeout_s: int = 3
    join_timeout_s: int = 300
    monitor_interval_s: float = 0.5
    shutdown_timeout_s: int = 30

    def __post_init__(self) -> None:
        for name in (
            "keep_alive_interval_s",
            "keep_alive_max_attempt",
            "last_call_timeout_s",
            "join_timeout_s",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.monitor_interval_s <= 0:
            raise ValueError(f"monitor_interval_s must be positive, got {self.monitor_interval_s}")
        if self.shutdown_timeout_s < 0:
            raise ValueError(f"shutdown_timeout_s must be >= 0, got {self.shutdown_timeout_s}")


@dataclass(frozen=True, slots=True)
class ReplicaLaunch:
    """One replica (``replica_index``) of one launch (``run_id``) of a job sized ``min_nodes..max_nodes``.

    ``rdzv_host``/``rdzv_port`` address the master replica (index 0), which hosts the rendezvous store.
    ``nproc_per_node`` is the replica's GPU count, or 1 on CPU (see ``nproc_for``).
    """

    job: str
    project: str
    replica_index: int
    run_id: str
    rdzv_host: str
    rdzv_port: int
    min_nodes: int
    max_nodes: int
    checkpoint_dir: str
    nproc_per_node: int = 1
    max_restarts: int = 3
    rdzv_backend: str = "c10d"
    local_addr: str | None = None
    tuning: RendezvousTuning = field(default_factory=RendezvousTuning)

    def __post_init__(self) -> None:
        for name in ("job", "project", "run_id", "rdzv_host", "checkpoint_dir", "rdzv_backend"):
            if not getattr(self, name):
                raise ValueError(f"{name} must not be empty")
        if not 1 <= self.min_nodes <= self.max_nodes:
            raise ValueError(f"need 1 <= min_nodes <= max_nodes, got {self.min_nodes}:{self.max_nodes}")
        if not 0 <= self.replica_index < self.max_nodes:
            raise ValueError(f"replica_index {self.replica_index} outside 0..{self.max_nodes - 1}")
        if not 0 < self.rdzv_port <= _MAX_PORT:
            raise ValueError(f"rdzv_port {self.rdzv_port} is not a TCP port")
        if self.nproc_per_node < 1 or self.max_restarts < 0:
            raise ValueError("nproc_per_node must be >= 1 and max_restarts >= 0")
        if "," in self.run_id or "=" in self.run_id:
            raise ValueError(f"run_id {self.run_id!r} must not contain ',' or '='")

    @property
    def role(self) -> Role:
        return role_of(self.replica_index)

    @property
    def is_rendezvous_host(self) -> bool:
        return self.role is Role.MASTER

    def at_fixed_size(self, n: int, run_id: str) -> ReplicaLaunch:
        """This replica in a fresh rendezvous of exactly ``n`` replicas (a coordinated resize)."""
        return replace(self, min_nodes=n, max_nodes=n, run_id=run_id)


def shutdown_timeout(grace: float) -> int:
    """The agent's grace for its workers after SIGTERM: inside the executor's own grace, so that the
    agent (not a SIGKILL from the executor) ends the workers and the checkpoint is complete."""
    if grace >= 10:
        return int(grace - 5)
    return max(1, int(grace / 2))


def nproc_for(gpus_per_replica: int) -> int:
    """Workers per replica: one per GPU, or a single CPU worker for a replica without GPUs."""
    if gpus_per_replica < 0:
        raise ValueError(f"gpus_per_replica must be >= 0, got {gpus_per_replica}")
    return max(gpus_per_replica, 1)


def rdzv_conf(launch: ReplicaLaunch) -> str:
    """The ``--rdzv-conf`` string: comma-separated ``key=value`` pairs that torchrun passes to the backend."""
    t = launch.tuning
    pairs = {
        "is_host": "1" if launch.is_rendezvous_host else "0",
        "join_timeout": str(t.join_timeout_s),
        "last_call_timeout": str(t.last_call_timeout_s),
        "keep_alive_interval": str(t.keep_alive_interval_s),
        "keep_alive_max_attempt": str(t.keep_alive_max_attempt),
    }
    return ",".join(f"{k}={v}" for k, v in pairs.items())


def torchrun_env(launch: ReplicaLaunch) -> dict[str, str]:
    """The variables to add to the replica's environment (on top of the executor's own)."""
    t = launch.tuning
    env = {
        "PET_NNODES": f"{launch.min_nodes}:{launch.max_nodes}",
        "PET_NPROC_PER_NODE": str(launch.nproc_per_node),
        "PET_RDZV_BACKEND": launch.rdzv_backend,
        "PET_RDZV_ENDPOINT": endpoint(launch.rdzv_host, launch.rdzv_port),
        "PET_RDZV_ID": launch.run_id,
        "PET_RDZV_CONF": rdzv_conf(launch),
        "PET_MAX_RESTARTS": str(launch.max_restarts),
        "PET_MONITOR_INTERVAL": _number(t.monitor_interval_s),
        "PET_SHUTDOWN_TIMEOUT": str(t.shutdown_timeout_s),
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        "TIDE_JOB": launch.job,
        "TIDE_PROJECT": launch.project,
        "TIDE_REPLICA_INDEX": str(launch.replica_index),
        "TIDE_REPLICA_ROLE": launch.role.value,
        "TIDE_CHECKPOINT_DIR": launch.checkpoint_dir,
    }
    if launch.local_addr:
        env["PET_LOCAL_ADDR"] = launch.local_addr
    return env


def generation_of(job_env: Mapping[str, str]) -> int:
    """The launch a replica belongs to (``TIDE_GENERATION``, set by the engine; 0 when unset)."""
    return int(job_env.get("TIDE_GENERATION", "0"))


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one replica of a fixed-size launch runs: what its executor knows beyond the engine's env."""

    project: str
    job: str
    index: int
    gpus: int  # GPUs of the replica (0: one CPU worker)
    host: str  # the master's rendezvous host
    port: int  # the launch's rendezvous port
    checkpoint_dir: str
    grace: float  # the executor's grace: the agent's shutdown timeout fits inside it
    max_restarts: int = 3
    local_addr: str | None = None


def fixed_size_launch(place: Placement, job_env: Mapping[str, str]) -> ReplicaLaunch:
    """The replica's part of launch ``TIDE_GENERATION`` at exactly ``TIDE_NUM_REPLICAS`` replicas."""
    size = max(int(job_env.get("TIDE_NUM_REPLICAS", "1")), place.index + 1)
    return ReplicaLaunch(
        job=place.job,
        project=place.project,
        replica_index=place.index,
        run_id=run_id_for(place.project, place.job, generation_of(job_env)),
        rdzv_host=place.host,
        rdzv_port=place.port,
        min_nodes=size,
        max_nodes=size,
        checkpoint_dir=place.checkpoint_dir,
        nproc_per_node=nproc_for(place.gpus),
        max_restarts=place.max_restarts,
        local_addr=place.local_addr,
        tuning=RendezvousTuning(shutdown_timeout_s=shutdown_timeout(place.grace)),
    )


def with_job_env(ours: Mapping[str, str], job_env: Mapping[str, str], *, forced: bool) -> dict[str, str]:
    """The job's env over ``ours``; with ``forced``, the ``FORCED`` settings of the launch stay ours."""
    merged = {**ours, **job_env}
    if forced:
        merged.update({k: ours[k] for k in FORCED})
    return merged


# 3. an in-place relaunch ------------------------------------------------------------------------------
def relaunch_env(
    *, generation: int, size: int, rank: int, host: str, port: int, run_id: str, rdzv_conf_now: str
) -> dict[str, str]:
    """What launch ``generation`` (``size`` replicas, this one ranked ``rank``, the master at
    ``host:port``) sets on top of a pod's environment, whose ``PET_RDZV_CONF`` is ``rdzv_conf_now``: a
    fixed size, this replica's rank, no restarts of its own (the service counts failures across launches)."""
    return {
        "PET_NNODES": f"{size}:{size}",
        "PET_NODE_RANK": str(rank),
        NODE_RANK: str(rank),
        "PET_RDZV_ENDPOINT": endpoint(host, port),
        "PET_RDZV_ID": run_id,
        "PET_RDZV_CONF": _with_host(rdzv_conf_now, role_of(rank) is Role.MASTER),
        "PET_MAX_RESTARTS": "0",
        "TIDE_NUM_REPLICAS": str(size),
        "TIDE_GENERATION": str(generation),
    }


def _with_host(current: str, is_host: bool) -> str:
    pairs = [p for p in current.split(",") if p and not p.startswith("is_host=")]
    return ",".join([f"is_host={1 if is_host else 0}", *pairs])


def pod_env(env: dict[str, str]) -> list[dict[str, str]]:
    """The same variables as a Kubernetes container's ``env`` list, in a stable order."""
    return [{"name": k, "value": v} for k, v in sorted(env.items())]


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))
