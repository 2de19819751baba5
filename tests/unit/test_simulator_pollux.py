"""The Pollux workloads through the simulator: the artifact's progress model and Tiresias baseline, and
``bench/pollux.py`` on a slice (the whole table is ``make bench``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.core import Config
from scheduler.simulator.pollux import (
    CLUSTER_PROJECT,
    GPUS_PER_NODE,
    NODES,
    ONE_PROJECT,
    POLICIES,
    WORKLOADS,
    Policy,
    PolluxFixedBatch,
    RemainingWorkOracle,
    SimJob,
    TidePolicy,
    Tiresias,
    load_app,
    load_workload,
    replay,
)

ROOT = Path(__file__).resolve().parents[2]


def test_the_tiresias_baseline_reproduces_the_pollux_simulators_own_figure() -> None:
    result = replay(load_workload(WORKLOADS / "workload-6.csv"), Tiresias())
    assert len(result.jct) == 160
    assert result.avg_jct == pytest.approx(3469.69, abs=0.01)  # the Pollux simulator's README


def test_micro_batches_follow_the_artifact() -> None:
    cifar = load_app("cifar10")
    assert (cifar.b0, cifar.bmax, cifar.lmin, cifar.lmax) == (128, 4096, 32, 1024)
    assert cifar.micro_batches(2048, 6) == (342, 0)
    assert cifar.micro_batches(2048, 1) == (1024, 1)  # one GPU above the smallest batch: accumulate
    assert load_app("yolov3").lmax == 8


def test_a_job_alone_stalls_30_s_then_runs_its_epochs_and_reports_its_speed() -> None:
    (row,) = [r for r in load_workload(WORKLOADS / "workload-6.csv") if r.app == "ncf"][:1]
    job = SimJob(row, load_app(row.app))
    job.reallocate((1,))
    job.advance(0, 30)
    assert job.progress == 0 and job.epoch == 0  # the restart charge
    t = 30
    while job.done is None:
        job.advance(t, 60)
        t += 60
    assert job.epoch == job.app.epochs and 30 < job.done <= t
    assert set(job.measured) == {1} and job.measured[1] > 0


def test_tide_keeps_every_job_running_to_completion_on_a_slice() -> None:
    rows = load_workload(WORKLOADS / "workload-6.csv", limit=20)
    for name in ("tide-goodput", "tide"):
        result = replay(rows, POLICIES[name]())
        assert len(result.jct) == 20 and all(v > 0 for v in result.jct.values())


def test_one_project_owns_the_cluster_and_a_new_job_waits_for_a_free_gpu() -> None:
    """``one-project``: every job is a job of one project that owns all 64 GPUs, so the first job takes what
    it can use and a later one starts only on GPUs left idle (no reclaim inside a project, decision 47);
    by default each job is a project of its own."""
    rows = [r for r in load_workload(WORKLOADS / "workload-6.csv") if r.app == "imagenet"][:2]
    jobs = [SimJob(r, load_app(r.app)) for r in rows]
    one = TidePolicy(Config(), mapping=ONE_PROJECT)
    first = one(jobs[:1], 60)
    assert one.jobs[rows[0].name].project == CLUSTER_PROJECT
    both = one(jobs, 120)
    assert both[rows[0].name] == first[rows[0].name]  # nothing taken from the first job
    assert len(both.get(rows[1].name, ())) == 64 - len(first[rows[0].name])
    split = TidePolicy(Config())
    split(jobs, 60)
    assert {j.project for j in split.jobs.values()} == {r.name for r in rows}
    with pytest.raises(ValueError, match="unknown mapping"):
        TidePolicy(Config(), mapping="teams")


def test_half_to_given_declares_each_job_elastic_between_half_and_its_given_size() -> None:
    """``min_factor``/``max_factor``: a 12-GPU job runs on 6 to 12 GPUs, a 1-GPU job on 1; by default 1 GPU
    to twice the given size (at most what the batch can be split over)."""
    rows = load_workload(WORKLOADS / "workload-6.csv")
    twelve = next(r for r in rows if r.replicas == 12)
    one = next(r for r in rows if r.replicas == 1)
    jobs = [SimJob(r, load_app(r.app)) for r in (twelve, one)]
    half = POLICIES["tide-goodput-cost-usage-half-to-given"]()
    assert isinstance(half, TidePolicy)
    out = half(jobs, max(twelve.submit, one.submit) + 60)
    declared = {n: (j.min_replicas, j.max_replicas) for n, j in half.jobs.items()}
    assert declared == {twelve.name: (6, 12), one.name: (1, 1)}
    assert len(out[twelve.name]) == 12 and len(out[one.name]) == 1
    default = TidePolicy(Config())
    default(jobs, max(twelve.submit, one.submit) + 60)
    assert default.jobs[twelve.name].min_replicas == 1 and default.jobs[twelve.name].max_replicas > 12


def _checked(policy: Policy) -> Policy:
    """``policy`` with every round's allocation checked: no node over 4 GPUs, a job spanning nodes alone on
    them, no job past what its batch can be split over."""

    def checked(jobs: Sequence[SimJob], now: int) -> Mapping[str, tuple[int, ...]]:
        out = policy(jobs, now)
        used = [0] * NODES
        spanning: dict[int, str] = {}
        for name, nodes in out.items():
            job = next(j for j in jobs if j.row.name == name)
            assert len(nodes) <= job.row.batch // job.app.lmin
            for n in nodes:
                used[n] += 1
            if len(set(nodes)) > 1:
                for n in set(nodes):
                    assert n not in spanning
                    spanning[n] = name
        assert max(used) <= GPUS_PER_NODE
        for n, name in spanning.items():
            assert all(n not in nodes for other, nodes in out.items() if other != name)
        return out

    return checked


@pytest.mark.parametrize("policy", [PolluxFixedBatch, RemainingWorkOracle])
def test_the_fixed_batch_references_fit_the_nodes_and_finish_every_job(
    policy: type[PolluxFixedBatch],
) -> None:
    rows = load_workload(WORKLOADS / "workload-6.csv", limit=30)

    def run() -> float:
        result = replay(rows, _checked(policy()))
        assert len(result.jct) == 30 and all(v > 0 for v in result.jct.values())
        return result.avg_jct

    assert run() == run()  # deterministic


def test_pollux_fixed_batch_gives_every_job_a_gpu_before_growing_one() -> None:
    """The power mean with p = -1 gives a job with no GPU an almost infinite penalty: with more jobs than
    GPUs every GPU goes to a different job, and a lone job grows to what speeds it up."""
    rows = [r for r in load_workload(WORKLOADS / "workload-6.csv") if r.app == "cifar10"][:1]
    alone = PolluxFixedBatch()([SimJob(r, load_app(r.app)) for r in rows], rows[0].submit + 60)
    assert len(alone[rows[0].name]) > rows[0].replicas  # cifar10 scales past its given 16 GPUs
    many = [SimJob(replace(rows[0], name=f"c{i}"), load_app("cifar10")) for i in range(70)]
    crowded = PolluxFixedBatch()(many, rows[0].submit + 60)
    assert len(crowded) == NODES * GPUS_PER_NODE and all(len(v) == 1 for v in crowded.values())


def test_the_oracle_serves_the_job_with_the_least_work_left_first() -> None:
    """Two jobs that each want the whole cluster: the one nearer its end runs at its given size first."""
    (row,) = [
        r for r in load_workload(WORKLOADS / "workload-6.csv") if r.app == "imagenet" and r.replicas == 48
    ]
    fresh, advanced = SimJob(replace(row, name="fresh"), load_app(row.app)), SimJob(row, load_app(row.app))
    advanced.epoch, advanced.progress = 80, advanced.app.epoch_end[79]
    out = RemainingWorkOracle()([fresh, advanced], row.submit + 60)
    assert len(out[row.name]) == 48 and len(out.get("fresh", ())) <= 16


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "pollux.py"), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_bench_json_on_a_slice_has_avg_jct_per_policy() -> None:
    out = _bench("--jobs", "12", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["workload"] == "workload-6"
    assert set(doc["avg_jct_s"]) == {
        "tide-goodput",
        "tide-goodput-cost",
        "tide-goodput-cost-usage",
        "tide-goodput-cost-usage-half-to-given",
        "tide-one-project-goodput-cost",
        "tide",
        "tiresias",
        "pollux-fixed-batch",
        "oracle-fixed-batch",
    }
    assert all(v > 0 for v in doc["avg_jct_s"].values())


def test_bench_table_and_clear_errors() -> None:
    out = _bench("--jobs", "5", "--policies", "tiresias")
    assert out.returncode == 0 and "tiresias" in out.stdout and "avg JCT s" in out.stdout
    missing = _bench("--workload", "no-such-workload")
    assert missing.returncode == 2 and "neither a file nor a bundled workload" in missing.stderr
    assert "Traceback" not in missing.stderr
    bad = _bench("--policies", "pollux")
    assert bad.returncode == 2 and "unknown policy pollux" in bad.stderr


def test_a_workload_with_an_unknown_application_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size\nx-0,0,gpt,1,8\n")
    with pytest.raises(ValueError, match="unknown application 'gpt'"):
        load_workload(path)
    out = _bench("--workload", str(path))
    assert out.returncode == 2 and "unknown application" in out.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name,time\nx,0\n", "expected the columns"),
        ("name,time,application,num_replicas,batch_size\nx,soon,ncf,1,8\n", "line 2"),
        ("name,time,application,num_replicas,batch_size\nx,0,ncf,65,8\n", "num_replicas 1-64"),
    ],
)
def test_a_malformed_workload_is_refused_with_its_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "w.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_workload(path)
