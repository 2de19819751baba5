"""GPU fractions (R20) as users meet them: notebooks and small jobs share a GPU, inside the same quotas.

Every ``Cluster.cycle()`` checks all invariants, R20's own (no GPU booked above 1, a whole-GPU replica
never shares) and R1-R19 on the whole-GPU view (tests/corebuild.py).
"""

from __future__ import annotations

from fractions import Fraction

from corebuild import Cluster, nodes

from scheduler.core import Cause, Node
from scheduler.core.estimate import Estimate, Source
from scheduler.core.forecast import forecast
from scheduler.core.usage import over_quota

HALF = Fraction(1, 2)


def two_gpus() -> Cluster:
    return Cluster((Node("node-1", 2),))


def where(c: Cluster, project: str, name: str) -> list[tuple[str, int | None, Fraction | None]]:
    return [(r.node, r.gpu, r.share) for r in c.job(project, name).active]


def gpus_held(c: Cluster, project: str) -> int:
    """GPUs the project's running replicas hold, a shared GPU counting once."""
    whole = sum(r.gpus for j in c.state.jobs if j.project == project for r in j.active)
    shared = {(r.node, r.gpu) for j in c.state.jobs if j.project == project for r in j.active if r.share}
    return whole + len(shared)


def test_three_halves_take_two_gpus_then_a_whole_gpu_job_waits_and_runs_where_a_fraction_ends() -> None:
    """The issue's scenario: three 0.5 jobs on one node of 2 GPUs use 2 GPUs, not 3; a whole-GPU job of the
    same project waits (no free whole GPU) and runs on the GPU the lone fraction leaves when it ends."""
    c = two_gpus().project("a", 2)
    for name in ("n1", "n2", "n3"):
        c.submit("a", name, gpu_fraction=HALF)
    plan = c.cycle()
    assert c.decisions(plan) == [
        ("start", "a", "n1", [0]),
        ("start", "a", "n2", [0]),
        ("start", "a", "n3", [0]),
    ]
    assert where(c, "a", "n1") == [("node-1", 0, HALF)]
    assert where(c, "a", "n2") == [("node-1", 0, HALF)]
    assert where(c, "a", "n3") == [("node-1", 1, HALF)]
    assert "sharing it with a/n1; opened the shared GPU on idle GPUs" in plan.for_job("a", "n2")[0].reason

    c.submit("a", "whole", gpus=1)
    plan = c.cycle()
    assert c.decisions(plan) == []
    note = plan.note("a", "whole")
    assert note is not None and note.queue_position == 1

    c.finish("a", "n3")
    plan = c.cycle()
    assert c.decisions(plan) == [("start", "a", "whole", [0])]
    assert c.job("a", "whole").active[0].node == "node-1"
    assert c.alloc("a") == 1  # the whole GPU; the two halves share the other


def test_a_fraction_packs_onto_a_shared_gpu_before_opening_a_free_one() -> None:
    """Submitted one by one: the second half joins the first's GPU, the third opens the other GPU."""
    c = two_gpus().project("a", 2)
    c.submit("a", "n1", gpu_fraction=HALF)
    c.cycle()
    c.submit("a", "n2", gpu_fraction=HALF)
    assert c.decisions(c.cycle()) == [("start", "a", "n2", [0])]
    assert where(c, "a", "n2") == [("node-1", 0, HALF)]
    c.submit("a", "n3", gpu_fraction=Fraction(1, 4))
    c.cycle()
    assert where(c, "a", "n3") == [("node-1", 1, Fraction(1, 4))]
    c.submit("a", "n4", gpu_fraction=Fraction(3, 4))
    c.cycle()
    assert where(c, "a", "n4") == [("node-1", 1, Fraction(3, 4))]  # exactly full: 1/4 + 3/4, no float drift


def test_the_fullest_shared_gpu_that_fits_takes_the_fraction() -> None:
    c = Cluster((Node("node-1", 1), Node("node-2", 1))).project("a", 2)
    c.submit("a", "big", gpu_fraction=Fraction(7, 10)).submit("a", "small", gpu_fraction=Fraction(3, 10))
    c.submit("a", "mid", gpu_fraction=Fraction(6, 10))
    c.cycle()
    assert where(c, "a", "big")[0][:2] == where(c, "a", "small")[0][:2]  # 0.7 + 0.3 fill one GPU
    c.submit("a", "tiny", gpu_fraction=Fraction(1, 10))
    c.cycle()
    assert where(c, "a", "tiny")[0][:2] == where(c, "a", "mid")[0][:2]


def test_a_whole_gpu_job_never_lands_on_a_shared_gpu_with_room() -> None:
    c = Cluster((Node("node-1", 1),)).project("a", 1)
    c.submit("a", "n1", gpu_fraction=Fraction(1, 4))
    c.cycle()
    c.submit("a", "whole")
    plan = c.cycle()
    assert c.decisions(plan) == []
    assert c.job("a", "whole").active == ()


def test_a_project_with_quota_one_reclaims_a_gpu_for_two_half_notebooks_from_a_borrower() -> None:
    """Quota 1, two interactive 0.5 notebooks: they need one GPU, reclaimed from the borrower like any quota."""
    c = two_gpus().project("a", 1).project("b", 1)
    c.submit("b", "train", min=1, max=2)
    c.cycle()
    assert c.alloc("b") == 2
    c.submit("a", "nb1", gpu_fraction=HALF, interactive=True).submit(
        "a", "nb2", gpu_fraction=HALF, interactive=True
    )
    plan = c.cycle()
    assert c.decisions(plan) == [("shrink", "b", "train", [1])]
    assert plan.decisions[0].cause == Cause.RECLAIM
    assert plan.decisions[0].for_job == ("a", "nb1")
    assert "~new" not in plan.decisions[0].reason
    plan = c.cycle()
    assert c.decisions(plan) == [("start", "a", "nb1", [0]), ("start", "a", "nb2", [0])]
    assert where(c, "a", "nb1")[0][:2] == where(c, "a", "nb2")[0][:2]


def test_interactive_fractions_within_quota_are_never_victims() -> None:
    """R3: b's notebooks share a GPU inside b's quota; a, owed its quota, reclaims from b's training only."""
    c = Cluster((Node("node-1", 3),)).project("a", 2).project("b", 1)
    c.submit("b", "nb1", gpu_fraction=HALF, interactive=True).submit(
        "b", "nb2", gpu_fraction=HALF, interactive=True
    )
    c.submit("b", "train", min=1, max=2)
    c.cycle()
    assert c.alloc("b") == 2  # the training job's 2 (the notebooks' GPU is shared, 0 whole)
    c.submit("a", "j", min=2, max=2)
    for _ in range(3):
        plan = c.cycle()
        for d in plan.decisions:
            assert d.job not in ("nb1", "nb2")
    assert len(c.job("b", "nb1").active) == 1 and len(c.job("b", "nb2").active) == 1


def test_reclaim_frees_a_shared_gpu_by_stopping_its_training_fractions() -> None:
    """A borrower's training fractions are victims as one GPU: every job on it stops, the claim gets the GPU."""
    c = Cluster((Node("node-1", 1),)).project("a", 1).project("b", 0)
    c.submit("b", "t1", gpu_fraction=HALF).submit("b", "t2", gpu_fraction=HALF)
    c.cycle()
    c.submit("a", "j")
    plan = c.cycle()
    assert sorted(c.decisions(plan)) == [("evict", "b", "t1", [0]), ("evict", "b", "t2", [0])]
    assert all(d.cause == Cause.RECLAIM and d.for_job == ("a", "j") for d in plan.decisions)
    assert all(d.lost_gpu_seconds == 0.5 for d in plan.decisions)  # half a GPU for the one second since start
    plan = c.cycle()
    assert c.decisions(plan) == [("start", "a", "j", [0])]
    note = plan.note("b", "t1")
    assert note is not None and "t1" not in note.reason.split(":")[0]


def test_limit_counts_a_shared_gpu_as_one() -> None:
    """R11: a project limited to 1 GPU runs its fractions on one shared GPU; a fraction needing a second waits."""
    c = two_gpus().project("a", 0, limit_gpus=1)
    c.submit("a", "n1", gpu_fraction=Fraction(6, 10)).submit("a", "n2", gpu_fraction=Fraction(6, 10))
    plan = c.cycle()
    assert c.decisions(plan) == [("start", "a", "n1", [0])]
    note = plan.note("a", "n2")
    assert note is not None and "limit" in note.reason and "~new" not in note.reason


def test_a_fractional_gang_starts_whole_or_not_at_all() -> None:
    c = Cluster(nodes(2)).project("a", 2)
    c.submit("a", "dist", min=3, max=3, gpu_fraction=Fraction(4, 10))
    plan = c.cycle()
    assert c.decisions(plan) == [("start", "a", "dist", [0, 1, 2])]
    booked: dict[tuple[str, int | None], Fraction] = {}
    for node, gpu, share in where(c, "a", "dist"):
        assert share is not None
        booked[(node, gpu)] = booked.get((node, gpu), Fraction(0)) + share
    assert sorted(booked.values()) == [Fraction(4, 10), Fraction(8, 10)]


def test_a_lost_node_sends_a_fractional_gang_back_to_pending() -> None:
    c = Cluster(nodes(2)).project("a", 2)
    c.submit("a", "dist", min=2, max=2, gpu_fraction=Fraction(6, 10))
    c.cycle()
    assert {r.node for r in c.job("a", "dist").active} == {"node-1", "node-2"}
    c.state = c.state.__class__((c.state.nodes[0],), c.state.projects, c.state.jobs)
    plan = c.cycle()
    assert c.decisions(plan) == [("evict", "a", "dist", [0])]  # the replica left on node-1
    assert plan.decisions[0].cause == Cause.NODE


def test_priority_inside_a_project_preempts_a_shared_gpu() -> None:
    """R10: a's high-priority whole job takes the GPU its own low-priority fractions share."""
    c = Cluster((Node("node-1", 1),)).project("a", 1)
    c.submit("a", "low", gpu_fraction=HALF)
    c.cycle()
    c.submit("a", "high", priority=5)
    plan = c.cycle()
    assert c.decisions(plan) == [("evict", "a", "low", [0])]
    assert plan.decisions[0].cause == Cause.PREEMPT


def test_the_forecast_sees_a_whole_gpu_job_start_when_the_lone_fraction_ends() -> None:
    """The ETA counts fractional jobs too: the whole-GPU job starts when the half alone on its GPU ends."""
    c = two_gpus().project("a", 2)
    for name in ("n1", "n2", "n3"):
        c.submit("a", name, gpu_fraction=HALF)
    c.cycle()
    c.submit("a", "whole")
    left = {
        ("a", "n1"): Estimate(500.0, 500.0, Source.DECLARED),
        ("a", "n2"): Estimate(500.0, 500.0, Source.DECLARED),
        ("a", "n3"): Estimate(60.0, 90.0, Source.DECLARED),
        ("a", "whole"): Estimate(100.0, 100.0, Source.DECLARED),
    }
    eta = forecast(c.state, c.config, now=c.now, left=left)[("a", "whole")]
    assert eta.after == ("a", "n3")
    assert eta.start_p50 is not None and c.now + 60 <= eta.start_p50 <= c.now + 61


def test_usage_above_quota_counts_a_shared_gpu_as_one() -> None:
    """R14: a project's shared GPU is one GPU it holds above its quota of 0, however it is split."""
    c = two_gpus().project("a", 0).project("b", 2)
    c.submit("a", "n1", gpu_fraction=HALF).submit("a", "n2", gpu_fraction=Fraction(1, 4))
    c.cycle()
    assert over_quota(c.state) == {"a": 1, "b": 0}


def test_preempting_a_fractional_gang_frees_all_its_gpus_for_the_project_at_once() -> None:
    """A fractional gang on two GPUs stops whole (R8), so preempting it (R10) frees both GPUs of the project's
    limit in that cycle, not one: the waiting half starts beside the job it was preempted for."""
    c = Cluster((Node("node-1", 5),)).project("a", 0, limit_gpus=3)
    c.submit("a", "dist", min=2, max=2, gpu_fraction=Fraction(7, 10))
    c.submit("a", "nb", gpu_fraction=Fraction(7, 10), priority=5)
    c.cycle()
    assert gpus_held(c, "a") == 3
    c.submit("a", "high", gpus=1, priority=5)
    c.submit("a", "small", gpu_fraction=HALF)
    plan = c.cycle()  # asserts every invariant, work conservation (R4) among them
    assert c.decisions(plan) == [
        ("evict", "a", "dist", [1, 0]),
        ("start", "a", "high", [0]),
        ("start", "a", "small", [0]),
    ]
    assert plan.for_job("a", "dist")[0].cause == Cause.PREEMPT
    assert gpus_held(c, "a") == 3  # nb's, high's and small's; dist's two are being released
