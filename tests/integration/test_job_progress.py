"""Jobs report progress: a job run by the local executor writes the time of its last complete checkpoint
to ``$TIDE_CHECKPOINT_DIR/tide-checkpointed-at`` and Tide shows it on the job (the victim search weighs the
work done since)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from servicekit import RunningService, wait_for

# a job that marks a checkpoint just before its start, then a newer one 0.75 s later, then runs on
REPORTS = "; ".join(
    [
        "import os, pathlib, time",
        "d = pathlib.Path(os.environ['TIDE_CHECKPOINT_DIR'])",
        "d.mkdir(parents=True, exist_ok=True)",
        "start = time.time()",
        "(d / 'tide-checkpointed-at').write_text(str(start - 0.5))",
        "time.sleep(1)",
        "(d / 'tide-checkpointed-at').write_text(str(start + 0.25))",
        "time.sleep(60)",
    ]
)


def test_a_local_job_reports_its_checkpoints_through_its_mark_file(
    make_service: Callable[..., RunningService],
) -> None:
    service = make_service(None, executor="local", cycle_period=0.1)
    client = service.client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    client.submit("a", {"name": "train", "command": [sys.executable, "-c", REPORTS]})
    running = wait_for(
        lambda: (j := client.job("a", "train")).checkpointed_at is not None and j, timeout=30, what="a mark"
    )
    first = running.checkpointed_at  # type: ignore[union-attr]
    started = running.replicas[0].started_at  # type: ignore[union-attr]
    assert first is not None and started is not None
    later = wait_for(
        lambda: (t := client.job("a", "train").checkpointed_at) != first and t, timeout=30, what="newer mark"
    )
    assert isinstance(later, datetime) and later.tzinfo == UTC
    assert (later - first).total_seconds() == pytest.approx(0.75, abs=1e-3), (
        "the job's own times, as it wrote them"
    )
    assert abs((later - started).total_seconds()) < 5
