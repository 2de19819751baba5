"""``tide simulate`` runs the simulator through the CLI and writes its report."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from api.client.cli.main import app


def test_simulate_synthetic_workload_writes_a_report(tmp_path: Path) -> None:
    args = ["simulate", "--jobs", "30", "--no-progress", "--gpus", "16", "--out", str(tmp_path / "r")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = (tmp_path / "r" / "report.md").read_text()
    assert "tide" in report and "static" in report and "whole-job" in report


def test_simulate_help_lists_the_simulator_options() -> None:
    result = CliRunner().invoke(app, ["simulate", "--help"])
    assert result.exit_code == 0 and "--pollux-slice" in result.output


def test_simulate_an_unknown_trace_says_what_to_give() -> None:
    result = CliRunner().invoke(app, ["simulate", "--trace", "no-such-trace.csv", "--no-progress"])
    assert result.exit_code == 2
    assert "'no-such-trace.csv' is neither a file nor a bundled trace" in result.output
