"""When will my job start: the live snapshot run forward through plan_cycle, as users read the answer."""

from __future__ import annotations

from dataclasses import replace

import pytest
from corebuild import Cluster, nodes

from scheduler.core import ClusterState, Config, Job, Node, Project, Replica
from scheduler.core.estimate import Estimate, Estimator, Finished, Source, shape_of
from scheduler.core.forecast import Eta, Horizon, forecast, waiting

HOUR = 3600.0


def est(p50: float, p90: float | None = None, source: Source = Source.DECLARED) -> Estimate:
    return Estimate(p50, p90 if p90 is not None else p50, source)


def busy_cluster() -> Cluster:
    """4 GPUs, project a runs a 4-GPU job within its quota; b has no quota (nothing to reclaim for it)."""
    c = Cluster(nodes(1, gpus=4)).project("a", 4).project("b", 0)
    c.submit("a", "big", min=4)
    c.cycle()
    return c


def test_a_waiting_job_starts_when_the_running_job_is_expected_to_end() -> None:
    c = busy_cluster().submit("b", "next", min=2)
    left = {("a", "big"): est(HOUR, 2 * HOUR), ("b", "next"): est(HOUR)}
    eta = forecast(c.state, c.config, now=c.now, left=left)
    assert eta == {
        ("b", "next"): Eta(c.now + HOUR, c.now + 2 * HOUR, 2, False, ("a", "big"), Source.DECLARED)
    }


def test_jobs_in_line_start_one_after_another_and_the_band_widens() -> None:
    c = busy_cluster().submit("a", "second", min=4).submit("a", "third", min=4)
    left = {
        ("a", "big"): est(HOUR, 2 * HOUR),
        ("a", "second"): est(2 * HOUR, 3 * HOUR, Source.PROJECT),
        ("a", "third"): est(HOUR),
    }
    eta = forecast(c.state, c.config, now=c.now, left=left)
    second, third = eta[("a", "second")], eta[("a", "third")]
    assert (second.start_p50, second.start_p90) == (c.now + HOUR, c.now + 2 * HOUR)
    assert (third.start_p50, third.start_p90) == (c.now + 3 * HOUR, c.now + 5 * HOUR)
    assert (third.after, third.source) == (("a", "second"), Source.PROJECT)


def test_a_job_that_fits_now_starts_in_the_next_cycle_with_nothing_to_wait_for() -> None:
    c = Cluster(nodes(2, gpus=4)).project("a", 4)
    c.submit("a", "small", min=2, max=4)
    eta = forecast(c.state, c.config, now=50.0, left={})
    assert eta == {("a", "small"): Eta(50.0, 50.0, 4, False)}


def test_an_elastic_job_below_its_wanted_size_learns_when_it_grows() -> None:
    c = Cluster(nodes(1, gpus=4)).project("a", 2).project("b", 2)
    c.submit("a", "elastic", min=1, max=4).submit("b", "short", min=2)
    c.cycle()
    assert c.indices("a", "elastic") == [0, 1]
    left = {("a", "elastic"): est(10 * HOUR), ("b", "short"): est(HOUR, 1.5 * HOUR)}
    eta = forecast(c.state, c.config, now=c.now, left=left)
    assert eta == {
        ("a", "elastic"): Eta(c.now + HOUR, c.now + 1.5 * HOUR, 4, True, ("b", "short"), Source.DECLARED)
    }


def test_a_grown_job_finishes_sooner_and_so_frees_its_gpus_sooner() -> None:
    """b's elastic job grows from 2 to 4 GPUs when a's job ends: its 2 hours left at 2 GPUs become 1 at 4."""
    c = Cluster(nodes(1, gpus=4)).project("a", 2).project("b", 2)
    c.submit("a", "short", min=2).submit("b", "elastic", min=2, max=4)
    c.cycle()
    c.submit("b", "after", min=4)
    left = {("a", "short"): est(HOUR), ("b", "elastic"): est(3 * HOUR), ("b", "after"): est(HOUR)}
    eta = forecast(c.state, c.config, now=c.now, left=left, horizon=Horizon(cycle_seconds=1.0))
    assert eta[("b", "elastic")].start_p50 == c.now + HOUR
    after = eta[("b", "after")]
    assert after.start_p50 == c.now + 2 * HOUR and after.after == ("b", "elastic")


def test_an_evicted_job_keeps_its_work_when_it_restarts_elsewhere_in_the_forward_run() -> None:
    """b's guarantee evicts a's rigid borrower; a restarts when b's job ends and its hour left still counts."""
    c = Cluster(nodes(1, gpus=4)).project("a", 2).project("b", 2)
    c.submit("a", "borrow", min=4)
    c.cycle()
    c.submit("b", "owed", min=2).submit("a", "later", min=4)
    left = {("a", "borrow"): est(HOUR), ("b", "owed"): est(2 * HOUR), ("a", "later"): est(HOUR)}
    eta = forecast(c.state, c.config, now=c.now, left=left, horizon=Horizon(cycle_seconds=1.0))
    assert eta[("b", "owed")].start_p50 is not None and eta[("b", "owed")].start_p50 < c.now + 60
    restart = eta[("a", "later")].start_p50
    assert restart is not None and restart >= c.now + 3 * HOUR


def test_a_job_no_node_can_hold_never_gets_a_time() -> None:
    c = busy_cluster().submit("b", "huge", min=1, gpus=8)
    eta = forecast(c.state, c.config, now=c.now, left={("a", "big"): est(HOUR)})
    assert eta == {("b", "huge"): Eta(None, None, 1, False)}  # the size it waits for: its min_replicas


def test_the_horizon_bounds_the_forward_run() -> None:
    c = busy_cluster().submit("b", "next", min=2)
    left = {("a", "big"): est(HOUR, 30 * HOUR)}
    short = Horizon(seconds=10 * HOUR)
    eta = forecast(c.state, c.config, now=c.now, left=left, horizon=short)[("b", "next")]
    assert (eta.start_p50, eta.start_p90) == (c.now + HOUR, None)
    few = forecast(c.state, c.config, now=c.now, left=left, horizon=Horizon(cycles=1))
    assert few[("b", "next")].start_p50 is None


def test_a_job_expected_to_end_before_it_grows_gets_no_time() -> None:
    c = Cluster(nodes(1, gpus=4)).project("a", 2).project("b", 2)
    c.submit("a", "elastic", min=1, max=4).submit("b", "long", min=2)
    c.cycle()
    left = {("a", "elastic"): est(HOUR), ("b", "long"): est(5 * HOUR)}
    # no time; the size it would grow to is its max_replicas, never 0
    assert forecast(c.state, c.config, now=c.now, left=left) == {("a", "elastic"): Eta(None, None, 4, True)}


def test_a_job_just_resized_grows_into_idle_gpus_once_its_settle_time_ends() -> None:
    """R7: a starts at 2 of 1..4 beside b's 2-GPU job; b ends, and a, resized a moment ago, grows only once
    its settle time ran (60 s), not "never": nothing else ends for hours."""
    c = Cluster(nodes(1, gpus=4), config=Config(settle_seconds=60)).project("a", 2).project("b", 2)
    c.submit("a", "elastic", min=1, max=4).submit("b", "short", min=2)
    c.cycle()
    assert c.indices("a", "elastic") == [0, 1]
    c.state = replace(c.state, jobs=tuple(j for j in c.state.jobs if j.name != "short"))  # b's job ended
    left = {("a", "elastic"): est(10 * HOUR)}
    eta = forecast(c.state, c.config, now=c.now, left=left, horizon=Horizon(cycle_seconds=1.0))
    started = c.now - 1.0  # the cycle above, one second ago
    assert eta == {("a", "elastic"): Eta(started + 60, started + 60, 4, True)}


def test_only_the_targets_asked_for_and_nothing_when_nobody_waits() -> None:
    c = busy_cluster().submit("b", "x", min=2).submit("b", "y", min=2)
    left = {("a", "big"): est(HOUR)}
    assert set(forecast(c.state, c.config, now=c.now, left=left, targets=[("b", "y")])) == {("b", "y")}
    assert forecast(busy_cluster().state, Config(), now=0.0, left=left) == {}


def test_replicas_already_stopping_are_gone_in_the_forward_run() -> None:
    """A replica told to stop still holds its GPU in the snapshot; the job behind it starts right away."""
    job = Job("a", "old", 1, 1, replicas=(Replica(0, "n", 1, releasing=True),))
    state = ClusterState((Node("n", 1),), (Project("a", 1),), (job, Job("a", "new", 1, 1)))
    eta = forecast(state, Config(settle_seconds=0), now=0.0, left={})
    assert eta[("a", "new")].start_p50 == 10.0
    assert waiting(job) and not waiting(replace(job, replicas=(Replica(0, "n", 1),)))


# --- estimates of the time left ---


def history(*runs: tuple[str, tuple[int, int, int], float]) -> Estimator:
    e = Estimator(recent=5, min_samples=2, default_seconds=HOUR)
    for project, shape, seconds in runs:
        e.add(Finished(project, shape, seconds))
    return e


JOB = Job("a", "j", 1, 2, gpus_per_replica=4)


def test_a_declared_duration_wins_until_the_job_outlives_it() -> None:
    e = history()
    assert e.remaining(JOB, 600.0, declared=HOUR) == Estimate(HOUR - 600, 1.25 * HOUR - 600, Source.DECLARED)
    assert e.remaining(JOB, 2 * HOUR, declared=HOUR).source == Source.DEFAULT


def test_the_projects_own_jobs_of_the_same_shape_come_first() -> None:
    shape = shape_of(JOB)
    e = history(("a", shape, 100.0), ("a", shape, 200.0), ("a", shape, 300.0), ("b", shape, 5000.0))
    assert e.remaining(JOB, 0.0) == Estimate(200.0, 200.0, Source.PROJECT)
    assert e.remaining(JOB, 150.0) == Estimate(50.0, 50.0, Source.PROJECT)  # of 200 and 300, what is left


def test_the_cluster_answers_when_the_project_has_too_few_jobs_like_it() -> None:
    shape, other = shape_of(JOB), (1, 1, 1)
    e = history(("b", shape, 100.0), ("c", shape, 300.0), ("a", shape, 900.0))
    assert e.remaining(JOB, 0.0) == Estimate(300.0, 300.0, Source.CLUSTER)
    e = history(("b", other, 100.0), ("c", other, 500.0))
    assert e.remaining(JOB, 0.0) == Estimate(100.0, 100.0, Source.CLUSTER)


def test_a_job_older_than_all_its_history_is_expected_to_run_as_long_again() -> None:
    shape = shape_of(JOB)
    e = history(("a", shape, 100.0), ("a", shape, 200.0))
    assert e.remaining(JOB, 5 * HOUR) == Estimate(5 * HOUR, 20 * HOUR, Source.DEFAULT)
    assert history().remaining(JOB, 0.0) == Estimate(HOUR, 4 * HOUR, Source.DEFAULT)


def test_only_the_recent_jobs_count() -> None:
    shape = shape_of(JOB)
    e = history(*[("a", shape, 10_000.0)] * 5, *[("a", shape, 60.0)] * 5)
    assert e.remaining(JOB, 0.0) == Estimate(60.0, 60.0, Source.PROJECT)


def test_far_ahead_cycles_thin_out_so_a_long_queue_still_gets_times() -> None:
    """300 one-minute jobs queue for one GPU: the last starts about 5 hours ahead. One cycle per end would
    take 600 cycles; with cycles at least 2 % of the time ahead apart it takes fewer than 400, and the times
    are late by at most that 2 %."""
    c = Cluster(nodes(1)).project("a", 1)
    for i in range(300):
        c.submit("a", f"j{i:03d}")
    c.cycle()
    left = {j.key: est(60.0) for j in c.state.jobs}
    eta = forecast(c.state, c.config, now=c.now, left=left, targets=[("a", "j299")])[("a", "j299")]
    truth = c.now + 299 * 60.0
    assert eta.start_p50 is not None and truth <= eta.start_p50 <= truth + 0.02 * 299 * 60 + 10
    exact = Horizon(step=0.0, cycles=1000)
    assert forecast(c.state, c.config, now=c.now, left=left, targets=[("a", "j299")], horizon=exact)[
        ("a", "j299")
    ].start_p50 == pytest.approx(truth, abs=300 * 10)
