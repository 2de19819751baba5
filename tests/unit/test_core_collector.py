"""A cycle frees what it allocated by reference counting: it leaves nothing for the cyclic collector.

Why it matters: at 10,240 GPUs a cycle allocates tens of thousands of objects; left in reference cycles (the
ledger's undo log held the ledger), they were freed only by collections that took 80 ms each.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from corebuild import Cluster, nodes

from scheduler.core import Config, plan_cycle
from scheduler.core.collector import paused


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    with paused():
        yield
    gc.collect()


def busy_cluster() -> Cluster:
    """Reclaims, starts, grows and waiting jobs: every step of a cycle has work."""
    c = Cluster(nodes(8, gpus=4), config=Config(settle_seconds=0))
    c.project("a", 8).project("b", 8).project("c", 16)
    c.submit("a", "elastic", min=2, max=8, gpus=4).submit("a", "small", gpus=1)
    for i in range(6):
        c.submit("b", f"wait-{i}", min=2, max=4, gpus=2)
    c.cycle()
    c.submit("c", "owed", min=4, max=4, gpus=4)
    return c


def test_planning_a_busy_cycle_leaves_no_cyclic_garbage(collector_off: None) -> None:
    c = busy_cluster()
    gc.collect()
    plan = plan_cycle(c.state, c.config, now=c.now)
    assert plan.decisions and plan.notes  # the cycle did work: reclaims, starts, notes
    assert gc.collect() == 0


def test_the_collector_is_paused_only_inside_the_block_and_blocks_nest() -> None:
    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block did not turn it back on
    assert gc.isenabled()
    gc.disable()
    try:
        with paused():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()
