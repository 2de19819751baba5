"""R18 resize cost, as users meet it: a job whose restart is costly grows only when the growth pays for it,
all at once, and is left alone for its settle time except for a guarantee (R2) or its own project's
priority (R10).

Every ``Cluster.cycle()`` checks all invariants (tests/corebuild.py), R4's work conservation with R18's
"wants only a growth that pays" among them.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace

from corebuild import Cluster, nodes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_core_properties import Spec, _replay, workloads

from scheduler.core import Action, Cause, Config, Department, Job, Plan, Project, Replica, resize_cost


def grown(plan: Plan, name: str) -> int:
    return sum(len(d.replicas) for d in plan.decisions if d.job == name and d.action == Action.GROW)


def shrunk(plan: Plan, name: str) -> int:
    return sum(
        len(d.replicas) for d in plan.decisions if d.job == name and d.action in (Action.SHRINK, Action.EVICT)
    )


def big_job(cost: float | None) -> Cluster:
    """40 one-GPU nodes, project a (quota 8, the only one: it may use them all): eight 1-GPU jobs, then an elastic job that takes the other 32."""
    kw = {} if cost is None else {"resize_cost_seconds": cost}
    c = Cluster(nodes(40)).project("a", 8, **kw)
    for i in range(8):
        c.submit("a", f"f{i}")
    c.cycle()
    c.submit("a", "big", min=4, max=40)
    c.cycle()
    assert len(c.job("a", "big").active) == 32
    c.elapse(3600)
    return c


def test_a_costly_job_does_not_grow_by_every_replica_that_trickles_free_but_once_by_all_it_pays() -> None:
    c = big_job(cost=30.0)  # settle 300 s; +k pays when k x 270 > 32 x 30: k >= 4
    for i in range(3):
        c.finish("a", f"f{i}")
        plan = c.cycle()
        assert grown(plan, "big") == 0
    note = plan.note("a", "big")
    assert note is not None
    assert "grows when it pays: +3 replicas would add 810 replica-seconds" in note.reason
    assert "against a restart of 30 s for the 32 it runs (960 replica-seconds)" in note.reason
    assert "it grows once 4 can be added at once" in note.reason
    c.finish("a", "f3")
    assert grown(c.cycle(), "big") == 4


def test_without_a_resize_cost_growth_takes_every_replica_as_before() -> None:
    c = big_job(cost=None)
    c.finish("a", "f0")
    assert grown(c.cycle(), "big") == 1


def test_the_guarantee_is_never_held_back_by_the_cost_of_a_restart() -> None:
    # 11 nodes, quota 11: the job at 10 is 1 GPU short of its project's guarantee once f0 ends; +1 for 10 does
    # not pay at 1000 s a restart (9 < 10), but the guarantee (R2) is served anyway
    c = Cluster(nodes(11)).project("a", 11, resize_cost_seconds=1000.0)
    c.submit("a", "f0")
    c.cycle()
    c.submit("a", "big", min=1, max=11)
    c.cycle()
    c.elapse(20000)
    c.finish("a", "f0")
    assert grown(c.cycle(), "big") == 1


def borrowed(cost: float) -> Cluster:
    """Six 1-GPU nodes: team a (quota 2) borrowed all six at t=0; b has no quota, c a quota of 2."""
    c = Cluster(nodes(6)).project("a", 2, resize_cost_seconds=cost).project("b", 0).project("c", 2)
    c.submit("a", "train", min=1, max=6)
    c.cycle()
    assert c.alloc("a") == 6
    return c


def test_a_costly_job_settles_for_ten_restarts_before_a_borrower_may_shrink_it() -> None:
    c = borrowed(cost=60.0)  # settle time 600 s
    c.submit("b", "eval", min=2)
    plan = c.cycle()
    assert shrunk(plan, "train") == 0
    c.elapse(598 - c.now).cycle()
    assert c.alloc("a") == 6
    c.elapse(1)
    plan = c.cycle()
    assert shrunk(plan, "train") == 2
    assert [d.cause for d in plan.decisions if d.job == "train"] == [Cause.RECLAIM]


def test_a_guarantee_takes_a_settling_job_at_once() -> None:
    c = borrowed(cost=60.0)
    c.submit("c", "urgent", min=2)
    assert shrunk(c.cycle(), "train") == 2


def test_a_higher_priority_job_of_its_own_project_preempts_a_settling_job_at_once() -> None:
    c = Cluster(nodes(4)).project("a", 4, resize_cost_seconds=60.0)
    c.submit("a", "low", min=1, max=4)
    c.cycle()
    c.submit("a", "high", min=2, priority=5)
    assert shrunk(c.cycle(), "low") == 2


def test_the_cost_is_the_jobs_measure_else_its_projects_else_its_departments_else_the_configs() -> None:

    depts = {"d": Department("d", 4, resize_cost_seconds=90.0)}
    projects = {
        "own": Project("own", 1, department="d", resize_cost_seconds=20.0),
        "inherits": Project("inherits", 1, department="d"),
        "alone": Project("alone", 1),
    }
    config = Config(resize_cost_seconds=5.0)
    assert resize_cost.cost(Job("own", "j", 1, 2, resize_cost_seconds=3.0), projects, depts, config) == 3.0
    assert resize_cost.cost(Job("own", "j", 1, 2), projects, depts, config) == 20.0
    assert resize_cost.cost(Job("inherits", "j", 1, 2), projects, depts, config) == 90.0
    assert resize_cost.cost(Job("alone", "j", 1, 2), projects, depts, config) == 5.0
    assert resize_cost.settle(30.0, Config(settle_seconds=10)) == 300.0
    assert resize_cost.settle(0.5, Config(settle_seconds=10)) == 10.0


def test_growth_pays_when_the_new_replicas_progress_before_the_settle_time_beats_the_restart() -> None:
    config = Config(settle_seconds=10)
    assert resize_cost.smallest_paying(32, 30.0, config) == 4  # 4 x 270 > 960 > 3 x 270
    assert not resize_cost.pays(32, 3, 30.0, config)
    assert resize_cost.pays(32, 4, 30.0, config)
    assert resize_cost.pays(32, 1, 0.0, config)  # free resizes: every growth pays
    assert resize_cost.smallest_paying(4, 30.0, config) == 1


@settings(
    max_examples=int(os.environ.get("TIDE_PROPERTY_EXAMPLES", "300")) // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(workloads(), st.sampled_from([0.0, 1.0, 3.0]), st.lists(st.none() | st.sampled_from([0.0, 2.0, 8.0])))
def test_resize_costs_keep_every_invariant_on_random_clusters(
    w: tuple[Cluster, list[Spec], random.Random], default: float, own: list[float | None]
) -> None:
    """Property: with resize costs (the config's, some projects' own, some jobs' measured), every invariant
    holds after every cycle (R2 served within its bound, R4 counting only growth that pays, no settling job
    reclaimed but for a guarantee: ``_settle_kept``) and plans stay deterministic."""
    c, specs, rng = w
    c.config = replace(c.config, resize_cost_seconds=default)
    projects = tuple(
        replace(p, resize_cost_seconds=own[i] if i < len(own) else None)
        for i, p in enumerate(c.state.projects)
    )
    c.state = replace(c.state, projects=projects)
    measured = {i: rng.choice([None, 0.5, 4.0]) for i in range(len(specs))}
    original = c.submit

    def submit(
        project: str, name: str, min: int = 1, max: int | None = None, gpus: int = 1, **kw: object
    ) -> Cluster:
        return original(project, name, min, max, gpus, resize_cost_seconds=measured[int(name[1:])], **kw)

    c.submit = submit  # type: ignore[method-assign]
    _replay(c, specs, rng)


def test_a_guarantee_consolidates_jobs_settling_only_by_their_resize_cost() -> None:
    """a is owed one 8-GPU replica; b's 1-GPU jobs (resized 10 s ago, resize cost 60 s: settling for 600 s)
    leave 8 GPUs idle on no single node. Their longer settle time does not hold up a's guarantee: two move."""
    c = Cluster(nodes(3, gpus=8), config=Config(settle_seconds=5)).project("a", 16)
    c.project("b", 8, resize_cost_seconds=60.0)
    small = tuple(
        Job(
            "b",
            f"b{i}",
            1,
            1,
            replicas=(Replica(0, "node-2" if i < 6 else "node-3", 1),),
            last_resized_at=-10,
        )
        for i in range(8)
    )
    grow = Job("a", "grow", 1, 2, 8, replicas=(Replica(0, "node-1", 8),), last_resized_at=-10)
    c.state = replace(c.state, jobs=(grow, *small))
    plan = c.cycle()
    assert c.decisions(plan) == [("evict", "b", "b6", [0]), ("evict", "b", "b7", [0])]
    assert {d.cause for d in plan.decisions} == {Cause.CONSOLIDATE}


def _elastic(project: str, name: str, where: list[str], *, since: float, cost: float | None = None) -> Job:
    """An elastic job (min 1) running one 1-GPU replica on each node of ``where``, started and checkpointed at
    ``since``."""
    replicas = tuple(Replica(i, n, 1) for i, n in enumerate(where))
    return Job(
        project, name, 1, len(where), submitted_at=since, replicas=replicas, last_resized_at=since,
        checkpointed_at=since, resize_cost_seconds=cost,
    )  # fmt: skip


def _borrower(wide: Job, other: Job) -> Cluster:
    """b (quota 1) borrows every 1-GPU node with ``wide`` and ``other``; a (quota 2) then asks for 1 GPU: one
    unit of b must go (R2)."""
    count = len(wide.replicas) + len(other.replicas)
    c = Cluster(nodes(count), config=Config(settle_seconds=10)).project("a", 2).project("b", 1)
    c.state = replace(c.state, jobs=(wide, other))
    c.now = 7200.0
    return c.submit("a", "one")


def test_a_reclaim_shrinks_the_job_whose_restart_costs_least() -> None:
    """b's wide job (8 replicas) started later and so would lose less work since its checkpoint (R5's
    tie-break alone takes its extra), but shrinking it restarts the 7 replicas it keeps; the pair's extra
    restarts one. With a resize cost of 60 s the pair gives (decision 48)."""
    nodes_ = [f"node-{i}" for i in range(1, 11)]
    wide = _elastic("b", "wide", nodes_[:8], since=6000.0, cost=60.0)  # loses 8 x 1200 s
    pair = _elastic("b", "pair", nodes_[8:], since=1000.0, cost=60.0)  # loses 2 x 6200 s
    plan = _borrower(wide, pair).cycle()
    assert [(d.action.value, d.job) for d in plan.decisions if d.project == "b"] == [("shrink", "pair")]
    # without a resize cost, R5's order as before: the extra that loses the least work goes
    free = _borrower(replace(wide, resize_cost_seconds=None), replace(pair, resize_cost_seconds=None))
    assert [(d.action.value, d.job) for d in free.cycle().decisions if d.project == "b"] == [
        ("shrink", "wide")
    ]


def test_an_eviction_that_loses_less_than_a_shrinks_restart_goes_first() -> None:
    """Shrinking b's wide job by one replica restarts the 7 it keeps (7 x 300 s); its one-GPU job checkpointed a
    minute ago and loses 60 s of work plus one restart (360 GPU-seconds): it goes, the wide job trains on."""
    nodes_ = [f"node-{i}" for i in range(1, 11)]
    wide = _elastic("b", "wide", nodes_[:8], since=0.0, cost=300.0)
    tiny = replace(_elastic("b", "tiny", nodes_[8:9], since=0.0, cost=300.0), checkpointed_at=7140.0)
    plan = _borrower(wide, tiny).cycle()
    assert [(d.action.value, d.job) for d in plan.decisions if d.project == "b"] == [("evict", "tiny")]
    evicted = next(d for d in plan.decisions if d.job == "tiny")
    assert evicted.lost_gpu_seconds == 60.0


def test_a_job_with_allowed_sizes_steps_down_by_its_sizes_while_its_restart_costs_least() -> None:
    """b's job may run at 1, 2 or 4 replicas (R16); a asks for 1 + 2 GPUs. The cheapest unit is the step from
    4 down to 2 (restarting the 2 it keeps), then the step to 1 (the job already restarts: nothing more),
    not an eviction of b's rigid job, which has not checkpointed for an hour."""
    nodes_ = [f"node-{i}" for i in range(1, 6)]
    sized = replace(_elastic("b", "sized", nodes_[:4], since=0.0, cost=60.0), allowed_replicas=(1, 2, 4))
    rigid = replace(_elastic("b", "rigid", nodes_[4:], since=0.0, cost=60.0), checkpointed_at=3600.0)
    c = _borrower(sized, rigid)
    c.submit("a", "two", min=2)
    plan = c.cycle()
    assert [(d.action.value, d.job, len(d.replicas)) for d in plan.decisions if d.project == "b"] == [
        ("shrink", "sized", 3)
    ]
    assert len(c.job("b", "rigid").active) == 1


def test_a_victim_on_nodes_too_small_for_the_claim_is_passed_over_however_cheap() -> None:
    """a asks for one replica of 2 GPUs. b's pair on 1-GPU nodes would cost least to shrink but frees no room
    a 2-GPU replica fits in; b's wide job gives its two replicas on one 2-GPU node."""
    big = nodes(2, gpus=2)
    small = nodes(2, gpus=1, prefix="small")
    c = Cluster((*big, *small), config=Config(settle_seconds=10)).project("a", 2).project("b", 1)
    wide = _elastic("b", "wide", ["node-1", "node-1", "node-2", "node-2"], since=0.0, cost=60.0)
    pair = _elastic("b", "pair", ["small-1", "small-2"], since=0.0, cost=60.0)
    c.state = replace(c.state, jobs=(wide, pair))
    c.now = 7200.0
    c.submit("a", "two", gpus=2)
    plan = c.cycle()
    assert [(d.action.value, d.job, len(d.replicas)) for d in plan.decisions if d.project == "b"] == [
        ("shrink", "wide", 2)
    ]


def _rigid(name: str, node: str, gpus: int, *, unsaved: float, cost: float | None) -> Job:
    """b's rigid job of one ``gpus``-GPU replica on ``node``, started at 0, with ``unsaved`` seconds of work since
    its last checkpoint at 7,200 s."""
    return Job(
        "b", name, 1, 1, gpus_per_replica=gpus, submitted_at=0.0, replicas=(Replica(0, node, gpus),),
        last_resized_at=0.0, checkpointed_at=7200.0 - unsaved, resize_cost_seconds=cost,
    )  # fmt: skip


def _whole_node_claim(cost: float | None) -> Cluster:
    """Three 8-GPU nodes, all borrowed by b (quota 16), each with two 4-GPU jobs: on node-1 ``x`` (1 minute of
    work unsaved) and ``y`` (29 minutes), on node-2 ``z`` and ``w`` (10 minutes each), on node-3 ``u`` and ``v``
    (29 minutes each). a (quota 8) asks for one 8-GPU replica. Victims in R5 order (``x``, then ``z``) free 4 GPUs
    on each of two nodes and bring b to its fair share of 16, so no whole node: the reclaim frees one node at a
    time (``Reclaimer.by_node``), and each node is freed by evicting its two jobs, 8 GPUs."""
    c = Cluster(nodes(3, gpus=8), config=Config(settle_seconds=10)).project("a", 8).project("b", 16)
    jobs = (
        _rigid("x", "node-1", 4, unsaved=60.0, cost=cost),
        _rigid("y", "node-1", 4, unsaved=1740.0, cost=cost),
        _rigid("z", "node-2", 4, unsaved=600.0, cost=cost),
        _rigid("w", "node-2", 4, unsaved=600.0, cost=cost),
        _rigid("u", "node-3", 4, unsaved=1740.0, cost=cost),
        _rigid("v", "node-3", 4, unsaved=1740.0, cost=cost),
    )
    c.state = replace(c.state, jobs=jobs)
    c.now = 7200.0
    return c.submit("a", "big", gpus=8)


def test_a_whole_node_is_freed_where_its_jobs_lose_the_least_work() -> None:
    """Every node is freed by evicting two jobs, 8 GPUs; node-1's throw away 4 x 60 + 4 x 1,740 GPU-seconds of
    work since their checkpoints, node-2's 2 x 4 x 600, node-3's 2 x 4 x 1,740. With a resize cost the node
    whose jobs lose least among those equal nodes is freed (decision 64): node-2. Before, the first was."""
    plan = _whole_node_claim(cost=30.0).cycle()
    evicted = [d for d in plan.decisions if d.project == "b"]
    assert sorted((d.action, d.job) for d in evicted) == [(Action.EVICT, "w"), (Action.EVICT, "z")]
    assert sum(d.lost_gpu_seconds or 0.0 for d in evicted) == 2 * 4 * 600.0
    assert [(r.job, r.node) for r in plan.reservations] == [("big", "node-2")]


def test_without_a_resize_cost_the_whole_node_is_chosen_as_before() -> None:
    """No resize cost: the first of the equal nodes is freed (fewest GPUs taken, then fewest whole jobs), as
    before decision 64."""
    plan = _whole_node_claim(cost=None).cycle()
    evicted = sorted((d.action, d.job) for d in plan.decisions if d.project == "b")
    assert evicted == [(Action.EVICT, "x"), (Action.EVICT, "y")]
