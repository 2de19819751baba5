"""A job's forecast as the API shows it: a running job below its largest size has a growth time; one at
``max_replicas`` has none, even when the stored forecast was made before it grew (forecasts are made every
few seconds, apart from the cycle), so no reader sees "grows to 0 replicas"."""

from __future__ import annotations

from typing import Any

from api.server.convert import job_public
from scheduler.statuses import JobStatus, ReplicaDesired, ReplicaStatus
from scheduler.store.models import JobRow, ReplicaRow

NEVER: dict[str, Any] = {  # what a forecast stores for a job it does not see grow within its horizon
    "start_p50": None, "start_p90": None, "size": 4, "grows": True, "after": None, "source": None,
    "computed_at": 1_800_000_000.0,
}  # fmt: skip


def _train(running: int, eta: dict[str, Any] | None) -> JobRow:
    """``train``: 1..4 replicas of 1 GPU, running ``running`` of them, with the stored forecast ``eta``."""
    job = JobRow(
        name="train", status=JobStatus.RUNNING, workers=3, min_replicas=1, max_replicas=4, gpus_per_replica=1,
        command=["sleep", "600"], env={}, interactive=False, priority=0, created_at=1.0, submitted_at=1.0,
        restarts=0, generation=1, topology="preferred", eta=eta,
    )  # fmt: skip
    job.replicas = [_replica(i) for i in range(running)]
    return job


def _replica(index: int) -> ReplicaRow:
    return ReplicaRow(
        index=index, node="node-0", gpus=1, gpu_ids=[index], desired=ReplicaDesired.RUN,
        status=ReplicaStatus.RUNNING, pid=100 + index, created_at=2.0,
    )  # fmt: skip


def test_a_running_job_at_its_largest_size_has_no_growth_time() -> None:
    assert job_public(_train(4, NEVER), "team-a").grow_at is None


def test_a_running_job_below_its_largest_size_keeps_its_growth_time() -> None:
    grow_at = job_public(_train(2, NEVER), "team-a").grow_at
    assert grow_at is not None and grow_at.size == 4 and grow_at.start_p50 is None
