"""Where R2 (guarantee), R7 (no ping-pong) and R10 (priority inside a project) meet: one ordered victim search.

Each scenario was seen on a live service (sleeping processes) and replayed here through the pure core;
every ``Cluster.cycle()`` also checks all invariants (tests/corebuild.py). docs/rules.md, decisions 19-24,
says how the rules are ordered when they conflict.
"""

from __future__ import annotations

from dataclasses import replace

from corebuild import Cluster, nodes

from scheduler.core import Cause, Config, Job, Node, Replica


def _running(project: str, name: str, where: list[str], gpus: int = 1, **kw: object) -> Job:
    """A rigid job running one replica of ``gpus`` GPUs on each node of ``where`` (index order)."""
    replicas = tuple(Replica(i, n, gpus) for i, n in enumerate(where))
    return Job(project, name, len(where), len(where), gpus, replicas=replicas, last_resized_at=-10, **kw)  # type: ignore[arg-type]


def test_a_claim_preempts_its_own_lower_priority_job_and_reclaims_the_rest() -> None:
    """c1 (guarantee 6) holds 5 GPUs, 3 of them in its own low-priority job; its high-priority job needs one
    whole 4-GPU node; c2 holds 7 against a fair share of 6. c1 may take one GPU from c2 (R2, R7) but no more
    than its own share allows, so its low-priority job makes room for the other 3 (R10): both on node-1."""
    c = Cluster(nodes(3, gpus=4)).project("c1", 6).project("c2", 6)
    c.state = replace(
        c.state,
        jobs=(
            _running("c1", "low", ["node-1"] * 3),
            _running("c1", "mid", ["node-2"] * 2, priority=10),
            _running("c2", "one", ["node-1"]),
            _running("c2", "two", ["node-2"] * 2),
            _running("c2", "four", ["node-3"], gpus=4),
            Job("c1", "high", 1, 1, 4, priority=10, submitted_at=1),
        ),
    )
    plan = c.cycle()
    assert sorted(c.decisions(plan)) == [("evict", "c1", "low", [2, 1, 0]), ("evict", "c2", "one", [0])]
    causes = {d.job: d.cause for d in plan.decisions}
    assert causes == {"low": Cause.PREEMPT, "one": Cause.RECLAIM}
    assert [(r.project, r.node, r.gpus) for r in plan.reservations if r.gpus] == [("c1", "node-1", 4)]
    note = plan.note("c1", "high")
    assert note is not None
    assert "being reclaimed: 3 GPUs from its own lower-priority jobs, 1 GPU from project c2" in note.reason
    assert c.decisions(c.cycle()) == [("start", "c1", "high", [0])]
    assert (c.alloc("c1"), c.alloc("c2")) == (6, 6)
    c.run(5)
    assert all(p.decisions == () for p in c.plans[-5:])  # stable: no ping-pong


def test_a_guarantee_takes_a_small_victim_that_keeps_its_project_at_its_share() -> None:
    """a (guarantee 4) holds 3 and is owed 1 GPU. b (guarantee 2, fair share 4) holds 5: a 4-GPU job (newest)
    and a 1-GPU job. Taking the 4-GPU job would drop b to 1, below its guarantee, with 3 GPUs idle; taking
    the 1-GPU job leaves b at its share of 4. Tide takes the small one."""
    c = Cluster(nodes(8)).project("a", 4).project("b", 2)
    c.state = replace(
        c.state,
        jobs=(
            _running("a", "held", ["node-1", "node-2", "node-3"]),
            _running("b", "small", ["node-4"]),
            replace(_running("b", "big", ["node-5", "node-6", "node-7", "node-8"]), submitted_at=1),
            Job("a", "one", 1, 1, submitted_at=2),
        ),
    )
    plan = c.cycle()
    assert plan.share("b").fair_share_gpus == 4
    assert c.decisions(plan) == [("evict", "b", "small", [0])]
    assert "project b holds 5 GPUs, above its fair share of 4" in plan.decisions[0].reason
    c.run(3)
    assert (c.alloc("a"), c.alloc("b")) == (4, 4)


def test_a_victim_goes_below_its_fair_share_but_not_below_its_guarantee_when_that_serves() -> None:
    """a is owed 2 GPUs (below its guarantee). b is 1 above its share of 4 in units of 2: whichever goes drops
    b below its share (R2 needs it: indivisible units); of those, the 2-GPU job keeps b at its guarantee of 3,
    while its 3-GPU job would drop it to 2. So the 2-GPU job goes."""
    c = Cluster(nodes(4, gpus=4)).project("a", 11).project("b", 3)
    c.state = replace(
        c.state,
        jobs=(
            _running("a", "held", ["node-1", "node-2"], gpus=4),
            _running("a", "more", ["node-3"], gpus=1),
            _running("b", "pair", ["node-3"], gpus=2),
            replace(_running("b", "three", ["node-4"], gpus=3), submitted_at=1),
            Job("a", "two", 1, 1, 2, submitted_at=2),
            Job("a", "later", 1, 1, 4, submitted_at=3),  # fits no node now: demand only
        ),
    )
    plan = c.cycle()
    assert plan.share("b").fair_share_gpus == 4 and plan.share("a").fair_share_gpus == 12
    assert c.decisions(plan) == [("evict", "b", "pair", [0])]
    c.run(2)
    assert (c.alloc("a"), c.alloc("b")) == (11, 3)


def test_a_preemption_never_undoes_a_reclaims_restraint() -> None:
    """b (guarantee 3) holds 5 GPUs, at its fair share: its low-priority 4-GPU job and a 1-GPU job. Its
    high-priority 1-GPU job was just taken by a reclaim, which spared the low one (that would have dropped b
    to 1). Evicting its own 4-GPU job for the 1-GPU one would drop b to 2, below its guarantee, with 3 GPUs
    idle: the high-priority job waits instead (an R10 preemption keeps its project at its guarantee)."""
    c = Cluster((Node("n1", 4), Node("n2", 5))).project("a", 4).project("b", 3)
    c.state = replace(
        c.state,
        jobs=(
            _running("a", "held", ["n2"], gpus=4),
            _running("b", "low", ["n1"], gpus=4),
            _running("b", "tiny", ["n2"], priority=10),
            Job("b", "high", 1, 1, priority=10, submitted_at=1),
        ),
    )
    plan = c.cycle()
    assert plan.share("b").fair_share_gpus == 5 and plan.share("b").deserved_gpus == 3
    assert c.decisions(plan) == []
    note = plan.note("b", "high")
    assert note is not None and "waiting for 1 idle GPU; project b holds 5 of fair share 5" in note.reason
    assert c.alloc("b") == 5


def test_an_in_project_preemption_reason_says_at_its_fair_share_when_it_is() -> None:
    """R13: the words of a preemption compare what the project holds with its share ("at", not "above")."""
    c = Cluster(nodes(4)).project("a", 4).submit("a", "low", min=1, max=4)
    c.cycle()
    c.submit("a", "high", min=2, priority=5)
    plan = c.cycle()
    assert c.decisions(plan) == [("shrink", "a", "low", [3, 2])]
    assert plan.decisions[0].reason == (
        "preempted for higher-priority job a/high of the same project: "
        "project a holds 4 GPUs, at its fair share of 4; loses ~4 GPU-seconds of work (4 GPUs x 1 s since it "
        "last started or was resized; it has reported no checkpoint)"
    )


def test_elastic_growth_preempts_lower_priority_extras_of_its_own_project() -> None:
    """A high-priority elastic job at 1 of 2 replicas grows by preempting its project's low-priority extras
    (R10, extras before whole jobs), within its project's fair share; the low job keeps its minimum."""
    c = Cluster(nodes(4)).project("a", 4)
    c.state = replace(
        c.state,
        jobs=(
            Job("a", "high", 1, 2, priority=10, replicas=(Replica(0, "node-1", 1),), last_resized_at=-10),
            Job(
                "a", "low", 1, 3, replicas=tuple(Replica(i, f"node-{i + 2}", 1) for i in range(3)),
                last_resized_at=-10,
            ),
        ),
    )  # fmt: skip
    plan = c.cycle()
    assert c.decisions(plan) == [("shrink", "a", "low", [2])]
    assert plan.decisions[0].cause == Cause.PREEMPT
    assert c.decisions(c.cycle()) == [("grow", "a", "high", [1])]
    c.run(3)
    assert c.indices("a", "high") == [0, 1] and c.indices("a", "low") == [0, 1]
    assert all(p.decisions == () for p in c.plans[-3:])  # no flapping


def test_elastic_growth_waits_out_the_settle_time_of_the_job_it_would_shrink() -> None:
    """R7's settle time against flapping: a low-priority job just resized is not shrunk for growth."""
    c = Cluster(nodes(3), config=Config(settle_seconds=5)).project("a", 3)
    c.state = replace(
        c.state,
        jobs=(
            Job("a", "high", 1, 2, priority=10, replicas=(Replica(0, "node-1", 1),), last_resized_at=-10),
            Job(
                "a",
                "low",
                1,
                2,
                replicas=(Replica(0, "node-2", 1), Replica(1, "node-3", 1)),
                last_resized_at=0,
            ),
        ),
    )
    assert c.decisions(c.cycle()) == []
    c.run(6)  # settled at t=5: its extra goes, then high grows
    assert c.alloc("a") == 3 and c.indices("a", "high") == [0, 1]


def test_a_higher_priority_job_preempts_inside_its_project_when_the_limit_blocks() -> None:
    """R10 at a limit: q (deserved 1, limit 1) runs its training job (priority 50) on one of two GPUs; its
    interactive job (priority 100, 1 GPU, within quota: R3) preempts it and runs; the training job waits."""
    c = Cluster(nodes(1, gpus=2)).project("q", 1, limit_gpus=1)
    c.submit("q", "train", priority=50)
    c.cycle()
    c.submit("q", "notebook", interactive=True, priority=100)
    plan = c.cycle()
    assert sorted(c.decisions(plan)) == [("evict", "q", "train", [0]), ("start", "q", "notebook", [0])]
    assert next(d for d in plan.decisions if d.job == "train").cause == Cause.PREEMPT
    note = plan.note("q", "train")
    assert note is not None and "preempted for higher-priority job q/notebook" in note.reason
    plan = c.cycle()
    note = plan.note("q", "train")
    assert c.decisions(plan) == [] and note is not None and "is at its limit" in note.reason
    assert c.indices("q", "notebook") == [0]


def test_an_interactive_job_of_the_same_priority_preempts_and_the_reason_says_interactive() -> None:
    """R10 with R3 (decision 8): q's interactive notebook, same priority as q's training job, takes its GPU;
    the training job is told it gave way to an interactive job, not to a higher-priority one."""
    c = Cluster(nodes(1, gpus=2)).project("q", 1, limit_gpus=1)
    c.submit("q", "train")
    c.cycle()
    c.submit("q", "notebook", interactive=True)
    plan = c.cycle()
    assert sorted(c.decisions(plan)) == [("evict", "q", "train", [0]), ("start", "q", "notebook", [0])]
    evict = next(d for d in plan.decisions if d.job == "train")
    assert evict.reason.startswith("preempted for interactive job q/notebook of the same project: ")
    assert "higher-priority" not in evict.reason


def test_a_job_bigger_than_todays_cluster_waits_taking_nothing_from_anyone() -> None:
    """Nodes come and go (autoscalers, repairs): a gang of 3 x 4 GPUs on two 4-GPU nodes is kept pending with
    a reason that says what it would need; nothing is reclaimed, preempted or held for it meanwhile, so a's
    borrowed GPUs and b's own lower-priority job keep running. When a third node joins, it preempts b's
    low-priority job and reclaims a's borrowed GPUs, and starts."""
    c = Cluster(nodes(2, gpus=4)).project("a", 0).project("b", 12)
    c.submit("a", "borrow", min=1, max=7).submit("b", "low")
    c.cycle()
    c.submit("b", "big", min=3, gpus=4, priority=10)
    plan = c.cycle()
    assert plan.decisions == () and plan.reservations == ()
    note = plan.note("b", "big")
    assert note is not None and note.reason == (
        "does not fit today's cluster: its 3 replicas of 4 GPUs each need one node's room and the schedulable "
        "nodes hold at most 2; it would need room for 1 replica more, and waits for nodes without taking GPUs "
        "from anyone"
    )
    c.state = replace(c.state, nodes=(*c.state.nodes, Node("node-3", 4)))
    c.run(3)
    assert c.indices("b", "big") == [0, 1, 2] and c.alloc("a") == 0


def test_a_replica_bigger_than_any_node_today_says_what_it_would_need() -> None:
    c = Cluster(nodes(2, gpus=4)).project("a", 8).submit("a", "huge", gpus=8)
    note = c.cycle().note("a", "huge")
    assert note is not None and note.reason == (
        "does not fit today's cluster: no schedulable node has 8 GPUs for one replica (the largest has 4); it "
        "would need a node of 8 GPUs, and waits for one without taking GPUs from anyone"
    )


def test_a_job_that_found_its_project_full_starts_once_a_preemption_made_room_in_the_same_cycle() -> None:
    """p0 (guarantee 6, no borrowing) runs a 6-GPU gang. Its interactive job preempts the gang (R3, R10);
    its high-priority training job, which came first in line and found the project at its fair share, gets
    another turn in the same cycle and starts on the room the preemption made, as the lower-priority jobs
    behind it did (found by the allowed-sizes property test)."""
    c = Cluster((Node("n0", 1), Node("n1", 1), Node("n2", 1), Node("n3", 8)))
    c.project("p0", 6, over_quota_weight=0.0, allow_over_quota=False)
    c.state = replace(c.state, jobs=(_running("p0", "gang", ["n3"] * 3, gpus=2),))
    c.submit("p0", "shell", interactive=True)
    for name in ("a", "b", "c"):
        c.submit("p0", name)
    c.submit("p0", "urgent", priority=1)
    plan = c.cycle()
    started = sorted(d.job for d in plan.decisions if d.action == "start")
    assert started == ["a", "b", "c", "shell", "urgent"]
    assert [(d.action, d.job) for d in plan.decisions if d.action == "evict"] == [("evict", "gang")]
    assert plan.note("p0", "urgent") is None
