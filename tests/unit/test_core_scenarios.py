"""The scheduling rules as the users meet them: cluster + projects + jobs -> the decisions Tide makes.

Every ``Cluster.cycle()`` also checks all invariants (tests/corebuild.py).
"""

from __future__ import annotations

from dataclasses import replace

from corebuild import Cluster, nodes

from scheduler.core import Action, Cause, Config, Department, Job, Node, Project, Replica, plan_cycle
from scheduler.core.fairshare import fair_shares


def seed() -> Cluster:
    return Cluster(nodes(4)).project("a", 2).project("b", 2)


def test_seed_scenario_grow_shrink_workers_before_master_grow_back() -> None:
    """The seed scenario: a grows to 4, b's work makes a shrink to 2 by losing replicas 3 and 2, b runs, a regrows."""
    c = seed().submit("a", "train", min=2, max=4)
    plan = c.cycle()
    assert c.decisions(plan) == [("start", "a", "train", [0, 1, 2, 3])]
    assert plan.decisions[0].reason == "started 4 replicas on idle GPUs; project a holds 4 of fair share 4"
    master_node = next(r.node for r in c.job("a", "train").active if r.index == 0)

    c.submit("b", "j1").submit("b", "j2")
    plan = c.cycle()
    assert c.decisions(plan) == [("shrink", "a", "train", [3, 2])]
    assert plan.decisions[0].cause == Cause.RECLAIM
    assert "above its fair share of 2" in plan.decisions[0].reason
    note = plan.note("b", "j1")
    assert (
        note is not None
        and note.queue_position == 1
        and "being reclaimed: 1 GPU from project a" in note.reason
    )

    plan = c.cycle()
    assert c.decisions(plan) == [("start", "b", "j1", [0]), ("start", "b", "j2", [0])]
    assert c.indices("a", "train") == [0, 1]
    assert next(r.node for r in c.job("a", "train").active if r.index == 0) == master_node
    assert c.decisions(c.cycle()) == []  # stable: nobody above fair share while others wait

    c.finish("b", "j1").finish("b", "j2")
    assert c.decisions(c.cycle()) == [("grow", "a", "train", [2, 3])]
    assert c.alloc("a") == 4


def test_reclaim_waits_for_stopping_replicas_without_taking_more() -> None:
    """While a's replicas take their grace period to stop, b's claim waits on them; no further victims."""
    c = seed().submit("a", "train", min=2, max=4)
    c.slow_release = True
    c.cycle()
    c.submit("b", "j1", min=2, max=2)
    assert c.decisions(c.cycle()) == [("shrink", "a", "train", [3, 2])]
    for _ in range(3):
        plan = c.cycle()
        assert c.decisions(plan) == []
        assert {(r.project, r.job) for r in plan.reservations} == {("b", "j1")}
        note = plan.note("a", "train")
        assert note is not None and "stopping replicas" in note.reason
    c.release_done()
    assert c.decisions(c.cycle()) == [("start", "b", "j1", [0, 1])]


def test_weights_one_to_three_split_idle_gpus_25_75() -> None:
    c = Cluster(nodes(16)).project("a", 2, over_quota_weight=1).project("b", 2, over_quota_weight=3)
    c.submit("a", "ja", min=1, max=16).submit("b", "jb", min=1, max=16)
    plan = c.cycle()
    assert (plan.share("a").fair_share_gpus, plan.share("b").fair_share_gpus) == (
        5,
        11,
    )  # 2+3 and 2+9 of 12 idle
    assert (c.alloc("a"), c.alloc("b")) == (5, 11)


def test_limit_is_never_exceeded_even_with_idle_gpus() -> None:
    c = Cluster(nodes(8)).project("a", 1, limit_gpus=3).submit("a", "big", min=1, max=8)
    c.run(3)
    assert c.alloc("a") == 3
    note = c.plans[-1].note("a", "big")
    assert (
        note is not None
        and note.reason == "running 3 of max 8 replicas; project a is at its limit: 3 + 1 GPUs > limit 3"
    )


def test_lowered_limit_shrinks_the_project_back_under_it() -> None:
    c = Cluster(nodes(4)).project("a", 1).submit("a", "big", min=1, max=4)
    c.cycle()
    c.state = c.state.__class__(c.state.nodes, (Project("a", 1, limit_gpus=2),), c.state.jobs)
    plan = c.cycle()
    assert c.decisions(plan) == [("shrink", "a", "big", [3, 2])]
    assert plan.decisions[0].cause == Cause.LIMIT


def test_interactive_job_is_refused_over_quota_and_never_a_victim() -> None:
    c = seed().submit("a", "notebook", min=2, interactive=True).submit("a", "train", min=1, max=2)
    c.cycle()
    assert c.alloc("a") == 4
    c.submit("a", "notebook2", interactive=True)
    plan = c.cycle()
    note = plan.note("a", "notebook2")
    assert note is not None and "interactive jobs run only inside the deserved quota" in note.reason
    c.submit("b", "jb", min=2)
    plan = c.cycle()
    assert c.decisions(plan) == [("evict", "a", "train", [1, 0])]  # the training job goes, never the notebook
    assert c.indices("a", "notebook") == [0, 1]


def test_priority_orders_jobs_inside_a_project_and_preempts_extras_first() -> None:
    c = Cluster(nodes(4)).project("a", 4).submit("a", "low", min=1, max=4, priority=0)
    c.cycle()
    c.submit("a", "high", min=2, priority=5)
    plan = c.cycle()
    assert c.decisions(plan) == [("shrink", "a", "low", [3, 2])]
    assert plan.decisions[0].cause == Cause.PREEMPT
    assert c.decisions(c.cycle()) == [("start", "a", "high", [0, 1])]


def test_priority_does_not_cross_projects() -> None:
    """b's high priority does not let it take a's GPUs beyond b's fair share."""
    c = seed().submit("a", "ja", min=2)
    c.cycle()
    c.submit("b", "jb", min=2).submit("b", "urgent", min=1, priority=100)
    c.run(2)
    assert (c.alloc("a"), c.alloc("b")) == (2, 1)  # urgent runs; jb would lift b above its fair share
    note = c.plans[-1].note("b", "jb")
    assert (
        note is not None and note.queue_position == 1 and "can only borrow GPUs that are idle" in note.reason
    )


def test_department_whose_projects_oversubscribe_its_quota() -> None:
    dept = Department("research", deserved_gpus=4)
    c = Cluster(nodes(8), departments=(dept,))
    c.project("x", 4, department="research").project("y", 4, department="research").project("z", 4)
    for p in "xyz":
        c.submit(p, "j", min=1, max=8)
    plan = c.cycle()
    assert [(s.project, s.fair_share_gpus) for s in plan.shares] == [("x", 2), ("y", 2), ("z", 4)]
    assert plan.department_shares[0].fair_share_gpus == 4
    c.run(2)
    assert (c.alloc("x"), c.alloc("y"), c.alloc("z")) == (2, 2, 4)


def test_big_replica_waits_for_a_whole_node_instead_of_starving() -> None:
    """Small jobs keep arriving; the 8-GPU replica holds the fullest node as it drains, then starts."""
    c = Cluster(nodes(2, gpus=8)).project("a", 16)
    for i in range(12):
        c.submit("a", f"small-{i}")
    c.cycle()
    c.now += 1
    c.submit("a", "big", gpus=8)
    started_at, drained = None, 0
    for t in range(30):
        running = [j for j in c.state.jobs if j.name != "big" and j.active]
        c.finish("a", min(running, key=lambda j: j.submitted_at).name).submit("a", f"late-{t}")
        plan = c.cycle()
        if any(d.job == "big" and d.action == Action.START for d in plan.decisions):
            started_at = t
            break
        note = plan.note("a", "big")
        drained += note is not None and "nodes held for it as they drain" in note.reason
    # it holds a node once the jobs ahead of it leave room in a's fair share, and starts when that node is free
    assert started_at is not None and started_at <= 12 and drained > 0


def test_no_ping_pong_between_two_projects_with_equal_claims() -> None:
    c = Cluster(nodes(5)).project("a", 2).project("b", 2)
    c.submit("a", "ja", min=1, max=5).submit("b", "jb", min=1, max=5)
    c.run(100)
    changes = [i for i, plan in enumerate(c.plans) if plan.decisions]
    assert changes == [0]
    assert sorted((c.alloc("a"), c.alloc("b"))) == [2, 3]


def test_minimal_victims_take_exactly_what_the_claimant_needs() -> None:
    """R6: b needs 2 GPUs; a loses 2 of its 6 borrowed ones, not more (cf. KAI PR #1565: 48 asked, 376 evicted)."""
    c = Cluster(nodes(8)).project("a", 2).project("b", 6)
    c.submit("a", "elastic", min=1, max=8)
    c.cycle()
    c.submit("b", "jb", min=2)
    assert c.decisions(c.cycle()) == [("shrink", "a", "elastic", [7, 6])]


def test_victims_come_from_the_project_furthest_above_its_fair_share() -> None:
    c = Cluster(nodes(8)).project("a", 1).project("b", 1).project("c", 4)
    c.submit("a", "ja", min=3).submit("b", "jb", min=4)  # a holds 3 (fair 1+), b holds 4 (fair 1+)
    c.cycle()
    c.submit("c", "jc", min=1)
    c.cycle()
    c.submit("c", "jc2", min=1)
    plan = c.cycle()
    evicted = {d.job for d in plan.decisions if d.action == Action.EVICT}
    assert evicted == {"jb"}  # b is further above its fair share than a


def test_whole_job_eviction_when_no_extras_and_it_goes_back_to_pending() -> None:
    c = seed().submit("a", "rigid", min=4)
    c.cycle()
    c.submit("b", "jb", min=2)
    plan = c.cycle()
    assert c.decisions(plan) == [("evict", "a", "rigid", [3, 2, 1, 0])]  # workers first, master last
    note = plan.note("a", "rigid")
    assert note is not None and "back to pending" in note.reason
    c.cycle()
    c.finish("b", "jb")
    assert c.decisions(c.cycle()) == [("start", "a", "rigid", [0, 1, 2, 3])]


def test_settle_time_delays_growth_but_never_the_guarantee() -> None:
    c = Cluster(nodes(4), config=Config(settle_seconds=5)).project("a", 2).project("b", 2)
    c.submit("a", "ja", min=1, max=4)
    c.cycle()
    c.submit("b", "jb", min=2)
    assert c.decisions(c.cycle()) == [("shrink", "a", "ja", [3, 2])]  # R2 claim ignores a's settle time
    c.cycle()
    c.finish("b", "jb")
    plan = c.cycle()
    assert plan.decisions == ()
    note = plan.note("a", "ja")
    assert note is not None and "settling" in note.reason
    c.run(3)
    assert c.alloc("a") == 4


def test_borrower_within_fair_share_does_not_take_settling_replicas() -> None:
    """Above its guarantee but within fair share, b waits out a's settle time before reclaiming."""
    c = Cluster(nodes(6), config=Config(settle_seconds=3)).project("a", 1).project("b", 1)
    c.submit("a", "ja", min=1, max=6)
    c.submit("b", "jb", min=1)
    c.cycle()
    assert (c.alloc("a"), c.alloc("b")) == (5, 1)
    c.submit("b", "jb2", min=2)  # fair share of b is 3: entitled, but a just resized
    plan = c.cycle()
    note = plan.note("b", "jb2")
    assert plan.decisions == () and note is not None and "no GPUs can be reclaimed" in note.reason
    c.run(3)  # a settles until t=3; the reclaim happens then, b starts the cycle after
    assert c.alloc("b") == 3 and c.alloc("a") == 3


def test_lost_node_restores_the_gang_or_sends_it_back_to_pending() -> None:
    c = Cluster(nodes(4)).project("a", 4).submit("a", "rigid", min=3).submit("a", "elastic", min=1, max=1)
    c.cycle()
    lost = next(r.node for r in c.job("a", "rigid").active if r.index == 1)
    c.state = c.state.__class__(
        tuple(n for n in c.state.nodes if n.name != lost), c.state.projects, c.state.jobs
    )
    plan = plan_cycle(c.state, c.config, now=c.now)
    kinds = {(d.job, d.action) for d in plan.decisions}
    assert ("rigid", Action.EVICT) in kinds or ("rigid", Action.GROW) in kinds


def test_cordoned_node_takes_no_new_replicas() -> None:
    c = Cluster((Node("n1", 2, schedulable=False), Node("n2", 2))).project("a", 4)
    c.submit("a", "j", min=1, max=4)
    c.cycle()
    assert {r.node for r in c.job("a", "j").active} == {"n2"}


def test_weight_zero_borrows_only_what_nobody_else_wants_and_loses_it_first() -> None:
    c = Cluster(nodes(6)).project("a", 1, over_quota_weight=0).project("b", 1).project("c", 1)
    c.submit("a", "ja", min=1, max=6)
    c.cycle()
    assert c.alloc("a") == 6  # nobody else wants them
    c.submit("b", "jb", min=1, max=6)
    c.run(3)
    assert (c.alloc("a"), c.alloc("b")) == (1, 5)


def test_quotas_that_oversubscribe_the_cluster_are_scaled_down() -> None:
    c = Cluster(nodes(4)).project("a", 4).project("b", 4)
    c.submit("a", "ja", min=1, max=4).submit("b", "jb", min=1, max=4)
    plan = c.cycle()
    shares = fair_shares(c.state, c.config)
    assert shares.project == {"a": 2, "b": 2}
    assert (plan.share("a").fair_share_gpus, c.alloc("a"), c.alloc("b")) == (2, 2, 2)


def test_project_without_over_quota_stays_inside_its_quota() -> None:
    c = (
        Cluster(nodes(4))
        .project("a", 2, allow_over_quota=False)
        .submit("a", "j", min=1, max=4)
        .submit("a", "k", min=3)
    )
    plan = c.cycle()
    assert c.alloc("a") == 2
    note = plan.note("a", "k")
    assert note is not None and "may not go over its quota" in note.reason


def test_static_partitioning_baseline_caps_everyone_at_quota() -> None:
    c = Cluster(nodes(4), config=Config(settle_seconds=0, borrowing=False)).project("a", 2).project("b", 2)
    c.submit("a", "ja", min=1, max=4)
    c.run(2)
    assert c.alloc("a") == 2


def test_rigid_baseline_runs_elastic_jobs_at_max_and_evicts_whole() -> None:
    c = Cluster(nodes(4), config=Config(settle_seconds=0, elastic=False)).project("a", 2).project("b", 2)
    c.submit("a", "ja", min=2, max=4)
    assert c.decisions(c.cycle()) == [("start", "a", "ja", [0, 1, 2, 3])]
    c.submit("b", "jb", min=1)
    assert c.decisions(c.cycle()) == [("evict", "a", "ja", [3, 2, 1, 0])]


def test_replica_larger_than_any_node_is_explained() -> None:
    c = Cluster(nodes(2, gpus=4)).project("a", 8).submit("a", "huge", gpus=8)
    note = c.cycle().note("a", "huge")
    assert note is not None and "no schedulable node has 8 GPUs" in note.reason


def test_placement_packs_the_fullest_node_first() -> None:
    c = Cluster((Node("n1", 4), Node("n2", 4))).project("a", 8)
    c.submit("a", "first", min=1, gpus=3)
    c.cycle()
    c.submit("a", "second", min=1, gpus=1)
    c.cycle()
    assert {r.node for r in c.job("a", "second").active} == {r.node for r in c.job("a", "first").active}


def test_owed_claims_wait_out_settling_victims_holding_no_full_node() -> None:
    """b is at its guarantee but below its fair share: it may reclaim, but not replicas still settling;
    its 2-GPU job waits for them (nothing is free or being released, so no node is held for it: a hold that
    nothing will release holds nothing), and b's elastic job waits to grow."""
    c = Cluster(nodes(3, gpus=2), config=Config(settle_seconds=3)).project("a", 1).project("b", 1)
    c.submit("a", "el", min=1, max=6)
    c.cycle()
    c.submit("b", "eb", min=1, max=3)
    assert c.decisions(c.cycle()) == [("shrink", "a", "el", [5])]  # R2 for b's first GPU ignores settle
    assert c.decisions(c.cycle()) == [("start", "b", "eb", [0])]
    c.submit("b", "pair", min=1, gpus=2)
    plan = c.cycle()
    assert plan.decisions == ()
    note = plan.note("b", "pair")
    assert note is not None and "or settling after a resize" in note.reason and plan.reservations == ()
    eb = plan.note("b", "eb")
    assert eb is not None and eb.queue_position is None and "settling after a resize" in eb.reason


def test_growth_needs_a_whole_node_when_idle_gpus_are_scattered() -> None:
    """b may grow to its fair share of 4, but the two idle GPUs sit on different nodes and a is within its
    share: nothing to take, so b's job waits (explained) rather than evicting anyone."""
    c = Cluster(nodes(3, gpus=2)).project("a", 2, over_quota_weight=0).project("b", 2)
    c.state = replace(
        c.state,
        jobs=(
            Job("a", "x1", 1, 1, replicas=(Replica(0, "node-1", 1),)),
            Job("a", "x2", 1, 1, replicas=(Replica(0, "node-2", 1),)),
            Job("b", "el", 1, 2, 2, replicas=(Replica(0, "node-3", 2),)),
        ),
    )
    plan = c.cycle()
    assert plan.decisions == () and plan.share("b").fair_share_gpus == 4
    note = plan.note("b", "el")
    assert note is not None and "grows when GPUs are idle" in note.reason


def test_demand_that_can_never_fit_leaves_its_share_to_others() -> None:
    """b's 8-GPU replica fits no 4-GPU node: b's demand counts nothing (R1), so a's fair share is all 8 GPUs
    and a holds them as its own, not lent."""
    c = Cluster(nodes(2, gpus=4)).project("a", 4).project("b", 4)
    c.submit("b", "huge", gpus=8).submit("a", "el", min=1, max=8)
    plan = c.cycle()
    assert c.alloc("a") == 8 and plan.share("a").fair_share_gpus == 8 and plan.share("b").demand_gpus == 0
    assert plan.decisions[0].reason == "started 8 replicas on idle GPUs; project a holds 8 of fair share 8"


def test_pending_job_over_the_limit_says_so() -> None:
    c = Cluster(nodes(4)).project("a", 1, limit_gpus=2).submit("a", "one", min=2).submit("a", "two", min=1)
    note = c.cycle().note("a", "two")
    assert note is not None and "project a is at its limit: 2 + 1 GPUs > limit 2" in note.reason


def test_reclaim_inside_a_department_and_across_departments() -> None:
    """x and y share department d; x reclaims from its sibling y first (same department), and z (outside)
    reclaims from d only while d is above its own share."""
    d = Department("d", deserved_gpus=4)
    c = Cluster(nodes(8), departments=(d,))
    c.project("x", 2, department="d").project("y", 2, department="d").project("z", 4)
    c.submit("y", "hog", min=1, max=8)
    c.cycle()
    assert c.alloc("y") == 8
    c.submit("x", "jx", min=2).submit("z", "jz", min=4)
    plan = c.cycle()
    assert c.decisions(plan) == [("shrink", "y", "hog", [7, 6, 5, 4, 3, 2])]
    assert {r.project for r in plan.reservations} == {"x", "z"}
    c.run(2)
    assert (c.alloc("x"), c.alloc("y"), c.alloc("z")) == (2, 2, 4)


def test_interactive_jobs_stay_inside_their_departments_quota() -> None:
    d = Department("d", deserved_gpus=1)
    c = Cluster(nodes(4), departments=(d,)).project("x", 2, department="d").project("y", 2, department="d")
    c.submit("x", "nb", interactive=True).submit("y", "nb", interactive=True)
    plan = c.cycle()
    assert c.alloc("x") + c.alloc("y") == 1
    note = plan.note("y", "nb")
    assert note is not None and "department d has no room left" in note.reason


def test_a_preemption_inside_a_capped_department_makes_room_for_its_other_project_in_the_same_cycle() -> None:
    """Found by the property test: department d is at its limit of 4, all of it y's low-priority job. x's
    job waits for room in d; then y's high-priority job preempts y's own (R10) and takes 1 GPU. The 3 GPUs of
    room that frees in d serve x in the same cycle (R4), not a cycle later."""
    d = Department("d", deserved_gpus=0, limit_gpus=4)
    c = Cluster((Node("n0", 1), Node("n1", 1), Node("n2", 4)), departments=(d,))
    c.project("x", 0, department="d").project("y", 0, department="d")
    c.state = replace(
        c.state, jobs=(Job("y", "low", 1, 1, gpus_per_replica=4, replicas=(Replica(0, "n2", 4),)),)
    )
    c.now = 6.0
    c.submit("x", "one").submit("y", "high", priority=1)
    plan = c.cycle()  # asserts every invariant
    assert sorted(c.decisions(plan)) == [
        ("evict", "y", "low", [0]),
        ("start", "x", "one", [0]),
        ("start", "y", "high", [0]),
    ]
    assert plan.note("x", "one") is None


def test_a_higher_priority_jobs_growth_comes_before_lower_priority_starts_so_it_shrinks_instead_of_evicting() -> (
    None
):
    """Found by the property test (R10): p (limit 8) runs a 4 x 2-GPU job (priority 1); a priority-2 job (1..2
    x 1 GPU) arrives beside two priority-0 jobs. It starts by taking one replica of the gang (its limit); its
    growth then takes the GPU that replica frees beyond its start. Its growth used to wait behind the
    priority-0 starts, which took that GPU, and then evicted the rest of the gang (6 GPUs for 1), only for
    the priority-0 jobs to start on them and be preempted by the gang the next cycle."""
    c = Cluster((Node("n0", 1), Node("n1", 4), Node("n2", 8))).project(
        "p", 0, over_quota_weight=0.0, limit_gpus=8
    )
    gang = Job("p", "gang", 3, 4, 2, priority=1, last_resized_at=6.0,
               replicas=(Replica(0, "n1", 2), Replica(1, "n1", 2), Replica(2, "n2", 2), Replica(3, "n2", 2)))  # fmt: skip
    c.state = replace(c.state, jobs=(gang,))
    c.submit("p", "one").submit("p", "two")
    c.now = 7.0
    c.submit("p", "high", max=2, priority=2)
    plan = c.cycle()  # asserts every invariant
    assert sorted(c.decisions(plan)) == [("shrink", "p", "gang", [3]), ("start", "p", "high", [0, 1])]
    note = plan.note("p", "one")
    assert note is not None and "project p is at its limit: 8 + 1 GPUs > limit 8" in note.reason
    c.run(2)
    assert sorted((j.name, len(j.active)) for j in c.state.jobs) == [
        ("gang", 3),
        ("high", 2),
        ("one", 0),
        ("two", 0),
    ]


def test_no_node_is_made_whole_for_growth_its_department_has_no_room_for() -> None:
    """Found by the property test: p is below its guarantee but its department is at its limit of 3. Its
    high-priority job's growth used to hold a GPU on n1 for a node made whole (R2's consolidation), which the
    limit would never let it use; now nothing is held and the note names the department's limit."""
    d = Department("d", deserved_gpus=0, limit_gpus=3)
    c = Cluster((Node("n0", 1), Node("n1", 4)), departments=(d,))
    c.project("p", 4, over_quota_weight=0.0, allow_over_quota=False, department="d")
    c.state = replace(
        c.state,
        jobs=(
            Job("p", "pair", 2, 2, replicas=(Replica(0, "n1", 1), Replica(1, "n1", 1)), last_resized_at=37.0),
            Job("p", "one", 1, 1),
            Job("p", "high", 1, 2, priority=1, replicas=(Replica(0, "n0", 1),), last_resized_at=37.0),
        ),
    )
    c.now = 38.0
    plan = c.cycle()  # asserts every invariant, the department's limit with holds among them
    assert plan.decisions == () and plan.reservations == ()
    note = plan.note("p", "high")
    assert note is not None and note.reason == (
        "running 1 of max 2 replicas; department d has no room left for 1 GPU (its limit, or its interactive quota)"
    )


def test_a_node_is_never_made_whole_by_reclaiming_from_the_claimants_own_project() -> None:
    """Found by the property test: guarantees oversubscribe the cluster, so p3 is below its guarantee (8) but
    above its fair share (6 of 5). Its priority-1 job's growth may not make n0 whole by "reclaiming" p3's own
    4-GPU job: a project's own jobs give way by priority only (R10), never as reclaim victims (R7)."""
    c = Cluster((Node("n0", 8),))
    for name, deserved in (("p0", 2), ("p2", 2), ("p3", 8)):
        c.project(name, deserved, over_quota_weight=0.0, allow_over_quota=False)
    c.state = replace(
        c.state,
        jobs=(
            Job("p0", "j0", 1, 1, replicas=(Replica(0, "n0", 1),), last_resized_at=0.0),
            Job("p3", "j7", 1, 1, 4, replicas=(Replica(0, "n0", 4),), last_resized_at=0.0),
            Job("p3", "j8", 1, 2, 2, priority=1, replicas=(Replica(0, "n0", 2),), last_resized_at=0.0),
        ),
    )
    c.submit("p2", "j6", min=2)
    c.now = 6.0
    c.submit("p0", "j1").submit("p0", "j2")
    plan = c.cycle()  # asserts every invariant
    assert c.decisions(plan) == [("start", "p0", "j1", [0])]
    note = plan.note("p3", "j8")
    assert note is not None and note.reason.startswith(
        "running 1 of max 2 replicas; grows when GPUs are idle"
    )


def test_static_partitioning_caps_departments_at_their_quota_too() -> None:
    d = Department("d", deserved_gpus=2)
    config = Config(settle_seconds=0, borrowing=False)
    c = Cluster(nodes(8), departments=(d,), config=config).project("x", 4, department="d")
    c.submit("x", "el", min=1, max=8)
    plan = c.cycle()
    assert plan.department_shares[0].fair_share_gpus == 2 and c.alloc("x") == 2


def test_running_jobs_grow_into_idle_gpus_beyond_fair_share() -> None:
    c = Cluster(nodes(2, gpus=4)).project("a", 4).project("b", 4)
    c.submit("a", "el", min=1, max=6).submit("a", "el2", min=1, max=2).submit("b", "x", min=1, gpus=4)
    c.cycle()
    # b's share stays 4, but its gang of two whole nodes cannot start while a holds one, nor reclaim beyond it
    c.finish("b", "x").submit("b", "huge", min=2, gpus=4)
    plan = c.cycle()
    grows = [d for d in plan.decisions if d.action == Action.GROW]
    assert grows and all("lent until another project claims them" in d.reason for d in grows)
    assert c.alloc("a") == 8


def _one_gpu_jobs(project: str, count: int, *, on_node_2: int) -> tuple[Job, ...]:
    """``count`` running one-replica jobs ``<project><i>``: the first ``on_node_2`` on node-2, the rest on node-3."""
    return tuple(
        Job(project, f"{project}{i}", 1, 1, replicas=(Replica(0, "node-2" if i < on_node_2 else "node-3", 1),),
            last_resized_at=-10)
        for i in range(count)
    )  # fmt: skip


def test_scattered_idle_gpus_are_consolidated_for_a_guarantee() -> None:
    """a is owed 8 more GPUs (one 8-GPU replica); b is at its fair share with 1-GPU jobs spread 6 + 2, so 8
    GPUs are idle but on no single node. b's two jobs on the emptier node move; b keeps its 8 GPUs."""
    c = Cluster(nodes(3, gpus=8), config=Config(settle_seconds=5)).project("a", 16).project("b", 8)
    small = _one_gpu_jobs("b", 8, on_node_2=6)
    grow = Job("a", "grow", 1, 2, 8, replicas=(Replica(0, "node-1", 8),), last_resized_at=-10)
    c.state = replace(c.state, jobs=(grow, *small))
    plan = c.cycle()
    assert c.decisions(plan) == [("evict", "b", "b6", [0]), ("evict", "b", "b7", [0])]
    assert {d.cause for d in plan.decisions} == {Cause.CONSOLIDATE}
    note = plan.note("a", "grow")
    assert note is not None and "moving to other nodes" in note.reason
    plan = c.cycle()
    assert sorted(c.decisions(plan)) == [
        ("grow", "a", "grow", [1]),
        ("start", "b", "b6", [0]),
        ("start", "b", "b7", [0]),
    ]
    assert (c.alloc("a"), c.alloc("b")) == (16, 8)


def test_consolidation_never_moves_settling_or_interactive_replicas() -> None:
    c = Cluster(nodes(2, gpus=4)).project("a", 4).project("b", 4)
    c.config = Config(settle_seconds=100)
    c.state = replace(
        c.state,
        jobs=(
            Job("b", "nb", 1, 1, interactive=True, replicas=(Replica(0, "node-1", 1),)),
            Job("b", "fresh", 1, 1, replicas=(Replica(0, "node-2", 1),), last_resized_at=0),
            Job("a", "big", 1, 1, 4),
        ),
    )
    plan = c.cycle()
    assert plan.decisions == ()
    note = plan.note("a", "big")
    assert note is not None and "drain" in note.reason


def _b_spread(per_node: dict[str, int]) -> tuple[Job, ...]:
    return tuple(
        Job("b", f"{node}-{i}", 1, 1, replicas=(Replica(0, node, 1),), last_resized_at=-10)
        for node, n in per_node.items()
        for i in range(n)
    )


def test_consolidation_moves_only_what_the_claim_needs() -> None:
    c = Cluster(nodes(3, gpus=8)).project("a", 12).project("b", 12)
    base = Job("a", "base", 1, 1, 8, replicas=(Replica(0, "node-1", 8),), last_resized_at=-10)
    c.state = replace(c.state, jobs=(base, *_b_spread({"node-2": 5, "node-3": 7}), Job("a", "more", 1, 1, 4)))
    plan = c.cycle()
    assert c.decisions(plan) == [("evict", "b", "node-2-0", [0])]  # one move frees 4 GPUs on node-2


def test_consolidation_tries_the_next_node_when_replicas_cannot_move() -> None:
    """a is owed a pair of 3-GPU replicas: one fits node-3 at once. Making room on node-2 would mean moving
    b's 2-GPU replicas, which fit nowhere else; so c's 1-GPU replicas leave node-3 for node-2 instead."""
    c = Cluster((Node("node-1", 7), Node("node-2", 8), Node("node-3", 9)))
    c.project("a", 13).project("b", 6).project("c", 5)
    base = Job("a", "base", 1, 1, 7, replicas=(Replica(0, "node-1", 7),), last_resized_at=-10)
    b_jobs = tuple(
        Job("b", f"b{i}", 1, 1, 2, replicas=(Replica(0, "node-2", 2),), last_resized_at=-10) for i in range(3)
    )
    c_jobs = tuple(replace(j, project="c") for j in _b_spread({"node-3": 5}))
    c.state = replace(c.state, jobs=(base, *b_jobs, *c_jobs, Job("a", "pair", 2, 2, 3, submitted_at=1)))
    plan = c.cycle()
    assert [(d.project, d.action.value, d.cause) for d in plan.decisions] == [
        ("c", "evict", Cause.CONSOLIDATE)
    ] * 2
    c.cycle()
    assert c.alloc("a") == 13 and c.alloc("b") == 6 and c.alloc("c") == 5


def _a_owed_a_node_b_pair_on(master: str, worker: str) -> Cluster:
    """a is owed one more 8-GPU replica; b holds 8: a two-replica job "pair" and six 1-GPU replicas on node-3."""
    c = Cluster(nodes(3, gpus=8), config=Config(settle_seconds=5)).project("a", 16).project("b", 8)
    grow = Job("a", "grow", 1, 2, 8, replicas=(Replica(0, "node-1", 8),), last_resized_at=-10)
    pair = Job(
        "b", "pair", 1, 2, replicas=(Replica(0, master, 1), Replica(1, worker, 1)), last_resized_at=-10
    )
    six = Job(
        "b", "six", 6, 6, replicas=tuple(Replica(i, "node-3", 1) for i in range(6)), last_resized_at=-10
    )
    c.state = replace(c.state, jobs=(grow, pair, six))
    return c


def test_a_small_job_with_a_master_moves_whole_to_free_a_node_for_a_guarantee() -> None:
    """R2, found on the Philly trace (a team 8 GPUs below its guarantee for 3.7 hours). a is owed one more
    8-GPU replica; nobody is above their fair share; 8 GPUs are idle, 6 on node-2 and 2 on node-3. What sits on
    node-2 is b's two-replica job "pair": moving only its worker frees 7 GPUs, and its master never moves
    without its workers (R5). So the whole job moves to node-3's 2 idle GPUs; b keeps its 8 GPUs."""
    c = _a_owed_a_node_b_pair_on("node-2", "node-2")
    plan = c.cycle()
    assert c.decisions(plan) == [("evict", "b", "pair", [1, 0])]
    assert [d.cause for d in plan.decisions] == [Cause.CONSOLIDATE]
    assert sorted((r.project, r.node, r.gpus) for r in plan.reservations) == [
        ("a", "node-2", 1),
        ("a", "node-2", 1),
        ("a", "node-2", 6),
        ("b", "node-3", 1),
        ("b", "node-3", 1),
    ]
    c.run(3)
    assert (c.alloc("a"), c.alloc("b")) == (16, 8)


def test_reclaim_targets_one_node_when_the_surplus_is_scattered() -> None:
    """a is owed one 4-GPU replica. b is 4 GPUs above its share, but taking its workers in plain R5 order
    (7, 6, 5, 4) would leave 1-2 free GPUs on each node; Tide instead takes the workers that share node-3."""
    c = Cluster((*nodes(3, gpus=4), Node("tiny", 2))).project("a", 10).project("b", 4)
    where = {
        0: "node-1",
        7: "node-1",
        5: "node-2",
        6: "node-2",
        1: "node-3",
        2: "node-3",
        3: "node-3",
        4: "node-3",
    }
    el = Job(
        "b",
        "el",
        1,
        8,
        replicas=tuple(Replica(i, n, 1) for i, n in sorted(where.items())),
        last_resized_at=-10,
    )
    small = tuple(
        Job(
            "a",
            f"s{i}",
            1,
            1,
            replicas=(Replica(0, "node-1" if i < 2 else "node-2", 1),),
            last_resized_at=-10,
        )
        for i in range(4)
    )
    tiny = Job("a", "t", 1, 1, 2, replicas=(Replica(0, "tiny", 2),), last_resized_at=-10)
    c.state = replace(c.state, jobs=(el, *small, tiny, Job("a", "big", 1, 1, 4, submitted_at=1)))
    plan = c.cycle()
    assert c.decisions(plan) == [("shrink", "b", "el", [4, 3, 2, 1])]
    assert {(r.project, r.node) for r in plan.reservations if r.gpus} == {("a", "node-3")}
    c.cycle()
    assert c.alloc("a") == 10 and c.alloc("b") == 4


def test_reclaim_may_take_from_a_project_whose_own_start_this_cycle_puts_it_above_its_share() -> None:
    """R7, found by the property test. p2 (fair share 3) holds 1 GPU (j8's master; its worker is stopping) and
    the cycle firmly holds 3 GPUs for its higher-priority gang j9 (min 3): with them p2 would hold 4, above its
    share, while p1 (fair share 7) holds 6 and is owed 1 for j6. Tide takes j8 from p2 for p1: p2 ends at its
    share (j9's 3) and p1 at its (7). The reason says what p2 holds *and* what it was promised this cycle, and
    the invariant measures a victim the same way (R7: "above its fair share" counts firm promises)."""
    c = Cluster((Node("n0", 2), Node("n1", 8)), slow_release=True)
    c.project("p1", 0, over_quota_weight=1.0).project("p2", 0, over_quota_weight=0.0)
    j7 = Job(
        "p1", "j7", 1, 3, 2, replicas=(Replica(0, "n0", 2), Replica(1, "n1", 2), Replica(2, "n1", 2)),
        last_resized_at=0.0,
    )  # fmt: skip
    j8 = Job("p2", "j8", 1, 2, 1, replicas=(Replica(0, "n1", 1), Replica(1, "n1", 1, releasing=True)),
             last_resized_at=1.0)  # fmt: skip
    j9 = Job("p2", "j9", 3, 3, 1, priority=1, submitted_at=1.0)
    j6 = Job("p1", "j6", 1, 1, 1, submitted_at=2.0)
    c.state = replace(c.state, jobs=(j7, j8, j9, j6))
    c.now = 2.0
    plan = c.cycle()  # asserts every invariant, R7's included
    assert c.decisions(plan) == [("evict", "p2", "j8", [0])]
    (evict,) = plan.decisions
    assert evict.cause == Cause.RECLAIM and evict.for_job == ("p1", "j6")
    assert "p2 holds 1 GPU and is promised 3 this cycle, above its fair share of 3" in evict.reason
    c.release_done()
    c.run(2)
    assert (c.alloc("p1"), c.alloc("p2")) == (7, 3)


def test_a_rigid_gang_owed_two_whole_nodes_gets_them_one_node_at_a_time() -> None:
    """R2, found on the Philly trace (a team waited 3 hours for a 2 x 8-GPU gang). a is owed a gang of two
    4-GPU replicas. b is 3 GPUs above its share and c 2: in plain R5 order b gives its three newest 1-GPU
    workers (no node empties) and c the job that loses the least work, its 4-GPU job that checkpointed a
    second ago (node-4 empties): one whole node, not two. So Tide frees one
    node at a time, each where the fewest GPUs go (then the fewest whole jobs): node-5 (c's 1-GPU job) and
    node-2 (b's 4-GPU worker, rather than a whole job of c's). R2 lets b drop below its share for that worker,
    which cannot be split (R7)."""
    c = Cluster(nodes(5, gpus=4), config=Config(settle_seconds=5)).project("a", 8).project("b", 9)
    c.project("c", 3)
    big = Job(
        "b", "big", 1, 2, 4, replicas=(Replica(0, "node-1", 4), Replica(1, "node-2", 4)), last_resized_at=-10
    )
    small = Job(
        "b", "small", 1, 4, submitted_at=1, last_resized_at=-10,
        replicas=tuple(Replica(i, "node-3", 1) for i in range(4)),
    )  # fmt: skip
    tiny = Job("c", "tiny", 1, 1, replicas=(Replica(0, "node-5", 1),), last_resized_at=-10)
    old = Job(
        "c", "old", 1, 1, 4, submitted_at=2, replicas=(Replica(0, "node-4", 4),), last_resized_at=-10,
        checkpointed_at=-1,
    )  # fmt: skip
    c.state = replace(c.state, jobs=(big, small, tiny, old, Job("a", "gang", 2, 2, 4, submitted_at=3)))
    plan = c.cycle()
    assert sorted(c.decisions(plan)) == [("evict", "c", "tiny", [0]), ("shrink", "b", "big", [1])]
    assert {(r.node, r.gpus) for r in plan.reservations if r.project == "a"} == {("node-5", 4), ("node-2", 4)}
    note = plan.note("a", "gang")
    assert note is not None and "being reclaimed: 4 GPUs from project b, 1 GPU from project c" in note.reason
    c.cycle()
    assert (c.alloc("a"), c.alloc("b"), c.alloc("c")) == (8, 8, 4)


def test_a_guarantee_reclaims_scattered_workers_and_moves_others_to_make_a_whole_node() -> None:
    """R2, found on the Philly trace (a team 8 GPUs below its guarantee for 1.7 hours). a is owed one more
    8-GPU replica. b borrows 6 GPUs beyond its share of 2 in 1-GPU workers on node-2 and node-3, which it shares
    with c (at its share); 2 GPUs are idle. No node can be emptied by reclaim alone (c is not a victim), nor by
    moving alone (no room elsewhere). So Tide does both: it takes b's workers on node-3, then b's workers on
    node-2 to make room there for c's two replicas on node-3, which move; c keeps its 6 GPUs."""
    c = Cluster(nodes(3, gpus=8), config=Config(settle_seconds=5)).project("a", 16).project("b", 2)
    c.project("c", 6)
    grow = Job("a", "grow", 1, 2, 8, replicas=(Replica(0, "node-1", 8),), last_resized_at=-10)
    el = Job(
        "b", "el", 1, 8, last_resized_at=-10,
        replicas=tuple(Replica(i, "node-2" if i < 4 else "node-3", 1) for i in range(8)),
    )  # fmt: skip
    cs = _one_gpu_jobs("c", 6, on_node_2=4)
    c.state = replace(c.state, jobs=(grow, el, *cs))
    plan = c.cycle()
    assert c.decisions(plan) == [
        ("shrink", "b", "el", [7, 6, 5, 4, 3, 2]),
        ("evict", "c", "c4", [0]),
        ("evict", "c", "c5", [0]),
    ]
    assert [d.cause for d in plan.decisions] == [Cause.RECLAIM, Cause.CONSOLIDATE, Cause.CONSOLIDATE]
    note = plan.note("a", "grow")
    assert note is not None and "2 replicas of other jobs are moving" in note.reason
    assert "being reclaimed to make room for them: 6 GPUs from project b" in note.reason
    plan = c.cycle()
    assert sorted(c.decisions(plan)) == [
        ("grow", "a", "grow", [1]),
        ("start", "c", "c4", [0]),
        ("start", "c", "c5", [0]),
    ]
    assert (c.alloc("a"), c.alloc("b"), c.alloc("c")) == (16, 2, 6)


def test_a_draining_gang_holds_no_more_idle_gpus_than_its_project_is_owed() -> None:
    """R2 against the anti-starvation drain, found on the Philly trace (22 idle GPUs held for one team's
    23 x 1-GPU gang while another team, 8 GPUs below its guarantee, waited). x's oldest job is a gang of
    4 that does not fit the 3 idle GPUs; x already holds 2 of its share of 4 in younger jobs, so it is owed 2:
    its drain holds 2 GPUs, and the third goes to y, which is below its guarantee. When x's younger jobs end,
    the gang starts."""
    c = Cluster(nodes(2, gpus=4)).project("x", 4).project("y", 4)
    c.submit("x", "gang", min=4, max=4)
    for name in ("y1", "y2", "y3"):
        c.submit("y", name)
    c.submit("x", "young1").submit("x", "young2").submit("y", "more")
    c.state = replace(
        c.state,
        jobs=tuple(
            replace(j, replicas=(Replica(0, "node-1" if j.project == "x" else "node-2", 1),))
            if j.name.startswith(("young", "y1", "y2", "y3"))
            else replace(j, submitted_at=-1.0 if j.name == "gang" else j.submitted_at)
            for j in c.state.jobs
        ),
    )
    plan = c.cycle()
    assert c.decisions(plan) == [("start", "y", "more", [0])]
    assert sum(r.gpus for r in plan.reservations if r.project == "x") == 2
    note = plan.note("x", "gang")
    assert note is not None and "nodes held for it as they drain" in note.reason
    c.finish("x", "young1").finish("x", "young2")
    assert c.decisions(c.cycle()) == [("start", "x", "gang", [0, 1, 2, 3])]


def test_a_small_job_spread_over_two_nodes_moves_whole_to_free_a_node_for_a_guarantee() -> None:
    """R2, found on the Philly trace. a is owed one more 8-GPU replica; nobody is above their share; 8 GPUs are
    idle, 7 on node-2 and 1 on node-3. node-2's last GPU is the master of b's "pair", whose worker runs on
    node-3: the master never moves without its worker (R5), so the whole job moves, both replicas to node-3
    (its worker's own GPU and the idle one); b keeps its 8 GPUs."""
    c = _a_owed_a_node_b_pair_on("node-2", "node-3")
    plan = c.cycle()
    assert c.decisions(plan) == [("evict", "b", "pair", [1, 0])]
    held = sorted((r.project, r.node, r.gpus) for r in plan.reservations)
    assert held == [("a", "node-2", 1), ("a", "node-2", 7), ("b", "node-3", 1), ("b", "node-3", 1)]
    c.run(3)
    assert (c.alloc("a"), c.alloc("b")) == (16, 8)


def test_job_that_can_never_fit_claims_no_fair_share_and_evicts_nobody() -> None:
    """A pending gang of 1,024 replicas on 4 one-GPU nodes can never start: its demand counts for nothing, so
    a's department gets no more than a's placeable demand, and a's rigid 2-GPU job takes only a's quota of 2,
    never b's share. An elastic job that fits counts only the replicas the cluster could ever hold."""
    dept = Department("research", deserved_gpus=4)
    c = Cluster(nodes(4), departments=(dept,))
    c.project("a", 2, department="research").project("b", 2)
    c.submit("b", "eval", min=2, max=2)
    c.cycle()
    c.submit("a", "huge2", min=1024, max=1024)
    plan = c.cycle()
    assert (plan.share("a").fair_share_gpus, plan.share("b").fair_share_gpus) == (0, 2)
    assert plan.share("a").demand_gpus == 0
    note = plan.note("a", "huge2")
    assert note is not None and "does not fit today's cluster" in note.reason
    c.submit("a", "rigid", min=2, max=2)
    plan = c.cycle()
    assert (plan.share("a").fair_share_gpus, plan.share("b").fair_share_gpus) == (2, 2)
    assert c.decisions(plan) == [("start", "a", "rigid", [0, 1])]
    assert (c.alloc("a"), c.alloc("b")) == (2, 2)
    c.submit("a", "wide", min=1, max=64)  # placeable, but never beyond the 4 replicas 4 nodes hold
    assert c.cycle().share("a").demand_gpus == 2 + 4


def test_a_quota_cut_to_fit_the_cluster_says_so() -> None:
    """Quotas of 4 (department research) and 2 (b) on 4 GPUs: fair shares split the 4 GPUs 3:1 in proportion,
    and b's waiting job says its quota of 2 was cut, not just that b holds 0 of a fair share of 1."""
    dept = Department("research", deserved_gpus=4)
    c = Cluster(nodes(4), departments=(dept,))
    c.project("a", 2, department="research").project("b", 2)
    c.submit("b", "eval", min=2, max=2).submit("a", "train", min=1, max=4)
    plan = c.run(2)[-1]
    assert (plan.share("a").fair_share_gpus, plan.share("b").fair_share_gpus) == (3, 1)
    note = plan.note("b", "eval")
    assert note is not None and (
        "project b holds 0 of fair share 1 (its quota of 2 is cut in proportion: the quotas claimed add up "
        "to 6 GPUs, more than the 4 schedulable)" in note.reason
    ), note.reason


def test_a_department_quota_split_among_more_quota_says_so() -> None:
    dept = Department("research", deserved_gpus=2)
    c = Cluster(nodes(4), departments=(dept,)).project("x", 2, department="research")
    c.project("y", 2, department="research").project("z", 2)
    c.submit("x", "j", min=1, max=4).submit("y", "j", min=2).submit("z", "j", min=2)
    plan = c.run(2)[-1]
    assert [s.fair_share_gpus for s in plan.shares] == [1, 1, 2]
    note = plan.note("y", "j")
    assert note is not None and (
        "(its quota of 2 is cut in proportion: department research's projects claim 4 GPUs of quota, more "
        "than its share of 2)" in note.reason
    ), note.reason


def test_a_full_node_is_held_for_one_job_at_most_and_only_when_something_can_drain() -> None:
    """Three full 8-GPU nodes of d's young 1-GPU jobs (d: weight 0, a minimum runtime of 1 h, so nobody may
    reclaim them yet). a, b and c are each owed 8 GPUs and their 8-GPU jobs are blocked. Nothing is free or
    being released on any node, so none of them holds a node (there is nothing to hold), and certainly not
    node-1 for all three at once; each says what it waits for: the end of d's minimum runtime."""
    jobs = tuple(
        Job("d", f"d{i}", 1, 1, replicas=(Replica(0, f"node-{i % 3 + 1}", 1),), last_resized_at=0.0)
        for i in range(24)
    )
    c = Cluster(nodes(3, gpus=8))
    for p in "abc":
        c.project(p, 0)
    c.project("d", 0, over_quota_weight=0.0, min_runtime_seconds=3600.0)
    c.state = replace(c.state, jobs=jobs)
    c.now = 10.0
    for p in "abc":
        c.submit(p, "big", gpus=8)
    plan = c.cycle()
    assert plan.decisions == () and plan.reservations == ()
    for p in "abc":
        note = plan.note(p, "big")
        assert note is not None and "held for it" not in note.reason, note.reason
        assert f"project {p} is within its fair share (0 of fair share 8)" in note.reason, note.reason
        assert "minimum runtime" in note.reason, note.reason
