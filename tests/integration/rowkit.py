"""Rows as the service writes them, for tests that write the database directly (as another process would)."""

from __future__ import annotations

from scheduler.store.models import JobRow


def pending_job(project_id: int, name: str, at: float, *, low: int, high: int, gpus: int = 1) -> JobRow:
    """A job as a submit stores it: pending, ``low`` to ``high`` replicas of ``gpus`` GPUs, submitted at ``at``."""
    return JobRow(
        project_id=project_id,
        name=name,
        status="pending",
        workers=high - 1,
        min_replicas=low,
        max_replicas=high,
        gpus_per_replica=gpus,
        command=["sleep", "1"],
        env={},
        created_at=at,
        submitted_at=at,
        restarts=0,
        generation=0,
    )
