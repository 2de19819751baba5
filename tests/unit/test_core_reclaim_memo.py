"""A reclaim remembers, for the rest of the cycle, the victim projects in which it found no unit it may take,
and only while their replicas stay as they were (``memo.NoUnit``, ``Ledger.touched``): a failing reclaim
searches every project above its share, and a settled cycle at 81,920 GPUs tried one for dozens of claims.
Checked on a case built for it and against plans made without the memory on random clusters."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from corebuild import Cluster, nodes
from hypothesis import HealthCheck, given, settings
from test_core_properties import Spec, _replay, workloads

from scheduler.core import ClusterState, Config, Job, Project, Replica, plan_cycle, preemption
from scheduler.core.fairshare import fair_shares
from scheduler.core.ledger import Ledger
from scheduler.core.preemption import Reclaimer, fits
from scheduler.core.victims import Floor, VictimOrder

CFG = Config(settle_seconds=0)


def test_a_reclaim_after_a_failed_one_takes_the_units_that_one_took_and_gave_back() -> None:
    """b is owed whole 4-GPU nodes, and a holds three: two it may lose, one interactive job it may not. A
    search that never succeeds takes both, then finds a with nothing left to give and gives them back; the
    next search for the same claim finds them again (a's replicas are back as they were, so what the failed
    search found out about a no longer holds)."""
    a_jobs = tuple(
        Job("a", name, 1, 1, 4, replicas=(Replica(0, f"node-{n}", 4),), interactive=name == "desk")
        for n, name in ((1, "one"), (2, "two"), (3, "desk"))
    )
    b_jobs = tuple(Job("b", name, 1, 1, 4) for name in ("c", "d", "e"))  # b's fair share: all 12 GPUs
    state = ClusterState(nodes(3, gpus=4), (Project("a", 0), Project("b", 12)), (*a_jobs, *b_jobs))
    ledger = Ledger(state, fair_shares(state, CFG), CFG, 0.0)
    order, claim = VictimOrder(ledger), ledger.jobs[("b", "c")]

    def rules() -> Reclaimer:
        return Reclaimer(ledger, order, claim, 1, below_guarantee=True, floor=Floor.ANY)

    assert rules().until(lambda: False, 4) is None
    assert ledger.active[("a", "one")] and ledger.active[("a", "two")]  # given back
    assert ledger.memo.no_unit  # a had nothing left to give in that search
    units = rules().until(fits(ledger, claim, 1), 4)
    assert units is not None and [u.key for u in units] == [("a", "two")]


def without_memory(c: Cluster) -> object:
    """The plan of ``c``'s state with every victim project searched each time."""
    taking = preemption._take_until_fits

    def search(*args: object, **kwargs: object) -> object:
        kwargs["kind"] = None
        return taking(*args, **kwargs)  # type: ignore[arg-type]

    preemption._take_until_fits = search  # type: ignore[assignment]
    try:
        return plan_cycle(c.state, c.config, now=c.now)
    finally:
        preemption._take_until_fits = taking


SKIPPED: list[int] = []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def _plans_are_the_same(w: tuple[Cluster, list[Spec], random.Random]) -> None:
    c, specs, rng = w
    _replay(c, specs, rng, steps=4)
    gpus = max(n.gpus for n in c.state.nodes)
    for i in range(4):  # claims that reclaim: the project owed most asks for a whole node, then any project
        size = max(1, gpus // (1 + i % 2))
        claim = Job(c.claimant(rng, i), f"claim{i}", 1, 2, size, submitted_at=c.now, priority=i % 3)
        c.state = replace(c.state, jobs=(*c.state.jobs, claim))
        assert plan_cycle(c.state, c.config, now=c.now) == without_memory(c)
        c.cycle()


def test_remembering_projects_with_nothing_to_give_changes_no_plan_on_random_clusters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    SKIPPED.clear()
    taking = preemption._take_until_fits

    def counted(*args: object, **kwargs: object) -> object:
        ledger = args[0]
        before = len(ledger.memo.no_unit)  # type: ignore[attr-defined]
        out = taking(*args, **kwargs)  # type: ignore[arg-type]
        SKIPPED.append(len(ledger.memo.no_unit) - before)  # type: ignore[attr-defined]
        return out

    monkeypatch.setattr(preemption, "_take_until_fits", counted)
    _plans_are_the_same()
    assert sum(SKIPPED) > 10  # the memory was written (and so could be read) in the random clusters
