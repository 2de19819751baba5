"""R16 allowed sizes, as users meet them: a job that may run only at some replica counts (say powers of two,
because its batch must divide evenly) is started, grown and shrunk only to those counts.

Every ``Cluster.cycle()`` checks all invariants, ``_sizes_kept`` among them (tests/corebuild.py).
"""

from __future__ import annotations

import os
import random
from dataclasses import replace

from corebuild import Cluster, nodes
from hypothesis import HealthCheck, given, settings
from test_core_properties import Spec, _replay, workloads

from scheduler.core import Action, Cause, Job, sizes

POWERS = (1, 2, 4, 8)


def test_a_job_allowed_powers_of_two_grows_to_four_on_six_idle_gpus_and_leaves_two_idle() -> None:
    c = Cluster(nodes(6)).project("a", 6).submit("a", "train", min=1, max=8, allowed_replicas=POWERS)
    plan = c.cycle()
    assert c.decisions(plan) == [("start", "a", "train", [0, 1, 2, 3])]
    assert len(c.job("a", "train").active) == 4  # not 6: 6 is not an allowed size
    assert c.decisions(c.cycle()) == []  # 2 idle GPUs cannot make it 8


def test_without_a_list_the_same_job_takes_all_six() -> None:
    c = Cluster(nodes(6)).project("a", 6).submit("a", "train", min=1, max=8)
    c.cycle()
    assert len(c.job("a", "train").active) == 6  # off by default: today's behaviour


def test_a_reclaim_of_one_gpu_shrinks_eight_to_four_and_the_rest_serves_the_next_claim_in_the_same_cycle() -> (
    None
):
    """b wants 1 GPU, then 2 more; a may run at 4 or 8 only: it goes 8 -> 4 once, and b's second job waits for
    the surplus of that same shrink instead of taking another victim."""
    c = Cluster(nodes(8)).project("a", 4).project("b", 4)
    c.submit("a", "train", min=4, max=8, allowed_replicas=(4, 8))
    c.cycle()
    assert len(c.job("a", "train").active) == 8
    c.submit("b", "small", min=1).submit("b", "pair", min=2)
    plan = c.cycle()
    assert c.decisions(plan) == [("shrink", "a", "train", [7, 6, 5, 4])]
    assert plan.decisions[0].cause == Cause.RECLAIM
    assert {(r.job, r.gpus) for r in plan.reservations} == {("small", 1), ("pair", 1)}
    plan = c.cycle()
    assert sorted(c.decisions(plan)) == [("start", "b", "pair", [0, 1]), ("start", "b", "small", [0])]
    assert c.indices("a", "train") == [0, 1, 2, 3]
    assert c.alloc("b") == 3


def test_surplus_of_a_shrink_is_lent_to_a_borrower() -> None:
    """The 3 GPUs b did not need are idle once a's replicas stopped, and go to c's elastic job (R4)."""
    c = Cluster(nodes(8)).project("a", 4).project("b", 4).project("c", 0)
    c.submit("a", "train", min=4, max=8, allowed_replicas=(4, 8))
    c.cycle()
    c.submit("b", "small", min=1).submit("c", "borrow", min=1, max=3)
    assert c.decisions(c.cycle()) == [("shrink", "a", "train", [7, 6, 5, 4])]
    plan = c.cycle()
    assert sorted(c.decisions(plan)) == [("start", "b", "small", [0]), ("start", "c", "borrow", [0, 1, 2])]


def test_growth_owed_by_fair_share_steps_two_at_a_time() -> None:
    """A step of 2 (2, 4, 6): the job owed 5 GPUs grows 2 -> 4, never to 5."""
    c = Cluster(nodes(8)).project("a", 5).project("b", 3)
    c.submit("a", "train", min=2, max=6, allowed_replicas=(2, 4, 6))
    c.submit("b", "other", min=3)
    c.cycle()
    assert len(c.job("a", "train").active) == 4
    assert c.alloc("b") == 3
    c.finish("b", "other")
    c.cycle()
    assert len(c.job("a", "train").active) == 6


def _lose(c: Cluster, node: str) -> None:
    """The node is gone, and with it its replicas (as the executor reports them)."""
    jobs = tuple(replace(j, replicas=tuple(r for r in j.replicas if r.node != node)) for j in c.state.jobs)
    c.state = replace(c.state, nodes=tuple(n for n in c.state.nodes if n.name != node), jobs=jobs)


def test_a_lost_node_leaves_three_of_two_or_four_and_tide_grows_it_back_to_four() -> None:
    c = Cluster(nodes(5)).project("a", 5).submit("a", "train", min=2, max=4, allowed_replicas=(2, 4))
    c.cycle()
    lost = next(r.node for r in c.job("a", "train").active if r.index == 3)
    _lose(c, lost)
    plan = c.cycle()
    assert [(d.action, len(d.replicas)) for d in plan.decisions] == [(Action.GROW, 1)]
    assert "to reach 4 (allowed sizes 2, 4)" in plan.decisions[0].reason
    assert len(c.job("a", "train").active) == 4


def test_a_lost_node_with_no_idle_gpu_shrinks_three_to_two() -> None:
    c = Cluster(nodes(4)).project("a", 4).submit("a", "train", min=2, max=4, allowed_replicas=(2, 4))
    c.cycle()
    lost = next(r.node for r in c.job("a", "train").active if r.index == 1)
    _lose(c, lost)
    plan = c.cycle()
    assert c.decisions(plan) == [("shrink", "a", "train", [3])]
    assert plan.decisions[0].cause == Cause.NODE
    assert "not among its allowed sizes 2, 4: down to 2" in plan.decisions[0].reason


def test_a_lowered_limit_shrinks_a_sized_job_a_whole_step() -> None:
    c = Cluster(nodes(8)).project("a", 8).submit("a", "train", min=2, max=8, allowed_replicas=(2, 4, 8))
    c.cycle()
    c.state = replace(c.state, projects=(replace(c.state.projects[0], limit_gpus=5),))
    plan = c.cycle()
    assert c.decisions(plan) == [("shrink", "a", "train", [7, 6, 5, 4])]
    assert len(c.job("a", "train").active) == 4


def test_a_reclaim_for_a_two_gpu_replica_skips_a_step_that_sits_on_one_gpu_nodes() -> None:
    """b is owed one 2-GPU replica: a's 1-GPU extras cannot make room for it, its 2-GPU job can."""
    node_list = (*nodes(4), *nodes(1, 2, prefix="big"))
    c = Cluster(node_list).project("a", 0).project("b", 2)
    c.submit("a", "train", min=1, max=4, allowed_replicas=(1, 2, 4)).submit("a", "wide", min=1, gpus=2)
    c.cycle()
    assert len(c.job("a", "train").active) == 4
    c.submit("b", "claim", min=1, gpus=2)
    plan = c.cycle()
    assert c.decisions(plan) == [("evict", "a", "wide", [0])]


def test_sizes_helpers_keep_min_and_max_and_step_down_whole_steps() -> None:
    job = Job("a", "j", 2, 8, allowed_replicas=(1, 4, 16))
    assert sizes.sizes(job) == (2, 4, 8)  # outside min..max dropped; min and max always allowed
    assert [sizes.allowed(job, n) for n in (0, 1, 2, 3, 4, 8, 9)] == [
        True,
        False,
        True,
        False,
        True,
        True,
        False,
    ]
    assert (sizes.grow_by(job, 2, 5), sizes.grow_by(job, 4, 3), sizes.grow_by(job, 2, 0)) == (2, 0, 0)
    assert (sizes.grow_at_least(job, 2, 1), sizes.grow_at_least(job, 8, 1)) == (2, 1 << 30)
    assert (sizes.shrink_to(job, 8), sizes.shrink_to(job, 2)) == (4, 2)
    plain = Job("a", "p", 2, 4)
    assert (sizes.shrink_to(plain, 4), sizes.shrink_to(plain, 2), sizes.sizes(plain)) == (3, 2, (2, 3, 4))


def _sized(name: str, low: int, high: int) -> tuple[int, ...]:
    """Per job, by its number: no list, powers of two, or a step of 2 from its minimum."""
    kind = int(name[1:]) % 3
    if kind == 1:
        return tuple(n for n in POWERS if low <= n <= high)
    return tuple(range(low, high + 1, 2)) if kind == 2 else ()


@settings(
    max_examples=int(os.environ.get("TIDE_PROPERTY_EXAMPLES", "300")) // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(workloads())
def test_jobs_with_allowed_sizes_keep_every_invariant_on_random_clusters(
    w: tuple[Cluster, list[Spec], random.Random],
) -> None:
    """Property: with a third of the jobs on powers of two and a third on steps of 2, every invariant holds
    after every cycle (``_sizes_kept``: no running job off its sizes) and plans stay deterministic."""
    c, specs, rng = w
    c.sizes_for = _sized
    _replay(c, specs, rng)


def test_a_job_waiting_to_grow_says_which_sizes_it_may_take() -> None:
    c = Cluster(nodes(3)).project("a", 3).submit("a", "train", min=1, max=4, allowed_replicas=(1, 4))
    plan = c.cycle()
    assert c.decisions(plan) == [("start", "a", "train", [0])]  # 3 idle GPUs: not enough for 4
    note = plan.note("a", "train")
    assert note is not None
    assert note.reason.startswith("running 1 of max 4 replicas (allowed sizes 1, 4); grows by 3 at once;")
