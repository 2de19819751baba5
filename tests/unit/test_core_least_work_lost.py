"""R5's least-work-lost tie-break: among victims the rules leave equal, the one that loses the least work goes.

Each job reports when it last completed a checkpoint (``Job.checkpointed_at``); a victim loses the GPUs it
runs on times the time since that checkpoint or its last (re)start, whichever is later. The tie-break
comes after the project furthest above its fair share, the lowest priority and extras before whole jobs,
and before "newest job first" (docs/rules.md, decision 26). Every ``Cluster.cycle()`` also checks all
invariants (tests/corebuild.py).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from corebuild import Cluster, nodes

from scheduler.core import Cause, Config, Job, Replica
from scheduler.core.explain import amount

NOW = 3600.0  # an hour after the first jobs started


def _running(
    project: str,
    name: str,
    where: list[str],
    *,
    started: float = 0.0,
    checkpoint: float | None = None,
    gpus: int = 1,
    low: int | None = None,
    priority: int = 0,
) -> Job:
    """A job running one replica of ``gpus`` GPUs on each node of ``where`` since ``started`` (submitted then
    too), at least ``low`` replicas (all of them by default)."""
    replicas = tuple(Replica(i, n, gpus) for i, n in enumerate(where))
    size = len(where)
    return Job(
        project, name, size if low is None else low, size, gpus, priority=priority, submitted_at=started,
        replicas=replicas, last_resized_at=started, checkpointed_at=checkpoint,
    )  # fmt: skip


def _borrower_with(x: Job, y: Job, config: Config | None = None) -> Cluster:
    """b (guarantee 2) borrows all 4 GPUs: two old jobs that never checkpointed and ``x`` and ``y``. a
    (guarantee 2) then asks for 1 GPU, which must be reclaimed from b (R2): one of b's jobs goes."""
    c = Cluster(nodes(4), config=config).project("a", 2).project("b", 2)
    old = [_running("b", f"old-{i}", [f"node-{i}"]) for i in (1, 2)]
    c.state = replace(c.state, jobs=(*old, x, y))
    c.now = NOW
    return c.submit("a", "one")


# story, x (started, checkpoint), y (started, checkpoint), the victim, what its reason says it loses
CASES = [
    (
        "two equal victims: the freshest checkpoint goes, though y is newer",
        (10.0, 3500.0),
        (20.0, 3000.0),
        "x",
        "loses ~2 GPU-minutes of work (1 GPU x 2 min since its last checkpoint)",
    ),
    (
        "a job that never checkpointed loses everything since it started",
        (10.0, 3300.0),
        (20.0, None),
        "x",
        "loses ~5 GPU-minutes of work (1 GPU x 5 min since its last checkpoint)",
    ),
    (
        "a job that never checkpointed but started a minute ago loses less than one checkpointed 5 min ago",
        (10.0, 3300.0),
        (3540.0, None),
        "y",
        "loses ~60 GPU-seconds of work (1 GPU x 60 s since it last started or was resized; it has reported no "
        "checkpoint)",
    ),
    (
        "a restart resumes from the checkpoint: work before it is already lost, only what came after counts",
        (3500.0, 1000.0),
        (20.0, 3300.0),
        "x",
        "loses ~2 GPU-minutes of work (1 GPU x 2 min since it last started or was resized, after its last "
        "checkpoint)",
    ),
]


@pytest.mark.parametrize(("story", "x", "y", "victim", "words"), CASES, ids=[c[0] for c in CASES])
def test_a_reclaim_takes_the_victim_that_loses_the_least_work(
    story: str, x: tuple[float, float | None], y: tuple[float, float | None], victim: str, words: str
) -> None:
    c = _borrower_with(
        _running("b", "x", ["node-3"], started=x[0], checkpoint=x[1]),
        _running("b", "y", ["node-4"], started=y[0], checkpoint=y[1]),
    )
    plan = c.cycle()
    assert c.decisions(plan) == [("evict", "b", victim, [0])], story
    evict = plan.decisions[0]
    assert evict.cause == Cause.RECLAIM and evict.for_job == ("a", "one")
    assert evict.reason == (
        f"reclaimed for a/one: project b holds 4 GPUs, above its fair share of 3; {words}"
    ), story
    job = c.job("b", "x" if victim == "y" else "y")  # the job spared still runs
    assert job.active
    c.cycle()
    assert (c.alloc("a"), c.alloc("b")) == (1, 3)


def test_with_the_tie_break_off_the_newest_job_goes_as_before() -> None:
    """``Config.least_work_lost=False`` (the simulator's --no-least-work-lost): y, the newest, goes although
    it would lose ten minutes of work and x two."""
    c = _borrower_with(
        _running("b", "x", ["node-3"], started=10, checkpoint=3500),
        _running("b", "y", ["node-4"], started=20, checkpoint=3000),
        Config(settle_seconds=0, least_work_lost=False),
    )
    plan = c.cycle()
    assert c.decisions(plan) == [("evict", "b", "y", [0])]
    # the cost is still said and counted, only no longer weighed
    assert plan.decisions[0].lost_gpu_seconds == 600
    assert plan.decisions[0].reason.endswith(
        "loses ~10 GPU-minutes of work (1 GPU x 10 min since its last checkpoint)"
    )


def test_the_tie_break_never_overrides_priority() -> None:
    """R5 first: b's low-priority job goes although it never checkpointed in an hour on 1 GPU, and b's
    normal-priority job checkpointed a second ago."""
    c = _borrower_with(
        _running("b", "low", ["node-3"], priority=-1),
        _running("b", "fresh", ["node-4"], started=20, checkpoint=NOW - 1),
    )
    plan = c.cycle()
    assert c.decisions(plan) == [("evict", "b", "low", [0])]
    assert plan.decisions[0].lost_gpu_seconds == NOW
    assert "loses ~60 GPU-minutes of work (1 GPU x 60 min since it last started" in plan.decisions[0].reason


def test_the_tie_break_never_overrides_extras_before_whole_jobs() -> None:
    """R5: an elastic job gives its extra replica before any whole job goes, though the shrink restarts all
    its 2 GPUs from a checkpoint an hour old and the whole job checkpointed a second ago."""
    c = Cluster(nodes(4)).project("a", 2).project("b", 2)
    wide = _running("b", "wide", ["node-1", "node-2"], checkpoint=0.0, low=1)
    c.state = replace(
        c.state,
        jobs=(
            wide,
            _running("b", "fresh", ["node-3"], started=20, checkpoint=NOW - 1),
            _running("b", "other", ["node-4"], started=30, checkpoint=NOW - 1),
        ),
    )
    c.now = NOW
    plan = c.submit("a", "one").cycle()
    assert c.decisions(plan) == [("shrink", "b", "wide", [1])]
    assert plan.decisions[0].lost_gpu_seconds == 2 * NOW
    assert plan.decisions[0].reason.endswith(
        "loses ~2.0 GPU-hours of work (2 GPUs x 60 min since its last checkpoint)"
    )


def test_an_elastic_shrink_takes_the_extra_of_the_job_that_checkpointed_last() -> None:
    """Two elastic jobs of b hold an extra each (equal priority): the one that checkpointed a minute ago
    gives its extra, not the newer one that checkpointed half an hour ago. A shrink restarts the whole job
    from its checkpoint, so it loses both GPUs' minute."""
    c = Cluster(nodes(4)).project("a", 2).project("b", 2)
    c.state = replace(
        c.state,
        jobs=(
            _running("b", "early", ["node-1", "node-2"], checkpoint=NOW - 60, low=1),
            _running("b", "late", ["node-3", "node-4"], started=100, checkpoint=NOW - 1800, low=1),
        ),
    )
    c.now = NOW
    plan = c.submit("a", "one").cycle()
    assert c.decisions(plan) == [("shrink", "b", "early", [1])]
    assert plan.decisions[0].lost_gpu_seconds == 120
    assert plan.decisions[0].reason.endswith(
        "loses ~2 GPU-minutes of work (2 GPUs x 60 s since its last checkpoint)"
    )


def test_a_higher_priority_job_preempts_the_job_of_its_project_that_loses_the_least() -> None:
    """R10 inside a project: a's urgent job needs one 2-GPU node; of its two equal low-priority jobs, the older
    one checkpointed a minute ago and the newer one never did: the older one goes."""
    c = Cluster(nodes(2, gpus=2)).project("a", 4)
    c.state = replace(
        c.state,
        jobs=(
            _running("a", "older", ["node-1"], gpus=2, checkpoint=NOW - 60),
            _running("a", "newer", ["node-2"], gpus=2, started=600),
        ),
    )
    c.now = NOW
    plan = c.submit("a", "urgent", gpus=2, priority=5).cycle()
    assert c.decisions(plan) == [("evict", "a", "older", [0])]
    assert plan.decisions[0].cause == Cause.PREEMPT
    assert plan.decisions[0].reason == (
        "preempted for higher-priority job a/urgent of the same project: project a holds 4 GPUs, at its fair "
        "share of 4; loses ~2 GPU-minutes of work (2 GPUs x 60 s since its last checkpoint)"
    )
    assert c.decisions(c.cycle()) == [("start", "a", "urgent", [0])]


def test_a_job_that_checkpointed_just_now_loses_no_work() -> None:
    c = _borrower_with(
        _running("b", "x", ["node-3"], started=10, checkpoint=NOW),
        _running("b", "y", ["node-4"], started=20, checkpoint=NOW - 5),
    )
    plan = c.cycle()
    assert c.decisions(plan) == [("evict", "b", "x", [0])]
    assert plan.decisions[0].lost_gpu_seconds == 0
    assert plan.decisions[0].reason.endswith("; loses no work (it checkpointed or restarted just now)")


@pytest.mark.parametrize(
    ("seconds", "gpu_words", "words"),
    [
        (1, "1 GPU-second", "1 s"),
        (89, "89 GPU-seconds", "89 s"),
        (90, "2 GPU-minutes", "2 min"),
        (45 * 60, "45 GPU-minutes", "45 min"),
        (2.5 * 3600, "2.5 GPU-hours", "2.5 h"),
        (1234 * 3600, "1,234 GPU-hours", "1,234 h"),
    ],
)
def test_lost_work_reads_in_seconds_minutes_or_hours(seconds: float, gpu_words: str, words: str) -> None:
    assert (amount(seconds, "GPU-"), amount(seconds)) == (gpu_words, words)
