"""The node-by-node reclaim (a replica too big for victims scattered across nodes) skips nodes that cannot
be chosen, without changing a plan: a node whose replicas the rules could not free enough of, and, once a
node was found, any node that could not cost less. Checked against the search that tries every node."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import replace

import pytest
from corebuild import Cluster
from hypothesis import HealthCheck, given, settings
from test_core_properties import Spec, _replay, workloads

from scheduler.core import Job, plan_cycle
from scheduler.core.ledger import Ledger
from scheduler.core.preemption import Reclaimer

SEARCHES: list[int] = []  # the node-by-node searches the plans ran (the property is empty without them)
TRIED: list[int] = []  # the nodes they tried whose bounds were checked


def counted(by_node: object) -> object:
    def search(self: Reclaimer, count: int) -> object:
        SEARCHES.append(count)
        return by_node(self, count)  # type: ignore[operator]

    return search


def checked_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every node is tried, and each trial checks both bounds: a node ``_may_free`` rules out fails, and no
    trial costs less than ``_least_for_one_more`` says it can."""
    one_more, may_free = Reclaimer._one_more_replica, Reclaimer._may_free

    def trial(self: Reclaimer, node: str) -> tuple[float, ...] | None:
        lacking = self._one_more(node) - self.ledger.avail.value[node]
        possible = may_free(self, node, lacking)
        least = self._least_for_one_more(node)
        monkeypatch.setattr(Reclaimer, "_may_free", lambda self, node, lacking: True)
        try:
            cost = one_more(self, node)
        finally:
            monkeypatch.setattr(Reclaimer, "_may_free", may_free)
        TRIED.append(1)
        assert cost is None or possible, (node, cost)
        assert cost is None or cost >= least, (node, cost, least)
        return cost

    def every(
        self: Ledger, options: Iterable[str], attempt: Callable[..., object], floor: object = None
    ) -> object:
        return cheapest(self, options, attempt)  # type: ignore[arg-type]

    cheapest = Ledger.cheapest
    monkeypatch.setattr(Reclaimer, "_one_more_replica", trial)
    monkeypatch.setattr(Ledger, "cheapest", every)


def every_node_tried(c: Cluster) -> object:
    """The plan of ``c``'s state with the search trying every node (no bound, no early skip)."""
    may_free, least = Reclaimer._may_free, Reclaimer._least_for_one_more
    Reclaimer._may_free = lambda self, node, lacking: True  # type: ignore[method-assign]
    Reclaimer._least_for_one_more = lambda self, node: ()  # type: ignore[method-assign]
    try:
        return plan_cycle(c.state, c.config, now=c.now)
    finally:
        Reclaimer._may_free, Reclaimer._least_for_one_more = may_free, least  # type: ignore[method-assign]


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(workloads())
def _plans_are_the_same(w: tuple[Cluster, list[Spec], random.Random]) -> None:
    c, specs, rng = w
    _replay(c, specs, rng, steps=4)
    gpus = max(n.gpus for n in c.state.nodes)
    for i in range(4):  # gangs of whole-node replicas, the node-by-node search's case: an elastic one of the
        low = 2 if i % 2 else 1  # project owed most, or a rigid pair of any project
        big = Job(c.claimant(rng, i), f"big{i}", low, 2, gpus, submitted_at=c.now)
        c.state = replace(c.state, jobs=(*c.state.jobs, big))
        assert plan_cycle(c.state, c.config, now=c.now) == every_node_tried(c)
        c.cycle()


def test_skipping_nodes_that_cannot_be_chosen_changes_no_plan_on_random_clusters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    SEARCHES.clear()
    monkeypatch.setattr(Reclaimer, "by_node", counted(Reclaimer.by_node))
    _plans_are_the_same()
    assert SEARCHES  # the searches ran (50-290 in 300 random clusters; one random draw had 10)


def test_no_node_the_bounds_skip_could_have_been_chosen_on_random_clusters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bounds themselves, node by node: every node of every search is tried and checked against them."""
    TRIED.clear()
    checked_bounds(monkeypatch)
    _plans_are_the_same()
    assert len(TRIED) > 100
