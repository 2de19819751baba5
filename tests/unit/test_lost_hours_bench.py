"""``bench/lost_hours.py``: a replay's lost GPU-hours booked to the decisions that caused them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from test_core_resize_cost import _whole_node_claim

from scheduler.core import Action, Cause, Decision

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import lost_hours  # noqa: E402


def _decision(action: Action, cause: Cause, reason: str) -> Decision:
    return Decision(action, "b", "j", (), reason, cause)


def test_a_reclaim_that_frees_a_whole_node_is_booked_apart_from_the_rest_of_reclaim() -> None:
    """The reason the core gives a unit taken to free a node marks node-targeted reclaim (decision 64's);
    other reclaims, consolidation and growth keep their causes."""
    plan = _whole_node_claim(cost=30.0).cycle()  # frees one whole node for an 8-GPU replica
    reason = next(d.reason for d in plan.decisions if d.project == "b")
    assert lost_hours.NODE_TARGETED in reason
    assert lost_hours._cause(_decision(Action.EVICT, Cause.RECLAIM, reason)) == "reclaim, node-targeted"
    plain = "reclaimed for a/one: project b holds 16 GPUs, above its fair share of 8"
    assert lost_hours._cause(_decision(Action.EVICT, Cause.RECLAIM, plain)) == "reclaim"
    assert lost_hours._cause(_decision(Action.SHRINK, Cause.CONSOLIDATE, "moved off n1")) == "consolidate"
    grown = "grew by 2 replicas into idle GPUs"
    assert lost_hours._cause(_decision(Action.GROW, Cause.FAIR_SHARE, grown)) == "into idle GPUs"


def test_on_a_slice_the_booked_gpu_hours_are_the_reports_lost_gpu_hours() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "lost_hours.py"), "--trace", "philly", "--vc-sizes", "philly",
         "--gpus", "64", "--max-jobs", "300", "--restart-seconds", "30", "--no-progress", "--json"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    report = json.loads(out.stdout)
    assert report["lost_gpu_h"] > 0
    assert abs(report["booked_gpu_h"] - report["lost_gpu_h"]) < 1e-6
    by_cause = sum(v["lost_gpu_h"] for v in report["by_cause"].values())
    assert abs(by_cause - report["lost_gpu_h"]) < 1e-6
    # regrowth (growth right after a shrink by reclaim) is part of growth, its shrinks part of those by reclaim
    growth = report["growth"].values()
    assert 0 < report["regrowth"]["decisions"] <= sum(v["decisions"] for v in growth)
    assert report["regrowth"]["lost_gpu_h"] <= sum(v["lost_gpu_h"] for v in growth) + 1e-9
    shrinks = sum(v["lost_gpu_h"] for k, v in report["by_cause"].items() if k.startswith("shrink by reclaim"))
    assert report["regrowth"]["shrinks_before_gpu_h"] <= shrinks + 1e-9
