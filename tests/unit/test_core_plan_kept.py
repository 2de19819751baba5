"""A settled cluster is not planned again every cycle: the engine's carry keeps the last plan while the
snapshot is the very same objects and no time the plan compared with has come (a job's settle time, R7 and
R18; a minimum runtime, R15), and plans again from that time on. A plan that read the time itself (work lost
since a checkpoint, R5's tie-break; a shrink's or an eviction's work lost) holds only for its own time.

The random version of these (plans at random later times, with and without the carry, must be equal) is in
test_core_properties.py's carry test.
"""

from __future__ import annotations

from corebuild import Cluster, nodes

from scheduler.core import Action, Config, plan_cycle
from scheduler.core.carry import Carry


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


def test_a_plan_that_weighed_work_lost_since_a_checkpoint_holds_only_for_its_own_time() -> None:
    """With R5's least-work-lost tie-break on (the default), the victim order changes as time passes: a
    plan whose reclaim walked it is made again each time, and is the plan made without the carry."""
    c, carry = protected_borrower(Config(settle_seconds=10.0)), Carry()
    for t in (20.0, 21.0, 300.0):
        assert plan_cycle(c.state, c.config, now=t, carry=carry) == plan_cycle(c.state, c.config, now=t)
    assert carry.plans_kept == 0
