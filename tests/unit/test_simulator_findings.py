"""Regression tests for core problems the simulator found (fixed in the core by 315bdb7).

Details: docs/simulator.md, "Problems found in the core".
"""

from __future__ import annotations

from scheduler.core import Action, ClusterState, Config, Job, Node, Project, Replica, plan_cycle
from scheduler.simulator import SimulationSettings, run_simulation
from scheduler.simulator.trace import SyntheticSpec


def test_fragmented_idle_gpus_do_not_block_the_guarantee() -> None:
    """a (16 deserved) runs 1 of 2 8-GPU replicas; b (8 deserved) holds 8 one-GPU jobs spread 6 + 2 over
    two nodes, leaving 2 + 6 idle. a is below min(deserved, demand) = 16, b is at its fair share (8), so no
    reclaim is allowed, and the idle GPUs never form a node: a waits until b's jobs end (hours in Philly)."""
    nodes = tuple(Node(f"n{i}", 8) for i in range(3))
    grow = Job("a", "grow", 1, 2, gpus_per_replica=8, replicas=(Replica(0, "n0", 8),), last_resized_at=0.0)
    small = tuple(
        Job("b", f"b{i}", 1, 1, replicas=(Replica(0, "n1" if i < 6 else "n2", 1),), last_resized_at=0.0)
        for i in range(8)
    )
    state = ClusterState(nodes, (Project("a", 16), Project("b", 8)), (grow, *small))
    plan = plan_cycle(state, Config(), now=1000.0)
    grows = [d for d in plan.decisions if d.project == "a" and d.action == Action.GROW]
    assert grows or plan.reservations, "a is below its guarantee and gets no action at all"


def test_interactive_jobs_do_not_make_training_jobs_churn() -> None:
    """Static partitioning, 5 % interactive jobs: every cycle team0 evicts two training jobs 'for' two
    interactive jobs, which do not start; the GPUs go to two other training jobs, and the next cycle swaps
    them back. No job that was (re)started is ever released before its restart finished."""
    workload = SyntheticSpec(jobs=120, arrivals_per_hour=240, teams=3, median_duration=1200)
    report = run_simulation(SimulationSettings(gpus=16, synthetic=workload, seed=7, policies=("static",)))
    (static,) = report.summaries
    assert static.churn == 0
    assert static.borrowed_gpu_h == 0  # borrowing off: nobody above its quota, even for one cycle
