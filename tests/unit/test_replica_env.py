"""A replica's environment (the job's env, the pluggable builder, then TIDE_*), and exits described."""

from __future__ import annotations

from dataclasses import replace

from scheduler.elastic.environment import ReplicaContext, replica_env
from scheduler.engine.reconcile import describe_exit
from scheduler.executors.base import LOST_EXIT_CODE


def context(index: int = 1, **job_env: str) -> ReplicaContext:
    return ReplicaContext(
        project="a",
        job="train",
        job_id=7,
        index=index,
        num_replicas=3,
        min_replicas=2,
        max_replicas=4,
        gpus_per_replica=2,
        node="node-1",
        master_node="node-0",
        gpu_ids=(2, 3),
        generation=5,
        job_env=job_env,
    )


def test_identity_variables() -> None:
    env = replica_env(context())
    assert env["TIDE_PROJECT"] == "a" and env["TIDE_JOB"] == "train" and env["TIDE_JOB_ID"] == "7"
    assert env["TIDE_REPLICA_INDEX"] == "1" and env["TIDE_REPLICA_ROLE"] == "worker"
    assert (
        env["TIDE_NUM_REPLICAS"] == "3"
        and env["TIDE_MIN_REPLICAS"] == "2"
        and env["TIDE_MAX_REPLICAS"] == "4"
    )
    assert (
        env["TIDE_GPU_IDS"] == "2,3" and env["TIDE_MASTER_NODE"] == "node-0" and env["TIDE_GENERATION"] == "5"
    )
    assert replica_env(context(index=0))["TIDE_REPLICA_ROLE"] == "master"


def test_job_env_then_builder_then_identity() -> None:
    def builder(ctx: ReplicaContext) -> dict[str, str]:
        return {"PET_NNODES": f"{ctx.min_replicas}:{ctx.max_replicas}", "SHARED": "builder", "TIDE_JOB": "x"}

    env = replica_env(context(SHARED="job", OWN="1"), builder)
    assert env["OWN"] == "1" and env["SHARED"] == "builder" and env["PET_NNODES"] == "2:4"
    assert env["TIDE_JOB"] == "train"  # identity cannot be overridden


def test_exits_described_for_people() -> None:
    assert describe_exit(1) == "exited with code 1"
    assert describe_exit(127) == "exited with code 127 (command not found)"
    assert describe_exit(-9) == "was killed by SIGKILL"
    assert describe_exit(LOST_EXIT_CODE).startswith("was lost")


def test_allowed_sizes_are_told_to_the_replica() -> None:
    """R16: a job allowed 2 or 4 replicas sees them; one with no list sees every count in min..max."""
    sized = replica_env(replace(context(), num_replicas=4, allowed_replicas=(2, 4)))
    assert sized["TIDE_ALLOWED_REPLICAS"] == "2,4" and sized["TIDE_NUM_REPLICAS"] == "4"
    assert replica_env(context())["TIDE_ALLOWED_REPLICAS"] == "2,3,4"
