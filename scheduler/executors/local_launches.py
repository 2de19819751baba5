"""The local executor's torchrun launches: each replica's ``PET_*`` settings, one rendezvous port per launch.

Contract: the local executor uses ``TorchrunLaunches`` for a job whose command is a torchrun launch
(``scheduler.elastic.torchrun_argv.uses_torchrun``). Every launch of such a job is a fresh rendezvous of
exactly the job's current size (docs/elastic-resize.md, "coordinated restart"): ``env_for(spec, data_dir)``
returns the replica's environment for launch ``TIDE_GENERATION`` at size ``TIDE_NUM_REPLICAS`` (both set by
the engine; built by ``scheduler.elastic.environment``): ``PET_NNODES=N:N``, run id per generation, a port
allocated once per (project, job, generation) on 127.0.0.1 (every virtual node is this machine),
``PET_MAX_RESTARTS=0`` (Tide counts failures across launches, so a resize never spends one), the agent's
shutdown timeout below the executor's grace, and the checkpoint directory ``DATA/checkpoints/PROJECT/JOB-ID``
(``checkpoint_dir``, unless an ``EnvBuilder`` set ``TIDE_CHECKPOINT_DIR``). Other variables the job set
itself win. Whether a launch formed (its workers started) is read from ``/proc`` by
``scheduler.elastic.agent.procs.with_workers``.
"""

from __future__ import annotations

from pathlib import Path

from scheduler.elastic.agent.ports import free_port
from scheduler.elastic.environment import (
    Placement,
    fixed_size_launch,
    generation_of,
    torchrun_env,
    with_job_env,
)
from scheduler.executors.base import LaunchSpec

HOST = "127.0.0.1"


class TorchrunLaunches:
    """Ports and environments of the torchrun launches of one local executor."""

    def __init__(self, default_grace: float = 30.0) -> None:
        self.default_grace = default_grace
        self._ports: dict[tuple[str, str], tuple[int, int]] = {}  # (project, job) -> (generation, port)

    def port(self, project: str, job: str, generation: int) -> int:
        """The rendezvous port of one launch: the same for all its replicas, a new one for the next."""
        known = self._ports.get((project, job))
        if known is None or known[0] != generation:
            known = (generation, free_port())
            self._ports[(project, job)] = known
        return known[1]

    def env_for(self, spec: LaunchSpec, data_dir: Path) -> dict[str, str]:
        place = Placement(
            project=spec.project,
            job=spec.job,
            index=spec.index,
            gpus=len(spec.gpu_ids),
            host=HOST,
            port=self.port(spec.project, spec.job, generation_of(spec.env)),
            checkpoint_dir=checkpoint_dir(spec, data_dir),
            grace=spec.grace if spec.grace is not None else self.default_grace,
            max_restarts=0,
            local_addr=HOST,
        )
        return with_job_env(torchrun_env(fixed_size_launch(place, spec.env)), spec.env, forced=True)


def checkpoint_dir(spec: LaunchSpec, data_dir: Path) -> str:
    """The job's ``TIDE_CHECKPOINT_DIR``: its own setting, else ``DATA/checkpoints/PROJECT/JOB-ID``."""
    job_id = spec.env.get("TIDE_JOB_ID", "0")
    return spec.env.get("TIDE_CHECKPOINT_DIR") or str(
        data_dir / "checkpoints" / spec.project / f"{spec.job}-{job_id}"
    )
