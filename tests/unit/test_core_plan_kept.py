"""A settled cluster is not planned again every cycle: the engine's carry keeps the last plan while the
snapshot is the very same objects and no time the plan compared with has come (a job's settle time, R7 and
R18; a minimum runtime, R15; the end of the ten seconds, where a search took a victim in R5's
least-work-lost order, which weighs the work lost as of their start), and plans again from that time on. A plan that decided
something is not kept (what it decided changes the snapshot).

The random version of these (plans at random later times, with and without the carry, must be equal) is in
test_core_properties.py's carry test.
"""

from __future__ import annotations

from dataclasses import replace

from corebuild import Cluster, nodes

from scheduler.core import Action, Config, Job, Node, Replica, plan_cycle
from scheduler.core.carry import Carry
from scheduler.core.fairshare import fair_shares
from scheduler.core.ledger import Ledger
from scheduler.core.victims import VictimOrder


def settling_job() -> Cluster:
    """Four 1-GPU nodes, team a (quota 2, borrowing the rest): ``x`` (2 to 4 replicas) started at t=0 beside
    ``y`` (2 GPUs), which then finished: two GPUs idle, and ``x``, at its guarantee, settles (10 s) before it
    grows into them (R7)."""
    c = Cluster(nodes(4), config=Config(settle_seconds=10.0)).project("a", 2)
    c.submit("a", "y", min=2).submit("a", "x", min=2, max=4)
    c.cycle()
    assert c.alloc("a") == 4
    c.finish("a", "y")
    return c


def test_a_settling_job_is_not_planned_again_until_its_settle_time_ends_then_it_grows() -> None:
    c, carry = settling_job(), Carry()
    first = plan_cycle(c.state, c.config, now=1.0, carry=carry)
    assert first.decisions == ()
    assert "settling after a resize until" in (first.note("a", "x") or first.notes[0]).reason
    for t in (2.0, 5.0, 9.999):
        assert plan_cycle(c.state, c.config, now=t, carry=carry) is first  # kept whole
    assert carry.plans_kept == 3
    grown = plan_cycle(c.state, c.config, now=10.0, carry=carry)  # its settle time is over
    assert grown == plan_cycle(c.state, c.config, now=10.0)
    assert [(d.action, d.job, d.gpus) for d in grown.decisions] == [(Action.GROW, "x", 2)]


def test_a_changed_snapshot_or_an_earlier_time_is_planned_again() -> None:
    c, carry = settling_job(), Carry()
    first = plan_cycle(c.state, c.config, now=5.0, carry=carry)
    assert plan_cycle(c.state, c.config, now=4.0, carry=carry) is not first  # the clock went back
    c.submit("a", "z", min=1)
    again = plan_cycle(c.state, c.config, now=5.0, carry=carry)
    assert again is not first and again == plan_cycle(c.state, c.config, now=5.0)
    assert carry.plans_kept == 0


def protected_borrower(config: Config) -> Cluster:
    """Six 1-GPU nodes; team a (quota 2, minimum runtime 600 s) borrowed all six at t=0; team b (no quota)
    asks for 2: a's job is protected against b until t=600 (R15)."""
    c = Cluster(nodes(6), config=config).project("a", 2, min_runtime_seconds=600.0).project("b", 0)
    c.submit("a", "train", min=1, max=6)
    c.cycle()
    c.submit("b", "eval", min=2)
    return c


def test_a_claim_waiting_for_a_minimum_runtime_is_planned_again_when_the_protection_ends() -> None:
    c, carry = protected_borrower(Config(settle_seconds=10.0, least_work_lost=False)), Carry()
    waiting = plan_cycle(c.state, c.config, now=20.0, carry=carry)
    assert waiting.decisions == ()
    assert (
        "protected by their minimum runtime until" in (waiting.note("b", "eval") or waiting.notes[0]).reason
    )
    assert plan_cycle(c.state, c.config, now=599.0, carry=carry) is waiting
    taken = plan_cycle(c.state, c.config, now=600.0, carry=carry)
    assert taken == plan_cycle(c.state, c.config, now=600.0)
    assert {(d.action, d.job) for d in taken.decisions} >= {(Action.SHRINK, "train")}


def two_borrowed_jobs() -> Cluster:
    """Team a (no quota) borrowed all three GPUs at t=0 for ``big`` (2 GPUs, checkpointed at t=90) and
    ``small`` (1 GPU, no checkpoint), both protected by a minimum runtime until t=600; team b (no quota)
    asks for one GPU at t=100. R5 takes first the job that would lose the least work: ``big`` (2 x 10
    GPU-seconds) before ``small`` (1 x 100) now, the other way round from t=180 (2 x 90 = 1 x 180)."""
    c = Cluster((Node("n1", 2), Node("n2", 1)), config=Config(settle_seconds=10.0))
    c.project("a", 0, min_runtime_seconds=600.0).project("b", 0)
    jobs = (
        Job("a", "big", 1, 1, 2, replicas=(Replica(0, "n1", 2),), last_resized_at=0.0, checkpointed_at=90.0),
        Job("a", "small", 1, 1, 1, replicas=(Replica(0, "n2", 1),), last_resized_at=0.0),
    )
    c.state = replace(c.state, jobs=jobs)
    c.submit("b", "eval", min=1)
    return c


def test_an_order_no_search_could_take_from_does_not_cut_how_long_a_plan_holds() -> None:
    """Both of a's jobs are protected: b's claim walks a's order and finds nothing the rules let go, so the
    order, which changes at t=180, does not decide the plan; it holds until the protection ends."""
    c, carry = two_borrowed_jobs(), Carry()
    waiting = plan_cycle(c.state, c.config, now=100.0, carry=carry)
    assert waiting.decisions == ()
    assert carry.kept_until() == 600.0
    assert plan_cycle(c.state, c.config, now=300.0, carry=carry) is waiting
    taken = plan_cycle(c.state, c.config, now=600.0, carry=carry)
    assert taken == plan_cycle(c.state, c.config, now=600.0)
    assert [(d.action, d.job) for d in taken.decisions] == [(Action.EVICT, "small")]  # loses less by then


def test_the_least_work_lost_order_weighs_the_work_lost_as_of_the_start_of_the_ten_seconds() -> None:
    """R5's order (decision 73): the work each job would lose, as a line in time, at the start of the ten
    seconds, so a plan that took a victim by it holds until they end: 2 x (60 - 90) = -60 against 1 x 60 all
    through 1:00-1:10 (big checkpointed at 1:30: the order of the two lines then)."""
    c = two_borrowed_jobs()
    for now in (60.0, 65.0, 69.9):
        ledger = Ledger(c.state, fair_shares(c.state, c.config), c.config, now)
        order = VictimOrder(ledger)
        assert order.lost == {("a", "big"): -60.0, ("a", "small"): 60.0}
        assert order.changes_at == 70.0
        order.taken(ledger)
        assert ledger.holds_until == 70.0
    off = replace(c.config, least_work_lost=False)
    ledger = Ledger(c.state, fair_shares(c.state, off), off, 95.0)
    VictimOrder(ledger).taken(ledger)
    assert ledger.holds_until == 600.0  # with the tie-break off the order never changes: until R15 ends
