"""The environment a replica process starts with: its identity (``TIDE_*``) plus what the job asked for.

Contract: ``replica_env(ctx, extra)`` is pure: the job's own ``env`` first, then whatever the pluggable
``EnvBuilder`` adds (torchrun's ``PET_*`` settings, for instance), then the ``TIDE_*`` identity, which a job
cannot override. Variables:

- ``TIDE_PROJECT``, ``TIDE_JOB``, ``TIDE_JOB_ID``: which job this is;
- ``TIDE_REPLICA_INDEX`` (0 is the master), ``TIDE_REPLICA_ROLE`` (``master``/``worker``);
- ``TIDE_NUM_REPLICAS`` (replicas the job has now), ``TIDE_MIN_REPLICAS``, ``TIDE_MAX_REPLICAS``;
- ``TIDE_NODE``, ``TIDE_MASTER_NODE``, ``TIDE_GPU_IDS`` (comma separated), ``TIDE_GPUS_PER_REPLICA``;
- ``TIDE_GENERATION``: bumped at every start and resize, usable as a rendezvous run id;
- ``TIDE_ALLOWED_REPLICAS``: the replica counts the job may run at, comma separated (every count in
  min..max unless it gave ``allowed_replicas``); ``TIDE_NUM_REPLICAS`` is always one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


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

    @property
    def role(self) -> str:
        return "master" if self.index == 0 else "worker"


EnvBuilder = Callable[[ReplicaContext], Mapping[str, str]]


def identity_env(ctx: ReplicaContext) -> dict[str, str]:
    return {
        "TIDE_PROJECT": ctx.project,
        "TIDE_JOB": ctx.job,
        "TIDE_JOB_ID": str(ctx.job_id),
        "TIDE_REPLICA_INDEX": str(ctx.index),
        "TIDE_REPLICA_ROLE": ctx.role,
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
