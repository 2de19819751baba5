"""``tide`` with GPU fractions (R20): ``--gpu-fraction`` on ``tide submit-dist pytorch`` and ``tide submit -f``,
exit 2 with what to fix for a bad share, and ``tide list``/``describe`` showing 0.5 GPUs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import Result
from servicekit import wait_for
from test_cli_commands import cli_bridge
from typer.testing import CliRunner

from api.client.cli.main import app
from api.server.testing import ASGIBridge

runner = CliRunner()


def tide(*args: str) -> Result:
    return runner.invoke(app, list(args))


@pytest.fixture
def bridge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ASGIBridge]:
    monkeypatch.setenv("COLUMNS", "120")
    with cli_bridge(tmp_path, monkeypatch, gpus_per_node=2) as bridge:
        yield bridge


@pytest.mark.usefixtures("bridge")
def test_half_gpu_jobs_submit_list_and_describe_as_half_a_gpu() -> None:
    assert tide("project", "create", "team-a", "--deserved", "2").exit_code == 0
    for name in ("nb1", "nb2"):
        submitted = tide(
            "submit-dist", "pytorch", "--name", name, "-p", "team-a", "--gpu-fraction", "0.5", "--interactive",
            "--", "sleep", "60",
        )  # fmt: skip
        assert submitted.exit_code == 0, submitted.output
        assert f"Submitted job {name} to project team-a: 1..1 replicas of 0.5 of a GPU" in submitted.output
    wait_for(lambda: tide("list").output.count(" running ") == 2, what="both halves to run")
    rows = [line.split() for line in tide("list").output.splitlines()[1:]]
    assert [(r[1], r[4]) for r in rows] == [("nb1", "0.5"), ("nb2", "0.5")]  # NAME, GPUS
    as_json = json.loads(tide("list", "--json").output)
    assert [j["gpu_fraction"] for j in as_json] == [0.5, 0.5]
    wait_for(lambda: "device" in tide("describe", "job", "nb2").output, what="nb2's device")
    described = tide("describe", "job", "nb2").output
    assert "0.5 of a GPU each, 0.5 GPU(s) allocated" in described
    assert "replica 0 on node-0 (shared GPU 0, device 0)" in described
    assert "TIDE_GPU_FRACTION=0.5" in described


@pytest.mark.usefixtures("bridge")
@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--gpu-fraction", "0"], "--gpu-fraction 0: give a share of one GPU from 0.05 to 0.95"),
        (["--gpu-fraction", "1"], "--gpu-fraction 1: give a share of one GPU from 0.05 to 0.95"),
        (["--gpu-fraction", "-0.5"], "--gpu-fraction -0.5: give a share"),
        (["--gpu-fraction", "0.5", "-g", "2"], "not both"),
        (["--gpu-fraction", "0.5", "--workers", "1", "--min-replicas", "1"], "not elastic"),
    ],
)
def test_bad_shares_exit_2_saying_what_to_fix(flags: list[str], words: str) -> None:
    assert tide("project", "create", "team-a", "--deserved", "1").exit_code == 0
    result = tide("submit-dist", "pytorch", "--name", "nb", "-p", "team-a", *flags, "--", "sleep", "60")
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert "Traceback" not in result.output


MANIFEST = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: infer}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              command: [sleep, "60"]
"""


@pytest.mark.usefixtures("bridge")
def test_a_manifest_submitted_with_a_gpu_fraction(tmp_path: Path) -> None:
    assert tide("project", "create", "team-a", "--deserved", "1").exit_code == 0
    (tmp_path / "job.yaml").write_text(MANIFEST)
    result = tide("submit", "-f", str(tmp_path / "job.yaml"), "-p", "team-a", "--gpu-fraction", "0.25")
    assert result.exit_code == 0, result.output
    assert "replicas of 0.25 of a GPU" in result.output
    bad = tide("submit", "-f", str(tmp_path / "job.yaml"), "-p", "team-a", "--gpu-fraction", "0.99")
    assert bad.exit_code == 2 and "from 0.05 to 0.95" in bad.output
