"""An in-place grow's newcomer warms up from its container's start, not from its pod's creation.

``scheduler.elastic.inplace.relaunch`` on rows (no database: it reads and sets attributes only). A
newcomer whose pod was made long ago but whose image is still being pulled (``starting``) is not admitted
to the launch; once its container runs (``running``, ``started_at`` then) it is admitted after
``WARM_TIMEOUT_S`` without a warm report.
"""

from __future__ import annotations

from scheduler.elastic.inplace import WARM_TIMEOUT_S, relaunch
from scheduler.statuses import JobStatus, ReplicaDesired, ReplicaStatus
from scheduler.store.models import JobRow, ReplicaRow


def replica(index: int, status: ReplicaStatus, started_at: float, generation: int | None) -> ReplicaRow:
    return ReplicaRow(
        id=index + 1,
        index=index,
        node="gpu-0",
        gpus=1,
        desired=ReplicaDesired.RUN,
        status=status,
        created_at=0.0,
        started_at=started_at,
        launch_generation=generation,
    )


def test_a_newcomer_warms_up_from_its_containers_start() -> None:
    member = replica(0, ReplicaStatus.RUNNING, 0.0, 1)
    newcomer = replica(1, ReplicaStatus.STARTING, 10.0, None)  # its pod made at 10 s, its image pulling
    job = JobRow(id=1, name="train", status=JobStatus.RUNNING, generation=1, replicas=[member, newcomer])
    late = 10.0 + WARM_TIMEOUT_S + 1
    assert relaunch(job, {}, now=late) == 1 and newcomer.launch_generation is None  # the member trains on
    newcomer.status, newcomer.started_at = ReplicaStatus.RUNNING, late  # the container starts (mark_running)
    assert relaunch(job, {}, now=late + WARM_TIMEOUT_S - 1) == 1 and job.generation == 1
    assert relaunch(job, {}, now=late + WARM_TIMEOUT_S) == 0
    assert job.generation == 2 and member.launch_generation == newcomer.launch_generation == 2
