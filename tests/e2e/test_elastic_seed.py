"""The seed scenario with real torchrun training through a real Tide service, as ``make demo`` runs it.

``deploy/examples/demo.py`` starts ``tide serve`` (local executor, 4 virtual GPUs), runs a's elastic
``torchrun train_elastic.py`` job (min 2, max 4), lets b claim 2 GPUs, and records what the REST API and the
training log showed. What a user is promised: the decisions come in order (a starts at 4, shrinks its two
highest-index workers for b, grows back when b is done, completes), the master replica keeps its node and
GPU throughout, training never repeats or loses a step across the resizes (each is graceful), the loss
falls, and both jobs succeed without a single failure restart.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "deploy" / "examples" / "demo.py"
STEPS = 150
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def run_demo(out: Path) -> dict[str, Any]:
    observed = out / "observed.json"
    argv = [sys.executable, str(DEMO), "--out", str(out), "--steps", str(STEPS), "--step-time", "0.05",
            "--b-seconds", "5", "--timeout", "420", "--json", str(observed)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=540, check=False)
    assert done.returncode == 0, f"demo failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
    seen: dict[str, Any] = json.loads(observed.read_text())
    return seen


def test_seed_scenario_with_real_torchrun_training(tmp_path: Path) -> None:
    seen = run_demo(tmp_path)
    decisions = [(e["project"], e["kind"], sorted(e["replicas"])) for e in seen["events"]]
    assert decisions == [
        ("a", "start", [0, 1, 2, 3]),
        ("a", "shrink", [2, 3]),
        ("b", "start", [0, 1]),
        ("b", "finish", []),
        ("a", "grow", [2, 3]),
        ("a", "finish", []),
    ], seen["events"]
    assert seen["final"] == {"a": "succeeded", "b": "succeeded"}

    masters = [s["master"] for s in seen["samples"] if s["status"].get("a") == "running"]
    assert masters and all(m is not None for m in masters), "the master replica left the job"
    launched = [i for i, m in enumerate(masters) if m["gpu_ids"]]  # GPUs are assigned at the first launch
    assert launched, "the master never got its GPU"
    held = {(m["node"], tuple(m["gpu_ids"] or ())) for m in masters[launched[0] :]}
    assert held == {("node-0", (0,))}, "the master's GPU changed or was released during a resize"

    steps = [int(line["step"]) for line in seen["steps"]]
    assert steps == list(range(1, STEPS + 1)), "a step was repeated or lost across a resize"
    sizes = [int(line["world_size"]) for line in seen["steps"]]
    assert [n for i, n in enumerate(sizes) if i == 0 or n != sizes[i - 1]] == [4, 2, 4]
    losses = [float(line["loss"]) for line in seen["steps"]]
    assert sum(losses[-10:]) < sum(losses[:10]) / 3, "the loss did not fall"
    assert Path(seen["chart"]).is_file()
