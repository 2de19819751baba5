"""The invariant checker catches broken plans (so the property tests can fail), and the ledger undoes exactly.

Each bad plan below is hand-made to break one rule; the checker must name that rule.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from corebuild import Cluster, nodes

from scheduler.core import (
    Action,
    Cause,
    ClusterState,
    Config,
    Decision,
    Department,
    Job,
    Node,
    Placement,
    Plan,
    Project,
    Replica,
    plan_cycle,
)
from scheduler.core.consolidate import consolidate
from scheduler.core.fairshare import fair_shares
from scheduler.core.invariants import check_invariants
from scheduler.core.ledger import Ledger
from scheduler.core.preemption import Reclaimer, reclaim
from scheduler.core.victims import Floor, VictimOrder

CFG = Config(settle_seconds=0)


def _plan(*decisions: Decision) -> Plan:
    return Plan(decisions=decisions, notes=(), shares=())


def _running(project: str, name: str, *placements: tuple[int, str], **kw: object) -> Job:
    replicas = tuple(Replica(i, node, 1) for i, node in placements)
    return Job(project, name, kw.pop("min", 1), kw.pop("max", len(replicas)), replicas=replicas, **kw)  # type: ignore[arg-type]


def _state(*jobs: Job, projects: tuple[Project, ...] = (Project("a", 2), Project("b", 2))) -> ClusterState:
    return ClusterState(nodes(2), projects, jobs)


def _start(project: str, job: str, *placements: tuple[int, str]) -> Decision:
    return Decision(Action.START, project, job, tuple(Placement(i, n, 1) for i, n in placements), "")


def test_node_over_allocated() -> None:
    state = _state(_running("a", "x", (0, "node-1")), Job("b", "y", 1, 1))
    bad = _plan(_start("b", "y", (0, "node-1")))
    assert any("node node-1 holds 2 GPUs of 1" in v for v in check_invariants(state, bad, CFG, now=0))


def test_limit_exceeded() -> None:
    state = _state(Job("a", "x", 2, 2), projects=(Project("a", 0, limit_gpus=1),))
    bad = _plan(_start("a", "x", (0, "node-1"), (1, "node-2")))
    assert any("above its limit 1" in v for v in check_invariants(state, bad, CFG, now=0))


def test_interactive_victim_and_interactive_over_quota() -> None:
    state = _state(
        _running("a", "nb", (0, "node-1"), interactive=True), Job("b", "nb2", 1, 1, interactive=True)
    )
    evict = Decision(Action.EVICT, "a", "nb", (Placement(0, "node-1", 1),), "", Cause.RECLAIM, ("b", "nb2"))
    over = replace(state, projects=(Project("a", 2), Project("b", 0)))
    violations = check_invariants(over, _plan(evict, _start("b", "nb2", (0, "node-1"))), CFG, now=0)
    assert any("interactive job a/nb was a victim" in v for v in violations)
    assert any("project b runs 1 interactive GPUs over quota 0" in v for v in violations)


def test_master_shrunk_and_partial_eviction_and_gang_below_min() -> None:
    state = _state(_running("a", "x", (0, "node-1"), (1, "node-2"), min=2))
    shrink_master = Decision(Action.SHRINK, "a", "x", (Placement(0, "node-1", 1),), "")
    partial = Decision(Action.EVICT, "a", "x", (Placement(1, "node-2", 1),), "")
    violations = check_invariants(state, _plan(shrink_master), CFG, now=0)
    assert any("master shrunk" in v for v in violations)
    assert any("below min 2" in v for v in violations)
    assert any("evicted without all" in v for v in check_invariants(state, _plan(partial), CFG, now=0))


def test_job_off_its_allowed_sizes_is_caught() -> None:
    """R16: a job allowed 1 or 4 replicas must not be grown to 2."""
    state = ClusterState(
        nodes(4), (Project("a", 4),), (_running("a", "x", (0, "node-1"), max=4, allowed_replicas=(1, 4)),)
    )
    grow = Decision(Action.GROW, "a", "x", (Placement(1, "node-2", 1),), "")
    violations = check_invariants(state, _plan(grow), CFG, now=0)
    assert any("a/x runs 2 replicas, not among its allowed sizes 1, 4" in v for v in violations)


def test_job_that_requires_one_domain_started_across_two_is_caught() -> None:
    """R17: a gang that requires one rack must not start across racks."""
    racks = (Node("n1", 1, domain="rack-a"), Node("n2", 1, domain="rack-b"))
    state = ClusterState(racks, (Project("a", 2),), (Job("a", "x", 2, 2, topology="required"),))
    start = Decision(Action.START, "a", "x", (Placement(0, "n1", 1), Placement(1, "n2", 1)), "")
    violations = check_invariants(state, _plan(start), CFG, now=0)
    assert any(
        "a/x requires one topology domain but runs across ['rack-a', 'rack-b']" in v for v in violations
    )


def test_idle_gpus_while_work_waits_is_caught() -> None:
    state = _state(Job("a", "x", 1, 1))
    assert any(
        "waits for 1 replicas while GPUs are idle" in v for v in check_invariants(state, _plan(), CFG, now=0)
    )


def test_guarantee_not_served_is_caught() -> None:
    state = _state(_running("a", "hog", (0, "node-1"), (1, "node-2"), min=1), Job("b", "y", 1, 1))
    violations = check_invariants(state, _plan(), CFG, now=0)
    assert any("project b is below its guarantee and y is owed GPUs" in v for v in violations)


def test_reclaim_from_a_project_within_its_share_for_one_above_is_caught() -> None:
    state = _state(_running("a", "x", (0, "node-1")), _running("b", "y", (0, "node-2")))
    bad = Decision(Action.EVICT, "a", "x", (Placement(0, "node-1", 1),), "", Cause.RECLAIM, ("b", "y"))
    violations = check_invariants(state, _plan(bad), CFG, now=0)
    assert any("reclaim took from a, which is not above its fair share" in v for v in violations)
    assert any("reclaim for b, which is not below its fair share" in v for v in violations)


def test_department_caps_are_respected_by_the_checker() -> None:
    """A department limit and its interactive quota keep a job waiting without any violation."""
    dept = Department("d", deserved_gpus=0, limit_gpus=0)
    state = ClusterState(
        nodes(2), (Project("a", 1, department="d"),), (Job("a", "nb", 1, 1, interactive=True),), (dept,)
    )
    plan = plan_cycle(state, CFG, now=0)
    assert plan.decisions == () and check_invariants(state, plan, CFG, now=0) == []
    note = plan.note("a", "nb")
    assert note is not None and "department d has no room left" in note.reason


def test_ledger_rollback_restores_every_figure() -> None:
    state = ClusterState(
        (Node("n1", 5), Node("off", 2, schedulable=False)),
        (Project("a", 2, department="d"), Project("b", 2)),
        (
            Job("a", "nb", 1, 1, interactive=True, replicas=(Replica(0, "n1", 1),)),
            Job("b", "el", 1, 3, replicas=(Replica(0, "n1", 1), Replica(1, "n1", 1), Replica(2, "off", 2))),
            Job("b", "new", 1, 1),
            Job("ghost", "x", 1, 1),  # a job of a project that no longer exists is ignored
        ),
        (Department("d", 2),),
    )
    ledger = Ledger(state, fair_shares(state, CFG), CFG, 0.0)
    figures = (
        dict(ledger.alloc),
        dict(ledger.interactive),
        dict(ledger.free.value),
        dict(ledger.avail.value),
    )
    mark = ledger.checkpoint()
    nb = ledger.jobs[("a", "nb")]
    ledger.release(nb.key, list(ledger.active[nb.key]), "test", Cause.RECLAIM, None)
    el = ledger.jobs[("b", "el")]
    ledger.release(el.key, [ledger.active[el.key][-1]], "one", Cause.RECLAIM, None)
    ledger.release(el.key, [ledger.active[el.key][-1]], "two", Cause.RECLAIM, None)
    ledger.place(ledger.jobs[("b", "new")], 1, reserve=False)
    ledger.place(ledger.jobs[("b", "new")], 1, reserve=False)
    ledger.place(ledger.jobs[("b", "new")], 1, reserve=True)
    ledger.rollback(mark)
    assert (
        dict(ledger.alloc),
        dict(ledger.interactive),
        dict(ledger.free.value),
        dict(ledger.avail.value),
    ) == figures
    assert ledger.released == {} and ledger.started == {} and ledger.reservations == []
    with pytest.raises(AssertionError, match="without checking slots"):
        ledger.place(ledger.jobs[("b", "new")], 9, reserve=False)


def test_model_and_plan_helpers() -> None:
    job = Job("a", "x", 1, 3, replicas=(Replica(0, "n", 1), Replica(1, "n", 1, releasing=True)))
    assert job.elastic and job.replicas[0].is_master and not job.replicas[1].is_master
    assert job.phase.value == "running" and Job("a", "y", 1, 1).phase.value == "pending"
    d = Decision(Action.GROW, "a", "x", (Placement(2, "n", 2), Placement(3, "n", 2)), "")
    assert d.gpus == 4 and _plan(d).for_job("a", "x") == (d,) and _plan(d).note("a", "x") is None


def test_lowered_limit_with_only_interactive_jobs_left_keeps_them() -> None:
    """R3 beats R11: interactive jobs are never evicted, even above a lowered limit."""
    state = ClusterState(
        nodes(2),
        (Project("a", 2, limit_gpus=1),),
        (_running("a", "nb", (0, "node-1"), (1, "node-2"), interactive=True),),
    )
    plan = plan_cycle(state, CFG, now=0)
    assert plan.decisions == () and check_invariants(state, plan, CFG, now=0) == []


def test_lost_replica_is_restored_where_gpus_are_free() -> None:
    c = Cluster(nodes(4)).project("a", 4).submit("a", "rigid", min=2)
    c.cycle()
    lost = next(r.node for r in c.job("a", "rigid").active if r.index == 1)
    c.state = replace(c.state, nodes=tuple(n for n in c.state.nodes if n.name != lost))
    plan = plan_cycle(c.state, c.config, now=c.now)
    assert [(d.action, [p.index for p in d.replicas]) for d in plan.decisions] == [(Action.GROW, [1])]
    assert "restored 1 lost replicas" in plan.decisions[0].reason


def test_guarantee_claims_take_from_a_settling_borrower() -> None:
    """R2 claims ignore the settle time: a's fresh borrowing goes for b and c."""
    c = Cluster(nodes(4), config=Config(settle_seconds=5)).project("a", 0).project("b", 2).project("c", 2)
    c.submit("a", "borrow", min=1, max=4)
    c.cycle()
    c.submit("b", "small", min=1).submit("c", "big", min=2).submit("b", "grow", min=1, max=1)
    plan = c.cycle()
    assert {d.job for d in plan.decisions if d.action in (Action.SHRINK, Action.EVICT)} == {"borrow"}
    assert {r.project for r in plan.reservations} == {"b", "c"}


def test_failed_reclaim_is_not_retried_for_a_claim_as_big_in_the_same_cycle() -> None:
    held = Job("a", "r", 1, 1, replicas=(Replica(0, "node-1", 1),))  # a within its fair share: no victim
    state = ClusterState(
        nodes(2), (Project("a", 1), Project("b", 1)), (held, Job("b", "x", 2, 2), Job("b", "y", 2, 2))
    )
    ledger = Ledger(state, fair_shares(state, CFG), CFG, 0.0)
    order = VictimOrder(ledger)
    assert reclaim(ledger, order, ledger.jobs[("b", "x")], 2, below_guarantee=False) is None
    assert ledger.memo.reclaims == {(1, False, None, False, Floor.SHARE, True, False, None): 2}
    assert (
        reclaim(ledger, order, ledger.jobs[("b", "y")], 3, below_guarantee=False) is None
    )  # answered from the memo


def test_growth_above_the_guarantee_waits_out_a_settling_victim() -> None:
    c = Cluster(nodes(6), config=Config(settle_seconds=4)).project("a", 0).project("b", 1)
    c.submit("a", "borrow", min=1, max=6).submit("b", "el", min=1, max=4)
    c.cycle()
    assert (c.alloc("a"), c.alloc("b")) == (3, 3)  # shares 3/3: weights equal, b's quota of 1 first
    c.finish("b", "el").submit("b", "el2", min=1, max=3)
    c.cycle()
    assert c.alloc("b") <= 3


def test_reclaim_skips_a_unit_too_big_to_take_and_takes_a_smaller_one() -> None:
    """R7 without R2: a is 1 GPU above its share; its newest job (2 GPUs) may not go, its 1-GPU job may."""
    state = ClusterState(
        (Node("node-1", 1), Node("node-2", 2)),
        (Project("a", 1), Project("b", 1)),
        (
            Job("a", "small", 1, 1, submitted_at=0, replicas=(Replica(0, "node-1", 1),)),
            Job("a", "big", 1, 1, 2, submitted_at=1, replicas=(Replica(0, "node-2", 2),)),
            Job("b", "x", 1, 1),
            Job("b", "y", 1, 1),
        ),
    )
    ledger = Ledger(state, fair_shares(state, CFG), CFG, 0.0)
    assert ledger.shares.project == {"a": 2, "b": 1}
    units = reclaim(ledger, VictimOrder(ledger), ledger.jobs[("b", "x")], 1, below_guarantee=False)
    assert units is not None and [u.key for u in units] == [("a", "small")]


def test_pending_interactive_job_owed_its_quota_is_checked() -> None:
    state = _state(Job("a", "nb", 1, 1, interactive=True))
    assert any("project a is below its guarantee" in v for v in check_invariants(state, _plan(), CFG, now=0))


def test_node_targeted_reclaim_takes_nothing_the_rules_forbid() -> None:
    state = ClusterState(
        nodes(1, gpus=2), (Project("a", 1), Project("b", 1)), (_running("b", "x", (0, "node-1")),)
    )
    ledger = Ledger(state, fair_shares(state, CFG), CFG, 0.0)
    rules = Reclaimer(ledger, VictimOrder(ledger), Job("a", "big", 1, 1, 2), 1, below_guarantee=True)
    rules.allowed = lambda p, u: False  # type: ignore[method-assign]
    assert rules.on_node("node-1", 2) == []
    assert ledger.released == {}


def test_failed_consolidation_is_not_retried_for_a_claim_as_big_in_the_same_cycle() -> None:
    # Each 4-GPU node holds an interactive replica of a (R3: never moved), so no node can be freed for b.
    pinned = tuple(
        Job("a", f"i{n}", 1, 1, interactive=True, replicas=(Replica(0, f"node-{n}", 1),)) for n in (1, 2)
    )
    state = ClusterState(
        nodes(2, gpus=4), (Project("a", 2), Project("b", 6)), (*pinned, Job("b", "x", 2, 2, 4))
    )
    ledger = Ledger(state, fair_shares(state, CFG), CFG, 0.0)
    claim = ledger.jobs[("b", "x")]
    assert consolidate(ledger, claim, 1) is None
    assert ledger.memo.consolidations == {(4, False): 1}
    assert consolidate(ledger, claim, 2) is None  # answered from the memo: free GPUs only dwindle in a cycle


def test_consolidation_with_reclaim_takes_no_whole_job_bigger_than_the_replica_it_makes_room_for() -> None:
    """a is owed a 4-GPU replica; node-1 has 3 idle GPUs and c's 1-GPU job, which could move only onto GPUs
    reclaimed from b; b's one job (4 GPUs, no extras) spans node-2 and node-3: evicting it to make room for
    one moved GPU is refused, and nothing else frees a node, so nothing changes (remembered for the cycle)."""
    state = ClusterState(
        nodes(3, gpus=4),
        (Project("a", 4), Project("b", 2), Project("c", 6)),
        (
            Job("b", "four", 4, 4, replicas=tuple(Replica(i, f"node-{2 + i // 2}", 1) for i in range(4))),
            *(
                _running("c", f"c{n}{i}", (0, f"node-{n}"))
                for n in (1, 2, 3)
                for i in range(1 if n == 1 else 2)
            ),
            Job("a", "big", 1, 1, 4),
        ),
    )
    ledger = Ledger(state, fair_shares(state, CFG), CFG, 0.0)
    claim = ledger.jobs[("a", "big")]
    rules = Reclaimer(ledger, VictimOrder(ledger), claim, 1, below_guarantee=True)
    assert consolidate(ledger, claim, 1, rules=rules) is None
    assert ledger.released == {} and ledger.reservations == []
    assert ledger.memo.consolidations == {(4, True): 1}
