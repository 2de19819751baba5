"""The environment of one replica of a job, so that an unchanged ``torchrun train.py`` is elastic under Tide.

Contract: pure (standard library only, no clock, I/O or randomness). ``ReplicaLaunch`` describes one replica
of one launch of a job; ``replica_env(launch)`` returns the variables to add to that replica's environment,
as Kubeflow's training operator does: torchrun's launcher reads ``PET_<OPTION>`` for every option it
declares with ``action=env`` (``torch/distributed/argparse_util.py``), so no flag has to be passed. Both
executors use it: the local executor merges the dict into ``os.environ`` of the agent process, the
Kubernetes executor turns it into a container's ``env`` with ``pod_env``.

Variables set, each checked against ``torch/distributed/run.py`` of torch 2.13
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
``TIDE_REPLICA_INDEX``/``TIDE_ROLE``   ``0``/``master`` hosts the rendezvous; others are ``worker``
``TIDE_CHECKPOINT_DIR``                the job's checkpoint directory (same for every replica)
=====================================  ==========================================================

Why these values: docs/torchrun-notes.md and docs/elastic-resize.md. With torchrun's
defaults a scale-up deadlocked (shared TCP store) and dead peers were noticed only after 15 s of keep-alive.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from itertools import pairwise

MASTER_INDEX = 0
_MAX_PORT = 65535


class Role(StrEnum):
    MASTER = "master"
    WORKER = "worker"


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
        return Role.MASTER if self.replica_index == MASTER_INDEX else Role.WORKER

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


def run_id_for(project: str, job: str, generation: int) -> str:
    """A rendezvous id unique per launch of a job: reusing one would join the previous launch's state."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{project}.{job}")
    return f"{safe}.g{generation}"


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


def replica_env(launch: ReplicaLaunch) -> dict[str, str]:
    """The variables to add to the replica's environment (on top of the executor's own)."""
    t = launch.tuning
    env = {
        "PET_NNODES": f"{launch.min_nodes}:{launch.max_nodes}",
        "PET_NPROC_PER_NODE": str(launch.nproc_per_node),
        "PET_RDZV_BACKEND": launch.rdzv_backend,
        "PET_RDZV_ENDPOINT": f"{_host_for_endpoint(launch.rdzv_host)}:{launch.rdzv_port}",
        "PET_RDZV_ID": launch.run_id,
        "PET_RDZV_CONF": rdzv_conf(launch),
        "PET_MAX_RESTARTS": str(launch.max_restarts),
        "PET_MONITOR_INTERVAL": _number(t.monitor_interval_s),
        "PET_SHUTDOWN_TIMEOUT": str(t.shutdown_timeout_s),
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        "TIDE_JOB": launch.job,
        "TIDE_PROJECT": launch.project,
        "TIDE_REPLICA_INDEX": str(launch.replica_index),
        "TIDE_ROLE": launch.role.value,
        "TIDE_CHECKPOINT_DIR": launch.checkpoint_dir,
    }
    if launch.local_addr:
        env["PET_LOCAL_ADDR"] = launch.local_addr
    return env


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


def pod_env(env: dict[str, str]) -> list[dict[str, str]]:
    """The same variables as a Kubernetes container's ``env`` list, in a stable order."""
    return [{"name": k, "value": v} for k, v in sorted(env.items())]


def _host_for_endpoint(host: str) -> str:
    # An IPv6 literal needs brackets in host:port, as torchrun's parse_rendezvous_endpoint expects.
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))
