"""R14 fair share over time, as the teams meet it: usage above quota, decayed, lowers a team's over-quota weight.

Scenarios run through ``corebuild.Cluster`` (every invariant checked after every cycle); the properties
check the division itself on random projects.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from corebuild import Cluster, nodes
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core import ClusterState, Config, Department, Job, Node, Project, Replica
from scheduler.core.fairshare import fair_shares
from scheduler.core.usage import accrue, adjusted, factor, normalised, over_quota

DAY = 86400.0


def two_teams(half_life: float) -> Cluster:
    return (
        Cluster(nodes(16), config=Config(settle_seconds=0, usage_half_life=half_life))
        .project("a", 2)
        .project("b", 2)
    )


def test_a_team_that_borrowed_all_day_gets_less_of_the_idle_gpus_than_one_that_did_not() -> None:
    """a borrowed 14 idle GPUs for a day while b was away; when b comes back, b gets the larger part of the
    12 idle GPUs until their usage evens out, then the split is equal again."""
    c = two_teams(DAY).submit("a", "sweep", min=1, max=16)
    c.cycle()
    assert c.alloc("a") == 16
    c.elapse(DAY)
    c.submit("b", "train", min=1, max=16)
    plan = c.cycle()
    # a's usage: 14 GPUs above quota for one half-life = 7 x (half-life / ln 2) GPU-seconds, u = 7/16;
    # its weight share is 1/2, so its weight becomes 1 - (7/16) / (2 x 1/2) = 9/16 (b, with no usage: 1)
    assert (plan.share("a").weight, plan.share("b").weight) == (0.5625, 1.0)
    assert (plan.share("a").fair_share_gpus, plan.share("b").fair_share_gpus) == (6, 10)
    for _ in range(2):
        c.elapse(DAY)
        c.cycle()
    assert (c.alloc("a"), c.alloc("b")) == (6, 10)  # b borrows more while a pays back
    for _ in range(3):
        c.elapse(DAY)
        plan = c.cycle()
    assert (plan.share("a").fair_share_gpus, plan.share("b").fair_share_gpus) == (8, 8)  # even again
    assert (c.alloc("a"), c.alloc("b")) == (8, 8)


def test_half_life_zero_keeps_the_memoryless_split() -> None:
    """Off by default: whatever a used before, the idle GPUs are split by weight alone."""
    c = two_teams(0.0).submit("a", "sweep", min=1, max=16)
    c.cycle()
    c.elapse(DAY)
    assert all(p.usage_gpu_seconds == 0.0 for p in c.state.projects)
    c.submit("b", "train", min=1, max=16)
    plan = c.cycle()
    assert (plan.share("a").fair_share_gpus, plan.share("b").fair_share_gpus) == (8, 8)


def test_usage_never_touches_the_guarantee() -> None:
    """However much a team borrowed, its deserved quota is still its own (R2 comes before R14)."""
    c = two_teams(DAY)
    c.state = replace(c.state, projects=tuple(replace(p, usage_gpu_seconds=1e12) for p in c.state.projects))
    c.submit("a", "j", min=1, max=16).submit("b", "k", min=1, max=16)
    plan = c.cycle()
    assert plan.share("a").fair_share_gpus >= 2 and plan.share("b").fair_share_gpus >= 2
    assert (plan.share("a").weight, plan.share("b").weight) == (1 / 32, 1 / 32)


def test_a_heavy_user_still_borrows_what_nobody_else_wants() -> None:
    """Work conservation (R4) holds: usage lowers a weight, it never leaves GPUs idle."""
    c = two_teams(DAY)
    c.state = replace(
        c.state, projects=(replace(c.state.projects[0], usage_gpu_seconds=1e12), c.state.projects[1])
    )
    c.submit("a", "j", min=1, max=16)
    plan = c.cycle()
    assert plan.share("a").fair_share_gpus == 16 and c.alloc("a") == 16


def test_departments_keep_their_weight_and_their_projects_are_adjusted_inside() -> None:
    c = Cluster(
        nodes(24),
        departments=(Department("d", 4),),
        config=Config(settle_seconds=0, usage_half_life=DAY),
    )
    c.project("a", 1, department="d", usage_gpu_seconds=4 * DAY / 0.6931471805599453)
    c.project("b", 1, department="d").project("solo", 4)
    c.submit("a", "j", min=1, max=24).submit("b", "k", min=1, max=24).submit("solo", "s", min=1, max=24)
    plan = c.cycle()
    assert plan.department_shares[0].weight == 1.0 and plan.share("solo").weight == 1.0
    assert plan.share("a").weight < 1.0 == plan.share("b").weight
    assert plan.department_shares[0].fair_share_gpus == plan.share("solo").fair_share_gpus == 12
    assert (plan.share("a").fair_share_gpus, plan.share("b").fair_share_gpus) == (5, 7)


def test_usage_accrues_above_quota_only_and_decays_by_half_each_half_life() -> None:
    state = ClusterState(
        (Node("n", 8),),
        (Project("a", 2), Project("b", 4)),
        (
            Job("a", "j", 1, 5, replicas=tuple(Replica(i, "n", 1, releasing=i == 4) for i in range(5))),
            Job("b", "k", 1, 1, replicas=(Replica(0, "n", 3),)),
        ),
    )
    assert over_quota(state) == {"a": 3, "b": 0}  # a stopping replica still holds its GPU
    assert accrue(100.0, 0, 3600.0, 3600.0) == 50.0
    assert accrue(100.0, 5, 0.0, 3600.0) == 100.0
    assert accrue(100.0, 5, 60.0, 0.0) == 0.0
    one_step = accrue(0.0, 2, 7200.0, 3600.0)
    assert (
        abs(one_step - accrue(accrue(0.0, 2, 3600.0, 3600.0), 2, 3600.0, 3600.0)) < 1e-6
    )  # any cycle length
    assert normalised(1.0, 0, 3600.0) == 0.0 == normalised(1.0, 8, 0.0)


project_st = st.tuples(st.integers(0, 6), st.sampled_from([0.0, 1.0, 2.0, 3.0]), st.integers(0, 20))


@settings(max_examples=300, deadline=None)
@given(
    twins=st.tuples(st.integers(0, 6), st.sampled_from([1.0, 2.0]), st.integers(1, 20)),
    others=st.lists(project_st, max_size=3),
    usage=st.tuples(st.floats(0, 3e6), st.floats(0, 3e6)),
    gpus=st.integers(1, 32),
)
def test_more_usage_never_means_a_larger_share(
    twins: tuple[int, float, int], others: list[tuple[int, float, int]], usage: tuple[float, float], gpus: int
) -> None:
    """Of two teams alike but for their usage, the heavier user never gets more; the split of the cluster
    among all teams adds up to what it did without R14 (usage moves GPUs, never idles them); with the
    half-life 0 nothing changes."""
    deserved, weight, demand = twins
    light, heavy = sorted(usage)
    projects = [
        Project("light", deserved, weight, usage_gpu_seconds=light, created_at=0.0),
        Project("heavy", deserved, weight, usage_gpu_seconds=heavy, created_at=1.0),
        *(
            Project(f"o{i}", q, w, usage_gpu_seconds=3e5 * i, created_at=2.0 + i)
            for i, (q, w, _) in enumerate(others)
        ),
    ]
    demands = [demand, demand, *(d for _, _, d in others)]
    jobs = tuple(Job(p.name, "j", 1, d) for p, d in zip(projects, demands, strict=True) if d > 0)
    state = ClusterState((Node("n", gpus),), tuple(projects), jobs)
    with_usage = fair_shares(state, Config(usage_half_life=3600.0))
    without = fair_shares(state, Config())
    assert with_usage.project["heavy"] <= with_usage.project["light"]
    assert sum(with_usage.project.values()) == sum(without.project.values())
    memoryless = replace(state, projects=tuple(replace(p, usage_gpu_seconds=0.0) for p in projects))
    assert fair_shares(state, Config(usage_half_life=0.0)) == fair_shares(memoryless, Config())
    for p in projects:
        assert 0 <= with_usage.weight[p.name] <= p.over_quota_weight


def test_the_weight_factor_moves_in_steps_between_one_thirty_second_and_one() -> None:
    assert factor(0.0, Fraction(1, 2)) == 1
    assert factor(0.5, Fraction(1, 2)) == Fraction(1, 2)
    assert factor(5.0, Fraction(1, 2)) == Fraction(1, 32)
    assert adjusted({"a": 2, "b": 2}, {"a": 0.25}) == {"a": Fraction(3, 2), "b": 2}
    assert adjusted({"a": 1}, {"a": 1e-12}) == {"a": 1}
