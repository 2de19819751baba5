"""The Philly trace installed with the package: ``--trace philly --vc-sizes philly`` from any directory, a
path still works and wins over a name, anything else is a usage error that says what to give."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

from scheduler.simulator import main
from scheduler.simulator.bundled import DATA, UnknownTrace, trace_file, vc_sizes_file
from scheduler.simulator.trace import load_philly, load_vc_sizes

ROOT = Path(__file__).resolve().parents[2]


def test_the_bundled_philly_trace_and_team_sizes_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # not the repository: the name does not depend on the working directory
    jobs = load_philly(trace_file("philly"))
    sizes = load_vc_sizes(vc_sizes_file("philly"))
    assert len(jobs) == 82_247 and jobs[0].submit == 0
    assert len(sizes) == 11 and set(sizes) < {j.team for j in jobs}
    assert (DATA / "README.md").read_text().count("CC BY 4.0") >= 1


def test_a_path_works_as_before_and_wins_over_a_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    Path("philly").write_text("timestamp,duration,num_gpus,gpu_time,cluster\n")
    assert trace_file("philly") == Path("philly")
    assert vc_sizes_file(str(tmp_path / "philly")) == tmp_path / "philly"


@pytest.mark.parametrize("option", ["--trace", "--vc-sizes"])
def test_neither_a_file_nor_a_bundled_name_is_a_usage_error(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "philly.csv")
    with pytest.raises(SystemExit) as stop:
        main([option, missing, "--no-progress"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert missing in err and "give the path of a file or one of: philly" in err
    with pytest.raises(UnknownTrace):
        trace_file("phily")


def test_the_bundled_files_are_installed_with_the_package() -> None:
    """pyproject.toml's package data matches every file of the data folder (a wheel ships them)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["scheduler.simulator"]
    files = [p.relative_to(DATA.parent).as_posix() for p in DATA.rglob("*") if p.is_file()]
    top = sorted(f for f in files if f.count("/") == 1)
    assert top == ["data/README.md", "data/philly.csv", "data/philly_vc.csv"]
    pollux = [f for f in files if f.startswith("data/pollux/")]
    assert "data/pollux/README.md" in pollux and sum("/workloads/" in f for f in pollux) == 8
    assert len(top) + len(pollux) == len(files)
    assert all(any(fnmatch.fnmatch(f, pat) for pat in patterns) for f in files)
