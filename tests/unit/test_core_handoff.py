"""Starts a plan holds GPUs for, made as soon as those GPUs are free (``scheduler.core.handoff``): the live
engine's release turns start a reclaim's claimant as its victims exit instead of a cycle later.

Every ``Cluster.cycle()`` checks all invariants (tests/corebuild.py): a plan made after such a start keeps
them all.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace
from fractions import Fraction

from corebuild import Cluster, nodes
from hypothesis import HealthCheck, given, settings
from test_core_properties import Spec, _replay, workloads

from scheduler.core import Action, ClusterState, Job, Plan, apply_plan
from scheduler.core.handoff import due_starts, held_starts
from scheduler.core.plan import Reservation


def free_now(state: ClusterState) -> dict[str, int]:
    """GPUs per schedulable node that no replica holds, releasing ones included (what the engine reads)."""
    free = {n.name: n.gpus for n in state.nodes if n.schedulable}
    for job in state.jobs:
        for r in job.replicas:
            if r.node in free:
                free[r.node] -= r.gpus
    return free | {n.name: 0 for n in state.nodes if not n.schedulable}


def start_what_is_due(c: Cluster) -> Plan:
    """What a release turn does after the last plan: start the jobs it held GPUs for that are free now."""
    plan = Plan(tuple(due_starts(held_starts(c.states[-1], c.plans[-1]), free_now(c.state))), (), ())
    c.state = apply_plan(c.state, plan, now=c.now)
    return plan


def seed() -> Cluster:
    """The seed scenario: a's elastic job runs on all 4 GPUs; b submits a gang of 2 and a shrinks for it."""
    c = Cluster(nodes(4), slow_release=True).project("a", 2).project("b", 2)
    c.submit("a", "elastic", min=2, max=4)
    c.cycle()
    c.submit("b", "one", min=2)
    plan = c.cycle()
    assert [d.action for d in plan.decisions] == [Action.SHRINK]
    return c


def test_the_claimant_starts_on_the_gpus_held_for_it_once_its_victims_exit() -> None:
    c = seed()
    assert start_what_is_due(c).decisions == ()  # a's workers still hold them
    c.release_done()
    started = start_what_is_due(c).decisions
    assert [(d.action, d.job, [(p.index, p.node) for p in d.replicas]) for d in started] == [
        (Action.START, "one", [(0, "node-3"), (1, "node-4")])
    ]
    assert started[0].reason.startswith(
        "started 2 replicas on the GPUs held for it as soon as they were free; it was waiting for 2 GPUs"
    )
    assert "being reclaimed: 2 GPUs from project a" in started[0].reason
    assert c.cycle().decisions == ()  # the next plan finds it running where it would have started it


def test_only_firm_holds_of_a_waiting_job_start_it_at_a_size_it_may_run_at() -> None:
    state = ClusterState(
        nodes(3, gpus=4),
        (),
        (
            Job("p", "drain", 1, 1, 4),  # a drain hold (not firm) may come to nothing: not a start
            Job("p", "few", 3, 3, 2),  # holds for 2 replicas of a gang of 3: not a start
            Job("p", "capped", 1, 2, 1),  # holds 4 GPUs: starts with its max of 2
            Job("p", "sized", 1, 5, 1, allowed_replicas=(3,)),  # holds 4: starts with 3 (R16)
        ),
    )
    holds = (
        Reservation("p", "drain", "node-1", 4, firm=False),
        Reservation("p", "few", "node-1", 4),
        Reservation("p", "capped", "node-2", 4),
        Reservation("p", "sized", "node-3", 4),
    )
    held = held_starts(state, Plan((), (), (), reservations=holds))
    assert [(h.job.name, len(h.replicas)) for h in held] == [("capped", 2), ("sized", 3)]


def test_a_running_job_growth_and_a_fraction_wait_for_the_next_plan() -> None:
    running = seed().state  # a's elastic job runs: its growth would restart it, a plan decides it
    fraction = Job("b", "notebook", 1, 1, 1, gpu_fraction=Fraction(1, 2))
    state = replace(running, jobs=(*running.jobs, fraction))
    holds = (Reservation("a", "elastic", "node-3", 1), Reservation("b", "notebook", "node-4", 1))
    assert held_starts(state, Plan((), (), (), reservations=holds)) == ()


def test_two_starts_held_on_the_same_gpus_only_the_first_in_the_plan_starts() -> None:
    state = ClusterState(nodes(1, gpus=4), (), (Job("p", "first", 1, 1, 4), Job("q", "second", 1, 1, 4)))
    holds = (Reservation("p", "first", "node-1", 4), Reservation("q", "second", "node-1", 4))
    held = held_starts(state, Plan((), (), (), reservations=holds))
    free = {"node-1": 4}
    assert [d.job for d in due_starts(held, free)] == ["first"]
    assert free == {"node-1": 0}
    assert due_starts(held, {"node-1": 3}) == []  # not all free: it keeps waiting


@settings(
    max_examples=int(os.environ.get("TIDE_PROPERTY_EXAMPLES", "300")) // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(workloads())
def test_starting_held_jobs_as_their_gpus_free_keeps_every_invariant_on_random_clusters(
    w: tuple[Cluster, list[Spec], random.Random],
) -> None:
    """Property: on random clusters, after a cycle the releases end (or not yet) and every job the plan held
    GPUs for that are all free starts there; it lands only on GPUs held for it that were free, and the next
    plan (``Cluster.cycle`` checks every invariant) keeps them all, R2's guarantee among them."""
    c, specs, rng = w
    c.slow_release = True
    _replay(c, specs, rng, steps=3)
    projects = [p.name for p in c.state.projects]
    for i in range(4):
        c.submit(rng.choice(projects), f"late{i}", min=rng.choice([1, 2]), gpus=rng.choice([1, 2]))
        c.cycle()  # a plan that may hold GPUs being released for it
        if rng.random() < 0.6:
            c.release_done()  # else they are still being released: what is held there waits
        free = free_now(c.state)
        held = {(r.project, r.job, r.node) for r in c.plans[-1].reservations if r.firm}
        plan = start_what_is_due(c)
        for d in plan.decisions:
            waiting = next(j for j in c.states[-1].jobs if j.key == (d.project, d.job))
            assert d.action is Action.START and not waiting.replicas
            assert all((d.project, d.job, p.node) in held for p in d.replicas)
        assert all(gpus >= 0 for gpus in free_now(c.state).values()), (free, plan)
    c.cycle()
