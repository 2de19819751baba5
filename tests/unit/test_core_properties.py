"""Property tests: random clusters, projects and jobs; every invariant after every cycle; determinism.

Each example replays a random workload for several cycles through ``corebuild.Cluster``, whose ``cycle()``
checks all invariants of scheduler/core/invariants.py (node capacity, limits, R3, master last, gangs,
work conservation, the guarantee, R7) after every plan. With a ``Carry`` kept across the replay (what the
engine passes), every plan is also made with it and must be the plan made without it.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, replace

from corebuild import Cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core import ClusterState, Config, Department, Node, Project, plan_cycle
from scheduler.core.carry import Carry
from scheduler.core.model import Throughput


@dataclass(frozen=True)
class Spec:
    project: int
    min: int
    extra: int
    gpus: int
    interactive: bool
    priority: int
    arrives: int
    lasts: int


jobs_st = st.builds(
    Spec,
    project=st.integers(0, 3),
    min=st.integers(1, 3),
    extra=st.integers(0, 3),
    gpus=st.sampled_from([1, 1, 2, 4]),
    interactive=st.booleans().map(lambda b: b and random.Random(0).random() < 1),
    priority=st.integers(0, 2),
    arrives=st.integers(0, 5),
    lasts=st.integers(1, 6),
)


@st.composite
def workloads(draw: st.DrawFn) -> tuple[Cluster, list[Spec], random.Random]:
    sizes = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=5))
    cordoned = draw(st.lists(st.booleans(), min_size=len(sizes), max_size=len(sizes)))
    node_list = tuple(
        Node(f"n{i}", g, schedulable=not (c and i > 0))
        for i, (g, c) in enumerate(zip(sizes, cordoned, strict=True))
    )
    depts = tuple(
        Department(
            f"d{i}",
            draw(st.integers(0, 8)),
            draw(st.sampled_from([0.0, 1.0, 2.0])),
            draw(st.none() | st.integers(0, 16)),
            float(i),
        )
        for i in range(draw(st.integers(0, 2)))
    )
    config = Config(
        settle_seconds=draw(st.sampled_from([0.0, 2.0, 8.0])),
        usage_half_life=draw(st.sampled_from([0.0, 0.0, 20.0])),
        least_work_lost=draw(st.booleans()),
    )
    c = Cluster(node_list, departments=depts, config=config, slow_release=draw(st.booleans()))
    for i in range(draw(st.integers(1, 4))):
        deserved = draw(st.integers(0, 8))
        limit = draw(st.none() | st.integers(deserved, 16))
        dept = draw(st.sampled_from([None, *(d.name for d in depts)]))
        c.project(
            f"p{i}",
            deserved,
            over_quota_weight=draw(st.sampled_from([0.0, 1.0, 3.0])),
            limit_gpus=limit,
            allow_over_quota=draw(st.integers(0, 3)) > 0,
            department=dept,
            min_runtime_seconds=draw(st.sampled_from([0.0, 0.0, 0.0, 20.0])),  # R15
            resize_cost_seconds=draw(st.sampled_from([None, None, None, 4.0])),  # R18: longer settle times
        )
    specs = draw(st.lists(jobs_st, max_size=10))
    return c, specs, random.Random(draw(st.integers(0, 2**16)))


def _replay(
    c: Cluster, specs: list[Spec], rng: random.Random, steps: int = 9, carry: Carry | None = None
) -> None:
    projects = [p.name for p in c.state.projects]
    started: dict[str, int] = {}
    for step in range(steps):
        for i, s in enumerate(specs):
            if s.arrives == step:
                c.submit(
                    projects[s.project % len(projects)],
                    f"j{i}",
                    min=s.min,
                    max=s.min + s.extra,
                    gpus=s.gpus,
                    interactive=s.interactive and s.extra == 0 and i % 3 == 0,
                    priority=s.priority,
                )
        for job in c.state.jobs:
            if job.active:
                started.setdefault(job.name, step)
            if job.name in started and step - started[job.name] >= specs[int(job.name[1:])].lasts:
                c.finish(job.project, job.name)
        if c.slow_release and step % 2:
            c.release_done()
        _report_checkpoints(c, rng)
        _report_speeds(c, rng)
        _check_determinism(c, rng)
        if carry is not None:
            _check_carry(c, carry, rng)
        c.cycle()  # asserts every invariant
        c.elapse(rng.choice([0.0, 5.0, 30.0]))  # R14: usage above quota accrues (when a half-life is set)


def _report_checkpoints(c: Cluster, rng: random.Random) -> None:
    """Some running jobs complete a checkpoint now (R5's least-work-lost tie-break weighs them)."""
    jobs = tuple(
        replace(j, checkpointed_at=c.now) if j.active and rng.random() < 0.3 else j for j in c.state.jobs
    )
    c.state = replace(c.state, jobs=jobs)


def _report_speeds(c: Cluster, rng: random.Random) -> None:
    """Some running jobs report their speed (R19: goodput-aware growth ranks and caps them by it)."""
    jobs = tuple(
        replace(j, throughput=Throughput(rng.choice([0.5, 1.0, 2.0]), rng.choice([0.0, 0.01, 0.2, 1.0])))
        if j.active and rng.random() < 0.4
        else j
        for j in c.state.jobs
    )
    c.state = replace(c.state, jobs=jobs)


def _check_determinism(c: Cluster, rng: random.Random) -> None:
    def shuffled(t: tuple) -> tuple:  # type: ignore[type-arg]
        items = list(t)
        rng.shuffle(items)
        return tuple(items)

    s = c.state
    other = ClusterState(shuffled(s.nodes), shuffled(s.projects), shuffled(s.jobs), shuffled(s.departments))
    plan = plan_cycle(s, c.config, now=c.now)
    assert plan_cycle(other, c.config, now=c.now) == plan
    # without the R13 notes (what the simulator asks for) the plan is the same but for them
    quiet = plan_cycle(other, c.config, now=c.now, explain_waiting=False)
    assert quiet == replace(plan, notes=())


def _check_carry(c: Cluster, carry: Carry, rng: random.Random) -> None:
    """The plan made with the carry is the one made without it: after the last cycle's changes (the jobs
    that did not change are the same objects, as in the engine's kept snapshot), planned again with nothing
    changed (all it kept reused), from new tuples of the same objects (each project's line compared, the
    rest computed again) and after a plan of another state in between (``_another``)."""
    s = c.state
    plain = plan_cycle(s, c.config, now=c.now)
    assert plan_cycle(s, c.config, now=c.now, carry=carry) == plain
    assert plan_cycle(s, c.config, now=c.now, carry=carry) == plain
    copy = ClusterState(*((*t,) for t in (s.nodes, s.projects, s.jobs, s.departments)))  # new tuples
    assert plan_cycle(copy, c.config, now=c.now, carry=carry) == plain
    if rng.random() < 0.5:
        other = _another(s, rng)
        assert plan_cycle(other, c.config, now=c.now, carry=carry) == plan_cycle(other, c.config, now=c.now)
        assert plan_cycle(s, c.config, now=c.now, carry=carry) == plain
    _check_later(c, carry, rng)


def _check_later(c: Cluster, carry: Carry, rng: random.Random) -> None:
    """Nothing changed but the time: the plan the carry keeps, or makes again, is the one made without it, at
    random later times and around the time until which it said the last plan holds (``Carry.kept_plan``)."""
    s, now = c.state, c.now
    assert plan_cycle(s, c.config, now=now, carry=carry) == plan_cycle(s, c.config, now=now)
    kept = carry.kept_until()
    times = [now + rng.choice([0.5, 1.0, 3.0, 7.9, 8.0, 19.0, 20.0, 25.0, 40.0]) for _ in range(3)]
    if kept is not None and kept < now + 100:
        times += [kept - 1e-6, kept, kept + 0.5]
    for t in sorted(times):
        assert plan_cycle(s, c.config, now=t, carry=carry) == plan_cycle(s, c.config, now=t)


def _another(s: ClusterState, rng: random.Random) -> ClusterState:
    """``s`` with one change, the rest the same objects: a job fewer, every node but the first cordoned (what
    the demand counts changes), or a project fewer (its jobs belong to nobody)."""
    change = rng.randrange(3)
    if change == 0 and s.jobs:
        fewer = list(s.jobs)
        del fewer[rng.randrange(len(fewer))]
        return replace(s, jobs=tuple(fewer))
    if change == 1:
        return replace(
            s, nodes=tuple(n if i == 0 else replace(n, schedulable=False) for i, n in enumerate(s.nodes))
        )
    return replace(s, projects=s.projects[:-1])


@settings(
    max_examples=int(os.environ.get("TIDE_PROPERTY_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(workloads())
def test_invariants_hold_after_every_cycle_on_random_clusters(
    w: tuple[Cluster, list[Spec], random.Random],
) -> None:
    _replay(*w)


@settings(max_examples=60, deadline=None)
@given(workloads())
def test_rigid_and_static_baselines_keep_the_invariants_too(
    w: tuple[Cluster, list[Spec], random.Random],
) -> None:
    c, specs, rng = w
    c.config = replace(c.config, elastic=False, borrowing=rng.random() < 0.5)
    _replay(c, specs, rng)


@settings(
    max_examples=int(os.environ.get("TIDE_PROPERTY_EXAMPLES", "300")) // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(workloads(), st.booleans(), st.booleans())
def test_a_carry_kept_across_cycles_never_changes_a_plan(
    w: tuple[Cluster, list[Spec], random.Random], elastic: bool, goodput: bool
) -> None:
    c, specs, rng = w
    c.config = replace(c.config, elastic=elastic or rng.random() < 0.7, goodput=goodput)
    _replay(c, specs, rng, carry=Carry())


def test_same_input_same_plan_with_projects_named_alike() -> None:
    c = Cluster((Node("n1", 4),), [Project("a", 2), Project("ab", 2)])
    c.submit("a", "x", min=1, max=4).submit("ab", "x", min=1, max=4)
    first = plan_cycle(c.state, c.config, now=0)
    assert all(plan_cycle(c.state, c.config, now=0) == first for _ in range(5))
