"""The simulator as an admin meets it: hand-computed replays, determinism, invariants at every cycle.

Hand-computed cases run on one 8-GPU node with projects a and b (4 GPUs deserved each), a 10 s cycle,
30 s restart cost and a 60 s checkpoint interval, through the real ``plan_cycle``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.core import Config, Node, Project
from scheduler.simulator.cli import build_parser, settings_from
from scheduler.simulator.metrics import ProjectSample, Recorder
from scheduler.simulator.replay import InvariantViolation, RunResult, SimOptions, Simulator
from scheduler.simulator.report import summarize
from scheduler.simulator.runner import describe, policy_config, policy_label
from scheduler.simulator.workload import JobSpec, load_quota_file, scale_quotas

NODE = (Node("n0", 8),)
TEAMS = (Project("a", 4), Project("b", 4))
OPTS = SimOptions(checkpoint_seconds=60.0, efficiency=1.0, check_invariants=True)


def replay(specs: list[JobSpec], config: Config, opts: SimOptions = OPTS) -> RunResult:
    return Simulator(NODE, TEAMS, specs, config, opts).run()


def times(result: RunResult) -> dict[str, tuple[float | None, float | None]]:
    return {r.spec.name: (r.first_start, r.finished_at) for r in result.runs}


def rigid(project: str, name: str, submit: float, gpus: int, duration: float) -> JobSpec:
    per = 8 if gpus % 8 == 0 else 1
    return JobSpec(project, name, submit, duration * gpus, gpus, per, gpus // per, gpus // per)


def test_static_partitioning_queues_inside_the_quota() -> None:
    """Two 4-GPU jobs of a, 100 s each: a holds only its 4 GPUs, so the second waits for the first."""
    specs = [rigid("a", "j0", 0, 4, 100), rigid("a", "j1", 0, 4, 100)]
    result = replay(specs, Config(borrowing=False, elastic=False))
    assert times(result) == {"j0": (0.0, 100.0), "j1": (100.0, 200.0)}
    s = summarize("static", result)
    assert s.avg_jct_h == pytest.approx(150 / 3600)
    assert s.avg_queue_h == pytest.approx(50 / 3600)
    assert s.utilisation == pytest.approx(0.5)  # 4 of 8 GPUs for 200 s
    assert s.borrowed_gpu_h == 0


def test_borrowing_runs_both_at_once_and_lends_b_quota() -> None:
    specs = [rigid("a", "j0", 0, 4, 100), rigid("a", "j1", 0, 4, 100)]
    result = replay(specs, Config(elastic=False))
    assert times(result) == {"j0": (0.0, 100.0), "j1": (0.0, 100.0)}
    s = summarize("whole-job", result)
    assert s.utilisation == pytest.approx(1.0)
    assert s.borrowed_gpu_h == pytest.approx(4 * 100 / 3600)
    b = result.recorder.projects["b"]
    assert b.lent == pytest.approx(4 * 100)


def test_whole_job_eviction_loses_work_since_checkpoint_and_pays_restart() -> None:
    """a's 8-GPU job (1000 s) borrows b's quota; b's 4-GPU job arrives at 100 s.

    At 100 s the reclaim evicts a whole (checkpoint at 60 s: 40 s x 8 GPUs lost); b starts at the next cycle
    (110 s) and ends at 210 s; a restarts at 210 s, pays 30 s, and needs 1000 - 60 = 940 s more: 1180 s.
    """
    specs = [rigid("a", "j0", 0, 8, 1000), rigid("b", "j1", 100, 4, 100)]
    result = replay(specs, Config(elastic=False))
    assert times(result) == {"j0": (0.0, 1180.0), "j1": (110.0, 210.0)}
    c = result.counters
    assert (c.evictions, c.resizes) == (1, 0)
    assert c.eviction_loss == pytest.approx(40 * 8)
    assert c.restart_loss == pytest.approx(30 * 8)
    b = result.recorder.projects["b"]
    assert b.longest_below_running == pytest.approx(10.0)  # b runs one cycle later: R2 kept
    assert b.longest_below == 0.0  # the plan at 100 s held a's GPUs for b at once


def test_elastic_job_grows_into_idle_gpus_and_shrinks_instead_of_eviction() -> None:
    """a's elastic job (4 GPUs x 1000 s requested, 2..8 replicas) takes all 8 GPUs and runs twice as fast.

    At 100 s (800 GPU-s done) b's job arrives: a shrinks to 4 (restart 30 s; R2 does not wait for a's settle
    time), b runs 110-210 s. a settles for ten restarts after its shrink (R18: until 400 s), so it grows back
    to 8 only then, with 800 + 4 x 270 = 1880 done (restart 30 s), and needs 2120 / 8 = 265 s: done at 695 s.
    (Before R18 it grew back at 210 s and was done at 600 s.)
    """
    elastic = JobSpec("a", "j0", 0, 4000, 4, 1, 2, 8)
    result = replay([elastic, rigid("b", "j1", 100, 4, 100)], Config())
    assert times(result) == {"j0": (0.0, 695.0), "j1": (110.0, 210.0)}
    c = result.counters
    assert (c.evictions, c.resizes) == (0, 2)
    assert c.restart_loss == pytest.approx(4 * 30 + 8 * 30)


def test_speed_follows_the_efficiency_exponent() -> None:
    """Alone, 4 GPUs x 100 s of work on 8 GPUs: 400 / (4 x 2^0.5) s."""
    result = replay([JobSpec("a", "j0", 0, 400, 4, 1, 2, 8)], Config(), SimOptions(efficiency=0.5))
    assert times(result)["j0"][1] == pytest.approx(400 / (4 * 2**0.5))


def test_a_job_that_never_fits_is_reported_unfinished() -> None:
    """Static partitioning: an 8-GPU request in a 4-GPU quota never starts."""
    result = replay([rigid("a", "big", 0, 8, 100)], Config(borrowing=False, elastic=False))
    s = summarize("static", result)
    assert (s.jobs, s.finished) == (1, 0)


def test_invariants_are_checked_at_every_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[float] = []

    def broken(state: object, plan: object, config: object, *, now: float) -> list[str]:
        calls.append(now)
        return ["node n0 holds 9 GPUs of 8"] if now >= 100 else []

    monkeypatch.setattr("scheduler.simulator.replay.check_invariants", broken)
    specs = [rigid("a", "j0", 0, 8, 1000), rigid("b", "j1", 100, 4, 100)]
    with pytest.raises(InvariantViolation, match="t=100s: node n0 holds 9"):
        replay(specs, Config(elastic=False))
    assert calls == [0, 10, 100]  # arrival, settle follow-up, arrival


def test_cycles_run_only_when_something_changed() -> None:
    """One job alone: a cycle at its arrival, the settle follow-up, one when R18's longer settle time ends (ten
    restarts of 30 s: a settling job is spared by reclaim until then), and one at its end; no ticking."""
    result = replay([rigid("a", "j0", 0, 4, 100_000)], Config(elastic=False))
    assert result.counters.cycles == 4
    assert result.end_time == pytest.approx(100_000)


def test_quota_scaling_and_yaml(tmp_path: Path) -> None:
    quotas = scale_quotas({"x": 64, "y": 32, "z": 8}, ["x", "y", "z", "x", "w"], 64)
    assert {p.name: p.deserved_gpus for p in quotas} == {"w": 1, "x": 39, "y": 19, "z": 5}
    path = tmp_path / "q.yaml"
    path.write_text("projects:\n  x: 16\n  y: {deserved_gpus: 8, over_quota_weight: 2, limit_gpus: 24}\n")
    loaded = load_quota_file(path)
    assert [(p.name, p.deserved_gpus, p.over_quota_weight, p.limit_gpus) for p in loaded] == [
        ("x", 16, 1.0, None),
        ("y", 8, 2.0, 24),
    ]


def test_r2_figure_is_how_long_owed_gpus_wait_not_how_long_a_project_stays_below() -> None:
    """Hand-computed: a stream of arrivals keeps a below its guarantee for 40 s, but each GPU it is owed
    arrives 10 s later (R2 kept); then 8 GPUs are owed from t=100 and the last arrive at t=300 (200 s)."""
    rec = Recorder.for_projects(16, {"a": 8})

    def seen(t: float, alloc: int, demand: int, *, starving: bool = True) -> None:
        rec.observe(t, {"a": ProjectSample(alloc, demand, 8, 8, starving)})

    for t, alloc in ((0, 0), (10, 1), (20, 2), (30, 3)):
        seen(t, alloc, alloc + 1)
    seen(40, 4, 4, starving=False)
    assert rec.projects["a"].longest_below == 10
    seen(100, 4, 8)
    seen(200, 6, 8)
    seen(300, 8, 8, starving=False)
    rec.close(400)
    assert rec.projects["a"].longest_below == 200
    assert rec.projects["a"].longest_below_running == 200  # nothing was held for it


def test_r2_figure_counts_gpus_held_for_the_project_and_the_running_figure_does_not() -> None:
    """Hand-computed: a runs 4 GPUs and is owed 4 more from t=0. At t=10 the plan holds 2 for it (not enough),
    at t=20 all 4 (its gang drains a node), and they run from t=100: counting what is held a waited 20 s, by
    running GPUs 100 s. The grace cycle follows the running figure (one episode)."""
    rec = Recorder.for_projects(16, {"a": 8})

    def seen(t: float, alloc: int, held: int, *, starving: bool, running: bool) -> None:
        rec.observe(t, {"a": ProjectSample(alloc, 8, 8, 8, starving, held, running)})

    assert rec.observe(0, {"a": ProjectSample(4, 8, 8, 8, True, 0, True)}) == ["a"]
    seen(10, 4, 2, starving=True, running=True)
    seen(20, 4, 4, starving=False, running=True)
    seen(100, 8, 0, starving=False, running=False)
    rec.close(200)
    a = rec.projects["a"]
    assert (a.longest_below, a.longest_below_running) == (20, 100)
    assert a.below_episodes == 1


def test_a_reclaim_evicts_the_job_that_loses_the_least_work_since_its_checkpoint() -> None:
    """R5's least-work-lost tie-break in the replay: a's two 4-GPU jobs borrow b's quota, one from 0 s, one
    from 50 s; b's 4-GPU job arrives at 100 s. The older job checkpointed at 60 s (loses 4 x 40 GPU-s), the
    newer one has not yet (loses 4 x 50): the older one goes. Off, the newest goes, as before, and loses more."""
    specs = [rigid("a", "early", 0, 4, 1000), rigid("a", "late", 50, 4, 1000), rigid("b", "j1", 100, 4, 100)]
    on = replay(specs, Config(elastic=False))
    assert on.counters.evictions == 1
    assert on.counters.eviction_loss == pytest.approx(4 * 40)
    assert times(on)["late"] == (50.0, 1050.0)  # never stopped
    off = replay(specs, Config(elastic=False, least_work_lost=False))
    assert off.counters.eviction_loss == pytest.approx(4 * 50)
    assert times(off)["early"] == (0.0, 1000.0)


def test_the_tie_break_can_be_turned_off_from_the_command_line() -> None:
    settings = settings_from(
        build_parser().parse_args(["--no-least-work-lost", "--checkpoint-seconds", "900"])
    )
    assert (settings.least_work_lost, settings.sim.checkpoint_seconds) == (False, 900.0)
    config = policy_config("tide", 10.0, least_work_lost=settings.least_work_lost)
    assert policy_label("tide", config) == "tide, newest first"
    assert "checkpoint every 900 s (eviction loses work since); equal victims: newest first" in " ".join(
        describe(settings, [], 0)
    )
    assert policy_label("tide", policy_config("tide", 10.0)) == "tide"
