"""Fair share over time (R14) in the simulator: usage accrues between events, the report measures fairness
of over-quota GPU-hours per day, and skipping unchanged cycles stays exact with usage drifting."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core import Config, Node, Project
from scheduler.simulator import SimulationSettings, main, run_simulation
from scheduler.simulator.metrics import DAY, ProjectSample, Recorder
from scheduler.simulator.replay import SimOptions, Simulator
from scheduler.simulator.trace import SyntheticSpec
from scheduler.simulator.workload import JobSpec

NODES = tuple(Node(f"n{i}", 1) for i in range(8))
TEAMS = (Project("a", 2), Project("b", 2))
HALF_LIFE = 3600.0


def elastic(project: str, name: str, submit: float, hours: float) -> JobSpec:
    return JobSpec(project, name, submit, hours * 3600 * 8, 1, 1, 1, 8)


def test_a_team_that_borrowed_first_gets_less_when_the_other_comes_back() -> None:
    """a runs alone for two hours on all 8 GPUs; when b arrives, R14 gives b more than half of the 4 GPUs
    beyond the quotas (without it they split them equally), so b borrows more GPU-hours and finishes
    sooner."""
    specs = [elastic("a", "sweep", 0.0, 10.0), elastic("b", "train", 7200.0, 10.0)]
    opts = SimOptions(check_invariants=True)
    borrowed, finished = {}, {}
    for half_life in (0.0, HALF_LIFE):
        sim = Simulator(NODES, TEAMS, specs, Config(usage_half_life=half_life), opts)
        result = sim.run()
        borrowed[half_life] = {p: t.borrowed / 3600 for p, t in result.recorder.projects.items()}
        finished[half_life] = {r.spec.name: r.finished_at for r in result.runs}
        assert (sim.usage["a"] > 0) == (half_life > 0)
    assert borrowed[HALF_LIFE]["b"] > borrowed[0.0]["b"]
    assert finished[HALF_LIFE]["train"] < finished[0.0]["train"]


def test_over_quota_fairness_per_day_is_jains_index_of_gpu_hours_per_weight() -> None:
    rec = Recorder.for_projects(8, {"a": 2, "b": 2, "c": 2, "idle": 2}, {"a": 1.0, "b": 2.0, "c": 0.0})
    sample = {
        "a": ProjectSample(3, 8, 2, 3, False),  # 1 GPU above quota, weight 1
        "b": ProjectSample(4, 8, 2, 4, False),  # 2 GPUs above quota, weight 2: the same per weight
        "c": ProjectSample(1, 8, 2, 1, False),  # weight 0: left out
        "idle": ProjectSample(0, 0, 2, 0, False),  # wanted nothing beyond its quota: left out
    }
    rec.observe(0.0, sample)
    rec.observe(DAY, {**sample, "b": ProjectSample(2, 8, 2, 2, False)})  # day 1: b gets nothing over quota
    rec.close(2 * DAY)
    assert rec.daily_fairness() == pytest.approx((1.0 + 0.5) / 2)  # day 0 exact; day 1: x = (1, 0)
    assert rec.projects["a"].daily_borrowed == {0: DAY, 1: DAY}
    assert (
        Recorder.for_projects(8, {"a": 2}).daily_fairness()
        != Recorder.for_projects(8, {"a": 2}).daily_fairness()
    )


def test_skipping_unchanged_cycles_stays_exact_with_usage_drifting() -> None:
    busy = SyntheticSpec(jobs=120, arrivals_per_hour=240, teams=3, median_duration=1200)

    def run(skip: bool) -> tuple[object, int, int]:
        sim = SimOptions(check_invariants=True, skip_unchanged=skip)
        settings = SimulationSettings(
            synthetic=busy, gpus=16, sim=sim, policies=("tide",), usage_half_life=1800.0
        )
        report = run_simulation(settings)
        (summary,), (result,) = report.summaries, report.results
        return replace(summary, cycles=0), result.counters.cycles, result.counters.skipped_cycles

    skipped, every = run(True), run(False)
    assert skipped[0] == every[0]
    assert skipped[2] > 0 and every[2] == 0
    assert skipped[1] + skipped[2] == every[1]


def test_the_report_names_the_half_life_and_the_baselines_that_do_not_borrow_ignore_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--jobs", "40", "--gpus", "16", "--seed", "2", "--no-progress", "--usage-half-life", "7200"]
    assert main([*argv, "--policies", "tide,static"]) == 0
    out = capsys.readouterr().out
    assert "| tide, half-life 2 h |" in out and "| static |" in out


def test_a_negative_half_life_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--usage-half-life", "-5"])
    assert exit_info.value.code == 2
    assert "-5 is not a number of seconds >= 0" in capsys.readouterr().err
