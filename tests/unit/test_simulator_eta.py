"""The forecast's accuracy as the simulator measures it: an ETA given at each sampled submission, compared with
the start that happened."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from scheduler.core import Config, Node, Project
from scheduler.simulator.cli import main
from scheduler.simulator.eta import EtaSimulator, accuracy, accuracy_of, eta_table, samples_from_log
from scheduler.simulator.replay import SimOptions
from scheduler.simulator.runner import SimulationSettings, run_simulation
from scheduler.simulator.trace import SyntheticSpec
from scheduler.simulator.workload import JobSpec

_spec = importlib.util.spec_from_file_location("bench_eta", Path(__file__).parents[2] / "bench" / "eta.py")
assert _spec is not None and _spec.loader is not None
bench_eta = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_eta)


def _queue(count: int) -> list[JobSpec]:
    """4-GPU rigid jobs of 1,000 s on a 4-GPU cluster, one submitted every second: each waits for the last."""
    return [JobSpec("a", f"j{i}", float(i), 4000.0, 4, 1, 4, 4) for i in range(count)]


def _replay(declared: bool, every: int = 1) -> EtaSimulator:
    sim = EtaSimulator(
        (Node("n", 4),), (Project("a", 4),), _queue(4), Config(), SimOptions(), every=every, declared=declared
    )
    sim.run()
    return sim


def test_with_declared_durations_every_job_learns_its_start_to_the_cycle() -> None:
    sim = _replay(declared=True)
    starts = {r.spec.key: r.first_start for r in sim.runs.values()}
    assert [starts[s.key] for s in sim.samples] == [0.0, 1000.0, 2000.0, 3000.0]
    assert [s.start_p50 for s in sim.samples] == [
        0.0,
        1001.0,
        2002.0,
        3003.0,
    ]  # the forecast's grid: from now
    assert [s.start_p90 for s in sim.samples] == [0.0, 1251.0, 2502.0, 3753.0]  # declared + 25 %
    rows = accuracy(sim.samples, tuple(sim.runs.values()), 10.0)
    assert [(r.jobs, r.no_eta, r.within_band, r.by_p50) for r in rows] == [
        (4, 0, 100.0, 100.0),
        (3, 0, 100.0, 100.0),
    ]
    assert rows[0].median_error_h < 0.001
    assert "| waited > 60 s | 3 | 0 | 0.00 | 0.00 | 100.0 | 100.0 |" in eta_table(rows)


def test_without_declarations_the_first_jobs_have_only_a_default_to_go_on() -> None:
    sim = _replay(declared=False, every=2)
    assert [s.key[1] for s in sim.samples] == ["j1", "j3"]
    assert [s.source for s in sim.samples] == ["default", "default"]  # nothing had finished yet
    assert sim.samples[0].start_p50 == 3601.0  # the default hour, against 1,000 s in truth


def test_no_eta_sampling_below_one_and_a_clear_cli_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="every 1 or more"):
        EtaSimulator((Node("n", 1),), (Project("a", 1),), [], Config(), every=0)
    with pytest.raises(SystemExit) as info:
        main(["--eta-every", "-1"])
    assert (
        info.value.code == 2 and "--eta-every: give 0 (off) or a positive number" in capsys.readouterr().err
    )


def test_the_runner_measures_each_policy_when_asked() -> None:
    settings = SimulationSettings(
        synthetic=SyntheticSpec(jobs=40, arrivals_per_hour=200), gpus=8, policies=("tide",), eta_every=5
    )
    report = run_simulation(settings)
    assert len(report.eta) == 1 and report.eta[0][0].jobs == 8


def test_the_command_prints_the_accuracy_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "--jobs",
        "20",
        "--arrivals-per-hour",
        "200",
        "--gpus",
        "8",
        "--policies",
        "tide",
        "--eta-every",
        "4",
    ]
    assert main([*argv, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "start-time forecast (tide), ETA given at submission" in out and "| all sampled jobs | 5 |" in out


def test_the_log_gives_back_the_same_figures_and_bench_prints_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "eta.jsonl"
    with path.open("w") as log:
        sim = EtaSimulator(
            (Node("n", 4),),
            (Project("a", 4),),
            _queue(4),
            Config(),
            SimOptions(),
            every=1,
            declared=True,
            log=log,
        )
        sim.run()
    samples, starts, cpu = samples_from_log(path.read_text().splitlines())
    assert samples == sim.samples and len(cpu) == 4
    assert accuracy_of(samples, starts, 10.0) == accuracy(sim.samples, tuple(sim.runs.values()), 10.0)
    assert bench_eta.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "4 ETAs given up to virtual day 0.0, 4 of those jobs started" in out
        and "| waited > 60 s | 3 |" in out
    )
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert bench_eta.main([str(empty)]) == 1
