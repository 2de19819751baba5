"""R19 goodput-aware growth: the throughput model, and which job grows first (scenarios fail without R19)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from corebuild import Cluster, nodes

from scheduler.core import Config
from scheduler.core.goodput import UNREPORTED_GAIN, cap, fit, gain, peak, speed, step_gain
from scheduler.core.model import UNLIMITED, Job, Replica, Throughput

POOR = Throughput(compute=1.0, sync=0.5)  # fastest on one replica: one more replica slows it down
GOOD = Throughput(compute=1.0, sync=0.0)  # linear scaling
SOME = Throughput(compute=1.0, sync=0.02)  # scales, less and less (fastest at 7 replicas)


def _rates(model: Throughput, sizes: list[int], batch: float = 256.0) -> list[tuple[int, float]]:
    """What a job at a fixed batch reports: samples per second at each size."""
    return [(n, batch * speed(model, n)) for n in sizes]


def test_fit_recovers_compute_and_sync_from_two_sizes() -> None:
    model = fit(_rates(Throughput(2.0, 0.05), [2, 8]))
    assert model is not None
    # samples/s = batch / step time: the fit is in seconds per sample, so compare ratios of speed
    assert model.sync / model.compute == pytest.approx(0.025)
    assert peak(model) == 6  # sqrt(compute / sync) = 6.3; 6 replicas step faster than 7


def test_fit_least_squares_over_several_sizes_and_repeated_reports() -> None:
    points = _rates(SOME, [1, 2, 4, 8, 16]) + _rates(SOME, [4])
    model = fit(points)
    assert model is not None
    assert model.sync / model.compute == pytest.approx(0.02)
    assert peak(model) == 7


def test_one_size_is_linear_scaling_at_its_measured_rate_and_nothing_reported_is_none() -> None:
    model = fit([(4, 400.0)])
    assert model == Throughput(compute=4 / 400.0, sync=0.0)
    assert peak(model) == UNLIMITED
    assert fit([]) is None
    assert fit([(0, 10.0), (2, 0.0), (3, float("nan"))]) is None


def test_faster_than_linear_drops_the_sync_term_and_slower_with_every_replica_peaks_at_one() -> None:
    superlinear = fit([(1, 100.0), (2, 250.0)])
    assert superlinear is not None and superlinear.sync == 0.0
    slower = fit([(1, 100.0), (2, 60.0), (4, 20.0)])
    assert slower is not None and peak(slower) == 1
    collapsing = fit([(2, 100.0), (3, 0.1), (4, 0.1)])  # no positive compute time fits: sync alone
    assert collapsing is not None and collapsing.sync > 0 and peak(collapsing) == 1


def test_gain_is_relative_to_one_replica_and_one_for_jobs_that_report_nothing() -> None:
    job = Job("p", "j", 1, 8)
    assert gain(job, 2) == UNREPORTED_GAIN
    assert gain(replace(job, throughput=GOOD), 2) == pytest.approx(1.0)
    assert step_gain(SOME, 4, 1) == pytest.approx(speed(SOME, 5) - speed(SOME, 4))
    assert gain(replace(job, throughput=POOR), 1) <= 0  # one more replica adds nothing
    assert gain(replace(job, throughput=POOR), 2) < 0  # and more slow it down
    assert gain(replace(job, throughput=GOOD), 8) == 0.0  # at its max_replicas: nothing to add


def test_cap_stops_at_the_peak_and_where_the_rival_makes_more_of_a_gpu() -> None:
    job = replace(Job("p", "j", 1, 16), throughput=SOME)
    assert cap(job, 1, 15, rival=0.0) == 6  # 1 -> 7, its peak
    assert cap(job, 7, 9, rival=0.0) == 0
    assert cap(job, 1, 15, rival=0.6) == 2  # 1 -> 3: each step adds at least 0.6 of a replica (not 3 -> 4)
    assert cap(replace(job, throughput=None), 1, 15, rival=0.9) == 15  # reports nothing: today's rule


def _two_jobs(config: Config, old: Throughput | None, new: Throughput | None) -> Cluster:
    c = Cluster(nodes(1, gpus=8), config=config).project("p", 8)
    c.submit("p", "old", min=1, max=1).cycle()
    c.submit("p", "new", min=1, max=1).cycle()  # both run one replica now
    c.state = replace(
        c.state,
        jobs=tuple(
            replace(j, max_replicas=8, throughput=old if j.name == "old" else new) for j in c.state.jobs
        ),
    )
    return c


def test_a_projects_share_goes_first_to_the_job_that_makes_the_most_of_a_gpu() -> None:
    c = _two_jobs(Config(settle_seconds=0), old=POOR, new=GOOD)
    plan = c.cycle()
    assert c.decisions(plan) == [("grow", "p", "new", [1, 2, 3, 4, 5, 6])]
    assert len(c.job("p", "old").active) == 1  # at its peak: one more replica would slow it down
    (note,) = [n for n in plan.notes if n.job == "old"]
    assert "it runs fastest at 1 (from the speeds it reported" in note.reason  # R13 says why


def test_without_goodput_the_oldest_job_grows_first_as_before() -> None:
    c = _two_jobs(Config(settle_seconds=0, goodput=False), old=POOR, new=GOOD)
    plan = c.cycle()
    assert c.decisions(plan) == [("grow", "p", "old", [1, 2, 3, 4, 5, 6])]


def test_jobs_that_report_nothing_keep_todays_rule() -> None:
    c = _two_jobs(Config(settle_seconds=0), old=None, new=None)
    plan = c.cycle()
    assert c.decisions(plan) == [("grow", "p", "old", [1, 2, 3, 4, 5, 6])]


def test_share_is_split_where_the_next_job_makes_more_of_a_gpu() -> None:
    c = _two_jobs(Config(settle_seconds=0), old=SOME, new=Throughput(1.0, 0.1))
    plan = c.cycle()
    # old grows 1 -> 3 while a replica adds more than new's next one (0.67 of a replica), new 1 -> 3 (its
    # peak), and the two GPUs still idle go to old (work conservation, R4): 3 -> 5, below its peak of 7
    assert c.decisions(plan) == [("grow", "p", "old", [1, 2, 3, 4]), ("grow", "p", "new", [1, 2])]
    assert c.cycle().decisions == ()


def test_idle_gpus_beyond_fair_shares_go_to_the_job_that_makes_the_most_of_them() -> None:
    # three projects of 4 GPUs on one 12-GPU node; c's job is at its peak, so 3 GPUs are idle beyond
    # the fair shares; a's job (older project) scales less than b's
    c = Cluster(nodes(1, gpus=12), config=Config(settle_seconds=0))
    c.project("a", 4).project("b", 4).project("c", 4)
    c.submit("a", "a1", min=4, max=12).submit("b", "b1", min=4, max=12).submit("c", "c1", min=1, max=12)
    c.state = replace(
        c.state,
        jobs=tuple(
            replace(j, max_replicas=j.min_replicas, throughput={"a": SOME, "b": GOOD, "c": POOR}[j.project])
            for j in c.state.jobs
        ),
    )
    c.cycle()  # all start at their minimum
    c.state = replace(c.state, jobs=tuple(replace(j, max_replicas=12) for j in c.state.jobs))
    plan = c.cycle()
    assert c.decisions(plan) == [("grow", "b", "b1", [4, 5, 6])]
    assert len(c.job("c", "c1").active) == 1


def test_fair_shares_between_projects_are_not_goodputs_to_take() -> None:
    # a project below its guarantee reclaims from a borrower however well the borrower scales
    c = Cluster(nodes(2, gpus=4), config=Config(settle_seconds=0)).project("a", 4).project("b", 4)
    c.submit("a", "big", min=1, max=8).cycle()
    c.state = replace(c.state, jobs=tuple(replace(j, throughput=GOOD) for j in c.state.jobs))
    assert c.alloc("a") == 8
    c.submit("b", "small", min=4, max=4)
    c.run(2)
    assert c.alloc("b") == 4 and c.alloc("a") == 4


def test_the_model_travels_in_the_snapshot_and_the_plan_is_pure() -> None:
    job = replace(
        Job("p", "j", 1, 8, replicas=(Replica(0, "n", 1),)),
        throughput=fit(_rates(SOME, [1, 2])),
    )
    assert job.throughput is not None and job.throughput.sync > 0


def test_a_job_whose_next_allowed_size_is_past_its_peak_stays_and_that_is_no_idle_gpu_wasted() -> None:
    """Found by the allowed-sizes property test: a job allowed 2 or 4 replicas, fastest at 3, runs 2 with
    GPUs idle. Growing to 4 would pass its peak (R19), so it stays at 2, and the work-conservation invariant
    (checked by every ``cycle()``) must not count that as GPUs left idle."""
    model = Throughput(compute=2.0, sync=0.2)
    assert peak(model) == 3
    c = Cluster(nodes(1, gpus=4), config=Config(settle_seconds=0)).project("p", 4)
    c.submit("p", "j", min=2, max=4, allowed_replicas=(2, 4)).cycle()
    c.state = replace(
        c.state, jobs=tuple(replace(j, throughput=model, replicas=j.replicas[:2]) for j in c.state.jobs)
    )
    assert len(c.job("p", "j").active) == 2
    plan = c.cycle()
    assert c.decisions(plan) == [] and len(c.job("p", "j").active) == 2
