"""R15 minimum runtime, as users meet it: a team that borrowed idle GPUs keeps a freshly started job for
its minimum runtime against other borrowers, never against a team below its guarantee.

Every ``Cluster.cycle()`` checks all invariants, ``_min_runtime_kept`` among them (tests/corebuild.py).
"""

from __future__ import annotations

import os
import random
from dataclasses import replace

from corebuild import Cluster, nodes
from hypothesis import HealthCheck, given, settings
from test_core_properties import Spec, _replay, workloads

from scheduler.core import (
    Action,
    Cause,
    ClusterState,
    Config,
    Decision,
    Department,
    Job,
    Placement,
    Plan,
    Project,
    Replica,
    minruntime,
)
from scheduler.core.invariants import check_invariants

TEN_MINUTES = 600.0


def borrowed_cluster(**a_kw: object) -> Cluster:
    """Six 1-GPU nodes. Team a (quota 2) borrowed all six for an elastic job at t=0; team b has no quota but
    the same weight, team c a quota of 2 and nothing to run yet."""
    c = Cluster(nodes(6)).project("a", 2, **a_kw).project("b", 0).project("c", 2)
    c.submit("a", "train", min=1, max=6)
    c.cycle()
    assert c.alloc("a") == 6
    return c


def shrunk(plan: Plan, name: str) -> list[Decision]:
    return [d for d in plan.decisions if d.job == name and d.action in (Action.SHRINK, Action.EVICT)]


def test_without_a_minimum_runtime_a_borrower_loses_gpus_to_another_borrower_at_once() -> None:
    c = borrowed_cluster()
    c.submit("b", "eval", min=2)
    plan = c.cycle()
    assert [d.cause for d in shrunk(plan, "train")] == [Cause.RECLAIM]  # a's share is 4: b gets its 2


def test_a_job_inside_its_minimum_runtime_keeps_its_gpus_and_the_other_borrower_is_told_until_when() -> None:
    c = borrowed_cluster(min_runtime_seconds=TEN_MINUTES)
    c.submit("b", "eval", min=2)
    plan = c.cycle()
    assert shrunk(plan, "train") == []
    note = plan.note("b", "eval")
    assert note is not None
    assert "jobs of project a are protected by their minimum runtime until 00:10 UTC" in note.reason
    c.elapse(TEN_MINUTES - c.now - 1).cycle()  # one second before the end: still protected
    assert c.alloc("a") == 6
    c.elapse(1)
    plan = c.cycle()
    assert [d.cause for d in shrunk(plan, "train")] == [Cause.RECLAIM]
    assert "minimum runtime" not in shrunk(plan, "train")[0].reason


def test_a_team_below_its_guarantee_overrides_the_minimum_runtime_and_the_reason_says_so() -> None:
    c = borrowed_cluster(min_runtime_seconds=TEN_MINUTES)
    c.submit("c", "urgent", min=2)
    plan = c.cycle()
    taken = shrunk(plan, "train")
    assert sum(d.gpus for d in taken) == 2
    assert "minimum runtime overridden: project c is below its guarantee" in taken[0].reason


def test_the_guarantee_takes_an_old_job_before_a_young_one() -> None:
    """R2 overrides R15 only where nothing else serves: a's old job goes, its young one stays."""
    c = Cluster(nodes(4)).project("a", 0, min_runtime_seconds=TEN_MINUTES).project("c", 2)
    c.submit("a", "old", min=2).cycle()
    c.elapse(TEN_MINUTES)
    c.submit("a", "young", min=2).cycle()
    c.submit("c", "urgent", min=2)
    plan = c.cycle()
    assert [d.job for d in plan.decisions if d.action == Action.EVICT] == ["old"]
    assert "minimum runtime" not in plan.decisions[0].reason


def test_a_resize_starts_the_minimum_runtime_again() -> None:
    c = borrowed_cluster(min_runtime_seconds=TEN_MINUTES)
    c.elapse(TEN_MINUTES)
    c.submit("b", "eval", min=2).cycle()  # protection over: a shrinks to 4 for b
    assert c.alloc("a") == 4
    c.finish("b", "eval").cycle()  # a grows back to 6: resized now
    assert c.alloc("a") == 6
    c.submit("b", "again", min=2)
    assert shrunk(c.cycle(), "train") == []


def test_a_project_inherits_its_departments_minimum_runtime_unless_it_sets_its_own() -> None:
    dept = Department("research", 4, min_runtime_seconds=TEN_MINUTES)
    for own, protected in ((None, True), (0.0, False)):
        c = Cluster(nodes(6), departments=(dept,))
        c.project("a", 2, department="research", min_runtime_seconds=own).project("b", 0)
        c.submit("a", "train", min=1, max=6).cycle()
        c.submit("b", "eval", min=1)  # b's fair share: 1 of the 2 GPUs beyond research's quota
        assert (shrunk(c.cycle(), "train") == []) is protected


def test_priority_inside_a_project_ignores_the_minimum_runtime() -> None:
    """R10 is the team's own order: its urgent job preempts its own young low-priority job (docs/rules.md)."""
    c = Cluster(nodes(2)).project("a", 2, min_runtime_seconds=TEN_MINUTES)
    c.submit("a", "sweep", min=2, priority=0).cycle()
    c.submit("a", "urgent", min=2, priority=5)
    plan = c.cycle()
    assert [(d.job, d.cause) for d in shrunk(plan, "sweep")] == [("sweep", Cause.PREEMPT)]


def test_a_preemption_that_would_also_need_a_young_borrowers_gpus_is_not_made() -> None:
    """a's urgent job needs its own low-priority GPU and one of b's; b's jobs are inside their minimum
    runtime and a is at its guarantee, so nothing is taken: a's low-priority job keeps running too."""
    c = Cluster(nodes(4)).project("a", 1).project("b", 0, min_runtime_seconds=TEN_MINUTES)
    c.submit("a", "low", min=1, priority=0).submit("b", "sweep", min=3).cycle()
    c.submit("a", "urgent", min=2, priority=5)
    plan = c.cycle()
    assert plan.decisions == ()
    assert (c.alloc("a"), c.alloc("b")) == (1, 3)


def test_the_waiting_reason_names_only_the_projects_a_reclaim_could_take_from() -> None:
    young = {("a", "x"): 90.0, ("b", "y"): 700.0, ("c", "z"): 30.0}
    assert minruntime.until_text(young, ["a", "b"]) == (
        "; jobs of projects a, b are protected by their minimum runtime until 00:02 UTC"
    )
    assert minruntime.until_text(young, ["d"]) == ""


def test_the_invariant_flags_a_young_job_taken_for_a_project_at_its_guarantee() -> None:
    young = Job("a", "train", 1, 1, replicas=(Replica(0, "node-1", 1),), last_resized_at=0.0)
    state = ClusterState(
        nodes(1),
        (Project("a", 0, min_runtime_seconds=TEN_MINUTES), Project("b", 0)),
        (young, Job("b", "x", 1, 1)),
    )
    evict = Decision(Action.EVICT, "a", "train", (Placement(0, "node-1", 1),), "r", Cause.RECLAIM, ("b", "x"))
    problems = check_invariants(state, Plan((evict,), (), ()), Config(settle_seconds=0), now=60.0)
    assert (
        "a/train was taken for b inside its minimum runtime, and project b was not below its guarantee"
        in problems
    )
    later = check_invariants(state, Plan((evict,), (), ()), Config(settle_seconds=0), now=TEN_MINUTES)
    assert not any("minimum runtime" in p for p in later)


def _with_min_runtime(c: Cluster, rng: random.Random) -> None:
    choices = (None, 0.0, 10.0, 40.0)
    projects = tuple(replace(p, min_runtime_seconds=rng.choice(choices)) for p in c.state.projects)
    depts = tuple(replace(d, min_runtime_seconds=rng.choice((0.0, 10.0, 40.0))) for d in c.state.departments)
    c.state = replace(c.state, projects=projects, departments=depts)


@settings(
    max_examples=int(os.environ.get("TIDE_PROPERTY_EXAMPLES", "300")) // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(workloads())
def test_no_job_inside_its_minimum_runtime_is_taken_unless_a_guarantee_needed_it(
    w: tuple[Cluster, list[Spec], random.Random],
) -> None:
    """Property: random minimum runtimes on projects and departments; after every cycle every invariant
    holds, ``_min_runtime_kept`` included (a young job goes to another project only below its guarantee)."""
    c, specs, rng = w
    _with_min_runtime(c, rng)
    _replay(c, specs, rng)
