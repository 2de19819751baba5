"""Whole simulations: trace files, determinism, invariants under every policy, the Pollux slice, the CLI."""

from __future__ import annotations

import random
import time
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.simulator import SimulationSettings, main, run_simulation
from scheduler.simulator.bundled import trace_file, vc_sizes_file
from scheduler.simulator.replay import SimOptions
from scheduler.simulator.trace import SyntheticSpec, load_philly, pollux_slice, synthetic
from scheduler.simulator.workload import WorkloadOptions

CSV = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:00:10,600.0,8,4800.0,vc1
2017-10-09 07:00:00,1200.0,1,1200.0,vc2
2017-10-09 07:05:00,300.0,4,1200.0,vc1
2017-10-09 07:06:00,0.0,1,0.0,vc1
2017-10-09 07:10:00,900.0,2,1800.0,vc3
"""
SMALL = SyntheticSpec(jobs=120, arrivals_per_hour=90, teams=3, median_duration=1200)


def test_trace_is_sorted_renamed_and_starts_at_zero(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(CSV)
    jobs = load_philly(path)
    assert [(j.name, j.team, j.submit, j.gpus) for j in jobs] == [
        ("j00000", "vc2", 0.0, 1),
        ("j00001", "vc1", 10.0, 8),
        ("j00002", "vc1", 300.0, 4),
        ("j00003", "vc3", 600.0, 2),
    ]


def test_synthetic_generator_is_seeded() -> None:
    assert synthetic(SMALL, random.Random(3)) == synthetic(SMALL, random.Random(3))
    assert synthetic(SMALL, random.Random(3)) != synthetic(SMALL, random.Random(4))
    assert {j.team for j in synthetic(SMALL, random.Random(3))} == {"team0", "team1", "team2"}


def settings(**kw: object) -> SimulationSettings:
    """Without interactive jobs unless a test asks: with them the core preempts in a loop (reported)."""
    base = SimulationSettings(gpus=32, synthetic=SMALL, seed=7, workload=WorkloadOptions(interactive_share=0))
    return replace(base, **kw)  # type: ignore[arg-type]


def test_same_trace_and_seed_give_the_same_report(tmp_path: Path) -> None:
    first = run_simulation(settings(out_dir=tmp_path / "one"))
    second = run_simulation(settings(out_dir=tmp_path / "two"))
    text = (tmp_path / "one" / "report.md").read_text()
    assert text == (tmp_path / "two" / "report.md").read_text()
    assert first.summaries == second.summaries
    other = run_simulation(settings(seed=8))
    assert other.summaries != first.summaries
    assert {p.name for p in first.files} == {"report.md", "utilisation.png", "allocation.png", "jct.png"}


@pytest.mark.parametrize("policy", ["tide", "whole-job", "static"])
def test_every_policy_keeps_the_invariants_at_every_cycle(policy: str) -> None:
    """A contended synthetic workload; check_invariants runs after every simulated cycle and raises."""
    busy = replace(SMALL, arrivals_per_hour=240)
    sim = SimOptions(check_invariants=True)
    report = run_simulation(
        settings(synthetic=busy, gpus=16, sim=sim, policies=(policy,), workload=WorkloadOptions())
    )
    (summary,) = report.summaries
    assert summary.cycles > 0 and summary.finished == summary.jobs


def test_baselines_behave_as_their_switches_say() -> None:
    report = run_simulation(settings(synthetic=replace(SMALL, arrivals_per_hour=240), gpus=16))
    assert [s.policy for s in report.summaries] == ["tide", "whole-job", "static"]
    tide, whole, static = report.summaries
    assert static.borrowed_gpu_h == 0 and static.resizes == 0 and static.evictions == 0
    assert whole.resizes == 0 and whole.borrowed_gpu_h > 0
    assert tide.resizes > 0
    assert tide.utilisation >= static.utilisation


def test_trace_file_with_vc_sizes_and_yaml_quotas(tmp_path: Path) -> None:
    trace, vc, quotas = tmp_path / "t.csv", tmp_path / "vc.csv", tmp_path / "q.yaml"
    trace.write_text(CSV)
    vc.write_text("vc,node num\nvc1,2\nvc2,1\n")
    quotas.write_text("projects:\n  vc1: 8\n  vc2: 4\n  vc3: 4\n")
    by_vc = run_simulation(SimulationSettings(trace=trace, vc_sizes=vc, gpus=16, seed=1))
    assert by_vc.settings_text[1].endswith("quotas: other=4, vc1=8, vc2=4")
    assert all(s.finished == 4 for s in by_vc.summaries)
    by_yaml = run_simulation(SimulationSettings(trace=trace, quotas=quotas, gpus=16, seed=1))
    assert by_yaml.settings_text[1].endswith("quotas: vc1=8, vc2=4, vc3=4")


def test_cli_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--jobs", "40", "--gpus", "16", "--seed", "2", "--out", str(tmp_path), "--no-progress"]
    assert main([*argv, "--policies", "tide,static"]) == 0
    out = capsys.readouterr().out
    assert "| tide |" in out and "| static |" in out and "wrote" in out
    assert "## Comparison" in (tmp_path / "report.md").read_text()


@pytest.mark.slow
def test_pollux_slice_runs_in_seconds_and_tide_wins() -> None:
    """160 jobs from the busiest 8 hours of the bundled Philly trace on 64 GPUs, all three policies,
    invariants checked every cycle."""
    began = time.perf_counter()
    report = run_simulation(
        SimulationSettings(
            trace=trace_file("philly"),
            vc_sizes=vc_sizes_file("philly"),
            gpus=64,
            pollux_slice=True,
            sim=SimOptions(check_invariants=True),
            workload=WorkloadOptions(),
        )
    )
    assert time.perf_counter() - began < 60
    tide, whole, static = report.summaries
    assert tide.jobs == 160 and tide.finished == whole.finished == static.finished == 160
    assert tide.avg_jct_h < min(whole.avg_jct_h, static.avg_jct_h)
    assert tide.utilisation >= max(whole.utilisation, static.utilisation)


def test_pollux_slice_takes_the_busiest_window() -> None:
    jobs = synthetic(replace(SMALL, jobs=400), random.Random(1))
    picked = pollux_slice(jobs, random.Random(2), count=50, hours=2)
    assert len(picked) == 50 and picked[0].submit == 0
    assert max(j.submit for j in picked) < 2 * 3600


@pytest.mark.parametrize("policy", ["tide", "whole-job", "static"])
def test_skipping_unchanged_cycles_changes_nothing_but_the_cycle_count(policy: str) -> None:
    """A cycle whose input (jobs, settling jobs) is that of the last one, whose plan was empty, is skipped:
    every other figure of the report is the same as when every scheduled cycle runs."""
    busy = replace(SMALL, arrivals_per_hour=240)

    def run(skip: bool) -> tuple[object, int, int]:
        sim = SimOptions(check_invariants=True, skip_unchanged=skip)
        report = run_simulation(settings(synthetic=busy, gpus=16, sim=sim, policies=(policy,)))
        (summary,), (result,) = report.summaries, report.results
        return replace(summary, cycles=0), result.counters.cycles, result.counters.skipped_cycles

    skipped, every = run(True), run(False)
    assert skipped[0] == every[0]
    assert skipped[2] > 0 and every[2] == 0
    assert skipped[1] + skipped[2] == every[1]
