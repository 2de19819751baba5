"""R17 topology domains, as users meet them: nodes in racks (or NVLink domains); a gang starts inside one
rack where it fits, a job may require it, and growth stays in its rack where it can.

Every ``Cluster.cycle()`` checks all invariants, ``_domains_kept`` among them (tests/corebuild.py).
"""

from __future__ import annotations

import os
import random
from dataclasses import replace

from corebuild import Cluster
from hypothesis import HealthCheck, given, settings
from test_core_properties import Spec, _replay, workloads

from scheduler.core import Config, Job, Node, Replica


def racks() -> tuple[Node, ...]:
    """Two racks of two 2-GPU nodes each."""
    return tuple(Node(f"{r}{i}", 2, domain=f"rack-{r}") for r in "ab" for i in (1, 2))


def busy_racks(config: Config | None = None) -> Cluster:
    """One GPU in use on a1 and on b1: each rack has 3 idle GPUs, the cluster 6."""
    c = Cluster(racks(), config=config).project("a", 6).project("x", 2)
    running = (
        Job("x", "one", 1, 1, replicas=(Replica(0, "a1", 1),)),
        Job("x", "two", 1, 1, replicas=(Replica(0, "b1", 1),)),
    )
    c.state = replace(c.state, jobs=running)
    return c


def domains_of(c: Cluster, name: str) -> set[str | None]:
    nodes = {n.name: n.domain for n in c.state.nodes}
    return {nodes[r.node] for r in c.job("a", name).active}


def test_a_gang_of_three_starts_inside_one_rack_instead_of_on_the_fullest_nodes() -> None:
    c = busy_racks()
    c.submit("a", "gang", min=3)
    c.cycle()
    assert domains_of(c, "gang") == {"rack-a"}
    assert sorted(r.node for r in c.job("a", "gang").active) == ["a1", "a2", "a2"]


def test_with_the_rule_off_the_same_gang_spans_the_racks_as_before() -> None:
    c = busy_racks(Config(settle_seconds=0, topology=False))
    c.submit("a", "gang", min=3)
    c.cycle()
    assert domains_of(c, "gang") == {"rack-a", "rack-b"}  # best fit: the fullest nodes a1 and b1 first


def test_a_gang_too_big_for_any_rack_still_starts_across_racks_when_it_only_prefers_one() -> None:
    c = busy_racks()
    c.submit("a", "wide", min=4)
    c.cycle()
    assert domains_of(c, "wide") == {"rack-a", "rack-b"}


def test_a_gang_that_requires_one_rack_waits_and_says_why_then_starts_when_a_rack_has_room() -> None:
    c = busy_racks()
    c.submit("a", "wide", min=4, topology="required")
    plan = c.cycle()
    assert c.job("a", "wide").active == ()
    note = plan.note("a", "wide")
    assert note is not None and "inside one topology domain (it requires one)" in note.reason
    c.finish("x", "two")  # rack-b is free again
    c.cycle()
    assert domains_of(c, "wide") == {"rack-b"}


def test_growth_fills_the_masters_rack_first_and_spills_over_only_when_preferred() -> None:
    c = busy_racks()
    c.submit("a", "loose", min=1, max=4)
    c.cycle()
    nodes = {n.name: n.domain for n in c.state.nodes}
    placed = sorted((r.index, nodes[r.node]) for r in c.job("a", "loose").active)
    assert placed == [(0, "rack-a"), (1, "rack-a"), (2, "rack-a"), (3, "rack-b")]


def test_a_job_that_requires_one_rack_grows_only_inside_it() -> None:
    c = busy_racks()
    c.submit("a", "tight", min=1, max=4, topology="required")
    plan = c.cycle()
    assert domains_of(c, "tight") == {"rack-a"} and len(c.job("a", "tight").active) == 3
    assert c.decisions(c.cycle()) == []  # rack-b's 3 idle GPUs are not for it
    c.finish("x", "one")  # a GPU frees in its rack
    c.cycle()
    assert domains_of(c, "tight") == {"rack-a"} and len(c.job("a", "tight").active) == 4
    assert plan.decisions


def test_a_job_that_requires_one_rack_starts_where_it_can_grow_to_its_maximum_not_on_the_fullest_rack() -> (
    None
):
    """Two racks of one 2-GPU node; team p0 (no quota, borrowing) runs a 1-GPU job in rack 0 and submits a
    higher-priority job of 1 to 2 replicas that requires one rack. On the fullest rack it could only grow by
    preempting the team's own job (R10), and would wait to start whole (R18) while rack 1 stayed idle; it
    starts whole in rack 1 instead, and nothing is preempted."""
    nodes = (Node("n0", 2, domain="rack-0"), Node("n1", 2, domain="rack-1"))
    c = Cluster(nodes, config=Config(settle_seconds=10.0)).project("p0", 0).project("p1", 0)
    c.submit("p0", "low", min=1, priority=0)
    c.cycle()
    assert [r.node for r in c.job("p0", "low").active] == ["n0"]
    c.submit("p0", "high", min=1, max=2, priority=1, topology="required")
    plan = c.cycle()  # every invariant, "no job waits while GPUs are idle" among them
    assert [(d.action.value, d.job) for d in plan.decisions] == [("start", "high")]
    assert [r.node for r in c.job("p0", "high").active] == ["n1", "n1"]


def test_a_reclaim_for_a_job_that_requires_one_rack_frees_one_rack_and_gives_the_rest_back() -> None:
    """b is owed 4 GPUs in one rack; a borrows all 8 in 1-GPU workers: only rack-a's are taken."""
    c = Cluster(racks()).project("a", 4).project("b", 4)
    c.submit("a", "borrow", min=1, max=8)
    c.cycle()
    c.submit("b", "gang", min=4, topology="required")
    plan = c.cycle()
    [shrink] = plan.decisions
    nodes = {n.name: n.domain for n in c.state.nodes}
    assert shrink.action == "shrink" and len(shrink.replicas) == 4
    assert {nodes[p.node] for p in shrink.replicas} == {"rack-b"}
    c.cycle()
    assert {nodes[r.node] for r in c.job("b", "gang").active} == {"rack-b"}


def _topology(name: str) -> str:
    return "required" if int(name[1:]) % 2 else "preferred"


@settings(
    max_examples=int(os.environ.get("TIDE_PROPERTY_EXAMPLES", "300")) // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(workloads())
def test_jobs_in_racks_keep_every_invariant_on_random_clusters(
    w: tuple[Cluster, list[Spec], random.Random],
) -> None:
    """Property: nodes in two racks, half the jobs requiring one: every invariant holds after every cycle
    (``_domains_kept``: no required job started or grown across racks), plans stay deterministic."""
    c, specs, rng = w
    nodes = c.state.nodes
    c.state = replace(c.state, nodes=tuple(replace(n, domain=f"rack-{i % 2}") for i, n in enumerate(nodes)))
    c.topology_for = _topology
    _replay(c, specs, rng)


def test_a_preemption_that_holds_the_rest_of_the_quota_leaves_small_jobs_waiting_without_idle_gpu_blame() -> (
    None
):
    """Found by the property test above: p0 (quota 8, no borrowing) runs a 2 x 4-GPU job in rack-0; its
    higher-priority 1..2 x 4-GPU job, which requires one rack, preempts it, starts on n2 and holds n0 (being
    released) for its second replica. That hold takes p0's last 4 GPUs of quota (decision 3), so its two
    1-GPU jobs wait although racks have idle GPUs: R4's invariant counts the hold as the core does. (No
    rack has room for both replicas at once: with one, it starts there whole, decision 72.)"""
    nodes = (
        Node("n0", 4, domain="rack-0"), Node("n1", 4, domain="rack-1"),
        Node("n2", 8, domain="rack-0"), Node("n3", 2, domain="rack-1"),
    )  # fmt: skip
    c = Cluster(nodes).project("p0", 8, allow_over_quota=False)
    low = Job(
        "p0", "low", 1, 2, 4, replicas=(Replica(0, "n0", 4), Replica(1, "n2", 4)), last_resized_at=0,
        topology="required",
    )  # fmt: skip
    c.state = replace(c.state, jobs=(low,))
    c.now = 6.0
    c.submit("p0", "one").submit("p0", "high", max=2, gpus=4, priority=1, topology="required")
    c.submit("p0", "two")
    plan = c.cycle()  # asserts every invariant
    assert c.decisions(plan) == [("evict", "p0", "low", [1, 0]), ("start", "p0", "high", [0])]
    assert [(r.job, r.node, r.gpus) for r in plan.reservations] == [("high", "n0", 4)]
    note = plan.note("p0", "one")
    assert note is not None and "may not go over its quota: 8 + 1 > 8 GPUs" in note.reason


def test_a_job_that_requires_its_rack_grows_by_preempting_its_projects_lower_priority_extra_in_that_rack() -> (
    None
):
    """R10 with R17: a high-priority job held to rack a grows by taking its project's low-priority extra in
    rack a. Taking one in rack b first (R5 order: it is newer) frees nothing it can use and leaves the
    project too close to its guarantee for the extra in rack a: only GPUs freed in its rack are tried."""
    nodes = (Node("a1", 2, domain="rack-a"), Node("b1", 2, domain="rack-b"), Node("c1", 2, domain="rack-c"))
    c = Cluster(nodes).project("p", 6)
    c.state = replace(
        c.state,
        jobs=(
            Job("p", "tight", 1, 2, priority=10, topology="required", replicas=(Replica(0, "a1", 1),)),
            Job("p", "older", 1, 2, submitted_at=0.0, replicas=(Replica(0, "b1", 1), Replica(1, "a1", 1))),
            Job("p", "newer", 1, 2, submitted_at=1.0, replicas=(Replica(0, "c1", 1), Replica(1, "b1", 1))),
        ),
    )
    c.now = 10.0
    plan = c.cycle()
    assert c.decisions(plan) == [("shrink", "p", "older", [1])]  # the GPU it frees is held for "tight"
    assert "preempted for higher-priority job p/tight" in plan.decisions[0].reason
    assert ("grow", "p", "tight", [1]) in c.decisions(c.cycle())  # ("older" may take rack c's idle GPU)
    assert sorted(r.node for r in c.job("p", "tight").active) == ["a1", "a1"]


def test_a_project_at_its_share_trades_its_scattered_jobs_for_a_gang_that_needs_a_whole_node() -> None:
    """Found by the property test (R7 with R10): p2 holds its fair share of 2 in two 1-GPU jobs on different
    nodes; its higher-priority 2-GPU job needs both on one node. p2 preempts both of its own jobs, which leaves
    it below its share, and reclaims the one GPU missing on n2 from p1, which is above its share (4 of 3).
    Everyone ends at their fair share; the invariant measures the claimant after what it gave up itself."""
    nodes = (Node("n0", 1, domain="rack-0"), Node("n1", 1, domain="rack-1"), Node("n2", 4, domain="rack-0"))
    c = Cluster(nodes)
    for name, deserved in (("p1", 1), ("p2", 0), ("p3", 0)):
        c.project(name, deserved, over_quota_weight=0.0)
    c.state = replace(
        c.state,
        jobs=(
            Job("p1", "j3", 1, 1, replicas=(Replica(0, "n1", 1),), last_resized_at=0.0),
            Job("p1", "j4", 1, 3, replicas=tuple(Replica(i, "n2", 1) for i in range(3)), last_resized_at=0.0),
            Job("p2", "j5", 1, 1, replicas=(Replica(0, "n0", 1),), last_resized_at=0.0),
            Job("p2", "j6", 1, 1, replicas=(Replica(0, "n2", 1),), last_resized_at=0.0),
        ),
    )
    c.now = 31.0
    c.submit("p3", "j8", min=2).submit("p2", "j7", gpus=2, priority=1, topology="required")
    plan = c.cycle()  # asserts every invariant
    assert c.decisions(plan) == [
        ("shrink", "p1", "j4", [2]), ("evict", "p2", "j5", [0]), ("evict", "p2", "j6", [0])
    ]  # fmt: skip
    assert [(r.job, r.node, r.gpus) for r in plan.reservations] == [("j7", "n2", 2)]
    assert {s.project: s.fair_share_gpus for s in plan.shares} == {"p1": 3, "p2": 2, "p3": 1}
