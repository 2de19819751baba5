"""R18, decisions 62 and 71, as users meet them: a job whose resize costs something, or that could not grow for
its settle time, does not start small and grow later into the GPUs being released for it; it starts once, at
the size they give it.

Every ``Cluster.cycle()`` checks all invariants (tests/corebuild.py), decision 62's ``_starts_whole`` among them.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace

from corebuild import Cluster, nodes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_core_properties import Spec, _replay, workloads

from scheduler.core import Action, Config, Node, Plan, apply_plan
from scheduler.core.invariants import _idle


def actions(plan: Plan, name: str) -> list[tuple[str, int]]:
    return [(d.action.value, len(d.replicas)) for d in plan.decisions if d.job == name]


def reclaiming(cost: float | None) -> Cluster:
    """4 one-GPU nodes; project b (no quota) borrows 3 of them; project a (quota 4) submits an elastic job of
    1-4 replicas: 1 GPU is idle, 3 must be reclaimed from b and take a cycle to stop."""
    kw = {} if cost is None else {"resize_cost_seconds": cost}
    c = Cluster(nodes(4), slow_release=True).project("a", 4, **kw).project("b", 0)
    for i in range(3):
        c.submit("b", f"borrow{i}")
    c.cycle()
    c.elapse(3600)
    c.submit("a", "train", min=1, max=4)
    return c


def test_a_costly_job_waits_one_cycle_to_start_whole_rather_than_start_small_and_restart_to_grow() -> None:
    c = reclaiming(cost=300.0)
    plan = c.cycle()
    assert actions(plan, "train") == []  # no start on the idle GPU ...
    assert sorted(d.action for d in plan.decisions) == [Action.EVICT] * 3  # ... while b's jobs stop for it
    held = [r for r in plan.reservations if r.job == "train"]
    assert sum(r.gpus for r in held) == 4 and all(r.firm for r in held)
    note = plan.note("a", "train")
    assert note is not None
    assert (
        "starts with 4 GPUs once those being released are free, rather than with 1 replica now" in note.reason
    )
    assert "its resize costs 300 s" in note.reason
    c.release_done()
    assert actions(c.cycle(), "train") == [("start", 4)]
    assert actions(c.elapse(600).cycle(), "train") == []  # nothing left to grow into: no restart at all


def test_without_a_resize_cost_the_job_starts_at_once_and_grows_next_cycle_as_before() -> None:
    c = reclaiming(cost=None)
    assert actions(c.cycle(), "train") == [("start", 1)]
    c.release_done()
    assert actions(c.cycle(), "train") == [("grow", 3)]


def test_a_job_that_gets_all_it_is_owed_from_idle_gpus_starts_at_once() -> None:
    c = Cluster(nodes(4), slow_release=True).project("a", 4, resize_cost_seconds=300.0)
    c.submit("a", "train", min=1, max=4)
    assert actions(c.cycle(), "train") == [("start", 4)]


@settings(
    max_examples=int(os.environ.get("TIDE_PROPERTY_EXAMPLES", "300")) // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(workloads(), st.sampled_from([1.0, 30.0, 300.0]))
def test_costly_jobs_start_whole_and_keep_every_invariant_on_random_clusters(
    w: tuple[Cluster, list[Spec], random.Random], cost: float
) -> None:
    """Property: with every job's resize costing ``cost``, no plan starts a job while it holds GPUs for the
    same job to grow into next cycle (``_starts_whole``), every other invariant holds after every cycle (R2's
    guarantee among them: a deferred start is held GPUs, served within its bound), and no job started by one
    cycle grows in the next on GPUs that the first one was already releasing for it."""
    c, specs, rng = w
    c.config = replace(c.config, resize_cost_seconds=cost)
    _replay(c, specs, rng)
    for state, before, after in zip(c.states, c.plans, c.plans[1:], strict=False):
        # held for it on GPUs still being released (holds on idle GPUs start the job at once)
        releasing = {
            n
            for n, gpus in _idle(apply_plan(state, before, now=0.0, instant=False), before).items()
            if gpus < 0
        }
        held = {(r.project, r.job) for r in before.reservations if r.firm and r.node in releasing}
        started = {(d.project, d.job) for d in before.decisions if d.action == Action.START}
        grown = {(d.project, d.job) for d in after.decisions if d.action == Action.GROW}
        assert not (started & held & grown), (started & held & grown, before, after)


def test_a_costly_job_whose_held_gpus_are_idle_starts_at_once_rather_than_leave_them_idle() -> None:
    """Found by the property test below: a priority job held GPUs that were idle (nothing was being
    released), and waiting to start whole left them and the GPUs beside them idle for a cycle."""
    c = Cluster([Node("n0", 8)]).project("p0", 6, resize_cost_seconds=1.0).project("p1", 0)
    c = c.project("p2", 3, allow_over_quota=False)
    for i in range(4):
        c.submit("p0", f"j{i}")
    c.submit("p2", "j6", gpus=4)  # over its quota of 3: never starts
    c.cycle()
    c.submit("p0", "j4").submit("p0", "j5", min=1, max=2, priority=1)
    plan = c.cycle()  # the invariants (work conservation among them) hold
    assert "j5" in {d.job for d in plan.decisions if d.action == Action.START}


def borrowing_with_priority(settle: float) -> Cluster:
    """6 one-GPU nodes; project a (quota 2) borrows 5 of them with low-priority jobs, one is idle; then a submits
    a high-priority elastic job of 1-3 replicas: it starts on the idle GPU and preempts two of its own jobs
    (R10) for the rest, which take a cycle to stop. Its project holds more than its guarantee either way."""
    c = Cluster(nodes(6), config=Config(settle_seconds=settle), slow_release=True).project("a", 2)
    for i in range(5):
        c.submit("a", f"low{i}")
    c.cycle()
    c.elapse(3600)
    c.submit("a", "urgent", min=1, max=3, priority=1)
    return c


def test_a_job_that_could_not_grow_for_its_settle_time_starts_whole_once_its_own_preemptions_end() -> None:
    """Decision 71: started on the idle GPU at once, it would settle for 10 s before it may grow into the GPUs
    its preemptions free; meanwhile they would restart its project's low-priority jobs, preempted again the
    moment it may grow. It waits for them and starts once with three replicas."""
    c = borrowing_with_priority(settle=10.0)
    plan = c.cycle()
    assert actions(plan, "urgent") == []
    assert sorted(d.action for d in plan.decisions) == [Action.EVICT] * 2
    held = [r for r in plan.reservations if r.job == "urgent"]
    assert sum(r.gpus for r in held) == 3 and all(r.firm for r in held)
    note = plan.note("a", "urgent")
    assert note is not None
    assert (
        "starts with 3 GPUs once those being released are free, rather than with 1 replica now and 10 s "
        "(its settle time) before it may grow into them" in note.reason
    )
    c.release_done()
    assert actions(c.cycle(), "urgent") == [("start", 3)]
    later = c.run(15)  # past its settle time: nothing more is preempted, nothing restarted
    assert [d for p in later for d in p.decisions] == []


def test_without_a_settle_time_or_a_resize_cost_the_job_starts_at_once_and_grows_next_cycle_as_before() -> (
    None
):
    c = borrowing_with_priority(
        settle=0.0
    )  # nothing stops its growth next cycle: starting at once loses nothing
    first = c.cycle()
    assert actions(first, "urgent") == [("start", 1)]
    c.release_done()
    assert actions(c.cycle(), "urgent") == [("grow", 2)]


@settings(
    max_examples=int(os.environ.get("TIDE_PROPERTY_EXAMPLES", "300")) // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(workloads())
def test_jobs_that_would_settle_start_whole_and_keep_every_invariant_on_random_clusters(
    w: tuple[Cluster, list[Spec], random.Random],
) -> None:
    """Property: with a settle time of 10 s (a plan a second) and no resize cost, every invariant holds after
    every cycle, ``_starts_whole`` among them (no job starts while GPUs being released are held for its growth
    that it could not take for its settle time), and R2's guarantee with it (a deferred start is held GPUs)."""
    c, specs, rng = w
    c.config = replace(c.config, settle_seconds=10.0)
    _replay(c, specs, rng)
