"""Benchmark: one full ``plan_cycle`` on synthetic clusters of 64 to 51,200 GPUs.

Cluster shape: 8-GPU nodes, about one project per 100 GPUs, one job per 2 GPUs, a mix of elastic
and rigid jobs, about a third of the demand pending. Half of the projects start out borrowing far beyond
their quota and the other half have work queued, so every cycle reclaims as well as grows. Between measured
cycles the plan is applied and 2 % of the running jobs finish while as many new ones arrive, so the work does
not fade away.

    python bench/cycle.py                      # the table, all sizes
    python bench/cycle.py --gpus 10240 --json  # one JSON object
    python bench/cycle.py --gpus 10240 --all-rules   # R14, R15, R16 and R17 on (see --help)
    python bench/cycle.py --gpus 2048 --gpus 10240 --all-rules --cycles 12 --hash   # plans' fingerprint
    python bench/cycle.py --gpus 10240 --fractions   # a quarter of the jobs fractional, beside whole-GPU jobs
    python bench/cycle.py --gpus 10240 --gpus 81920 --live-mix   # the state of bench/live_scale.py, settled

``--hash`` prints, per size, a SHA-256 over every cycle's decisions and notes (their ``repr``): a refactor or
a speed-up of the core that must not change what it decides is checked by running it before and after.
``--carry`` plans with a ``scheduler.core.carry.Carry`` kept across the cycles, as the engine does: the same
fingerprints with and without it, and the cycle's time with what it reuses.

Rules that are off by default can be turned on: ``--usage-half-life`` (R14: every project starts with some
usage above quota), ``--min-runtime`` (R15: every project; the jobs placed at the start ran 100 s before
the first measured cycle, and every start or resize restarts the clock), ``--allowed-sizes`` (R16: elastic
jobs run only at powers of two between their minimum and maximum), ``--domain-size`` (R17: nodes in
topology domains of that many; every fourth job requires one). ``--all-rules`` is ``--usage-half-life 3600
--min-runtime 300 --allowed-sizes --domain-size 16``.

``--live-mix`` builds the state that ``bench/live_scale.py`` reaches at that size instead: its projects (deserved
100 GPUs each, weights 1-3, in departments at 81,920 GPUs, and the owed project ``r2``) and its job list in
its order; the jobs are placed as above, then ``--warmup`` unmeasured cycles run with the live service's
settle time (10 s) and period (1 s) and no churn, until the cluster is full and settled with jobs waiting;
the measured cycles follow, with that settle time and the churn above.

``--fractions`` (R20) measures each size twice in one run, alternating the two from cycle to cycle: the
workload as it is, and the same workload with every fourth job fractional (a rigid job whose replicas take
0.25, 0.5 or 0.75 of a GPU), and prints both medians side by side with their ratio.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import random
import statistics
import sys
import time
import zlib
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_sizes import GPUS_PER_NODE, department_specs, project_specs, size_of

from scheduler.core import ClusterState, Config, Department, Job, Node, Project, apply_plan, plan_cycle
from scheduler.core.carry import Carry


@dataclass(frozen=True)
class Rules:
    """The rules that are off unless asked for (module docstring)."""

    usage_half_life: float = 0.0
    min_runtime: float = 0.0
    allowed_sizes: bool = False
    domain_size: int = 0
    fractional: bool = False  # R20: every fourth job takes a share of one GPU per replica
    live_mix: bool = False  # the projects, departments and jobs of bench/live_scale.py at that size
    carry: bool = False  # plan with a Carry kept across the cycles, as the engine does


def with_rules(state: ClusterState, rules: Rules, rng: random.Random) -> ClusterState:
    """R14, R15, R16 and R17 on the synthetic snapshot, as ``rules`` asks."""
    nodes, projects, jobs = state.nodes, state.projects, state.jobs
    if rules.domain_size:
        nodes = tuple(replace(n, domain=f"rack-{i // rules.domain_size}") for i, n in enumerate(nodes))
    if rules.usage_half_life:
        projects = tuple(
            replace(p, usage_gpu_seconds=rng.random() * 8 * rules.usage_half_life) for p in projects
        )
    if rules.min_runtime:
        projects = tuple(replace(p, min_runtime_seconds=rules.min_runtime) for p in projects)
    return replace(state, nodes=nodes, projects=projects, jobs=tuple(shaped(j, rules) for j in jobs))


def shaped(job: Job, rules: Rules) -> Job:
    """R16: powers of two between an elastic job's bounds (and the bounds); R17: every fourth job required;
    R20: every fourth job (another quarter, by name) fractional."""
    if rules.fractional and job.gpu_fraction is None and not job.replicas:
        h = zlib.crc32(job.name.encode(), 7)
        if h % 4 == 0:
            share = FRACTIONS[h // 4 % len(FRACTIONS)]
            n = job.min_replicas
            return replace(job, min_replicas=n, max_replicas=n, gpus_per_replica=1, gpu_fraction=share)
    if job.gpu_fraction is not None:
        return job
    if rules.allowed_sizes and job.elastic and not job.allowed_replicas:
        lo, hi = job.min_replicas, job.max_replicas
        counts = {lo, hi} | {1 << k for k in range(11) if lo < 1 << k < hi}
        job = replace(job, allowed_replicas=tuple(sorted(counts)))
    if rules.domain_size and zlib.crc32(job.name.encode()) % 4 == 0 and job.topology != "required":
        job = replace(job, topology="required")
    return job


SIZES = (64, 1024, 10240, 51200)
LIVE_SETTLE = 10.0  # seconds: the service's default settle time (R7), with --live-mix
FRACTIONS = (Fraction(1, 4), Fraction(1, 2), Fraction(1, 2), Fraction(3, 4))
SIZES_GPR = (1, 1, 1, 2, 2, 4, 8)


def synthetic(gpus: int, seed: int = 1, rules: Rules | None = None) -> ClusterState:
    rng = random.Random(seed)
    nodes = tuple(Node(f"node-{i}", 8) for i in range(gpus // 8))
    n_projects = max(2, gpus // 100)
    deserved = gpus // n_projects
    projects = tuple(
        Project(f"p{i}", deserved, over_quota_weight=rng.choice([1.0, 1.0, 2.0, 3.0]), created_at=float(i))
        for i in range(n_projects)
    )
    jobs = [_job(rng, f"p{_skewed(rng, n_projects)}", f"j{i}", float(i)) for i in range(gpus // 2)]
    if rules is not None and rules.fractional:
        jobs = [shaped(j, Rules(fractional=True)) for j in jobs]
    return _place_greedy(ClusterState(nodes, projects, ()), jobs)


def live(gpus: int) -> ClusterState:
    """The snapshot ``bench/live_scale.py`` submits at ``gpus`` GPUs (its departments, projects and jobs, in its
    order), placed as ``synthetic`` places its jobs."""
    size = size_of(gpus)
    departments = tuple(Department(d["name"], d["deserved_gpus"]) for d in department_specs(size))
    projects = tuple(
        Project(
            p["name"],
            p["deserved_gpus"],
            over_quota_weight=float(p.get("over_quota_weight", 1.0)),
            department=p.get("department"),
            created_at=float(i),  # the order the live bench creates them in
        )
        for i, p in enumerate(project_specs(size))
    )
    rng = random.Random(1)  # ``live_scale.job_bodies``
    jobs = [_job(rng, f"p{_skewed(rng, size.projects)}", f"j{i}", float(i)) for i in range(size.jobs)]
    nodes = tuple(Node(f"node-{i}", GPUS_PER_NODE) for i in range(size.nodes))
    return _place_greedy(ClusterState(nodes, projects, (), departments), jobs)


def _skewed(rng: random.Random, n: int) -> int:
    """Even projects get three times the jobs: they end up borrowing, the odd ones queued."""
    return rng.randrange(n // 2) * 2 if rng.random() < 0.75 or n < 2 else rng.randrange(n // 2) * 2 + 1


def _job(rng: random.Random, project: str, name: str, t: float) -> Job:
    g = rng.choice(SIZES_GPR)
    if rng.random() < 0.5:
        lo = rng.randint(1, 2)
        return Job(project, name, lo, lo + rng.randint(1, 3), g, submitted_at=t, priority=rng.randint(0, 1))
    n = rng.randint(1, 2)
    return Job(project, name, n, n, g, submitted_at=t, priority=rng.randint(0, 1))


def _place_greedy(state: ClusterState, jobs: list[Job]) -> ClusterState:
    """Start jobs in submission order until about two thirds of the demand runs; the rest is pending."""
    plan_state = replace(state, jobs=tuple(jobs))
    config = Config(settle_seconds=0)
    plan = plan_cycle(plan_state, config, now=0.0)
    return apply_plan(plan_state, plan, now=-100.0)


def churn(state: ClusterState, rng: random.Random, step: int, rules: Rules) -> ClusterState:
    running = [j for j in state.jobs if j.active]
    done = {j.key for j in rng.sample(running, max(1, len(running) // 50))} if running else set()
    kept = [j for j in state.jobs if j.key not in done]
    fresh = [
        shaped(_job(rng, rng.choice(state.projects).name, f"n{step}-{i}", 1000.0 + step), rules)
        for i in range(len(done))
    ]
    return replace(state, jobs=tuple(kept + fresh))


def measure(
    gpus: int, cycles: int, seed: int = 1, rules: Rules | None = None, warmup: int = 0
) -> dict[str, float | int]:
    rng = random.Random(seed)
    rules = rules or Rules()
    start = live(gpus) if rules.live_mix else synthetic(gpus, seed, rules)
    state = with_rules(start, rules, rng)
    config = Config(
        settle_seconds=LIVE_SETTLE if rules.live_mix else 0, usage_half_life=rules.usage_half_life
    )
    carry = Carry() if rules.carry else None
    for step in range(-warmup, 0):  # unmeasured: the live service's cycles after its fill, no churn
        state = apply_plan(state, plan_cycle(state, config, now=float(step), carry=carry), now=float(step))
    times: list[float] = []
    cpu: list[float] = []
    ref: list[float] = []
    decisions = 0
    digest = hashlib.sha256()
    pending_gpus = sum(j.min_replicas * j.gpus_per_replica for j in state.jobs if not j.active)
    for step in range(cycles):
        t0, c0 = time.perf_counter(), time.process_time()
        plan = plan_cycle(state, config, now=float(step), carry=carry)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        ref.append(reference_pass(state))
        decisions += len(plan.decisions)
        digest.update(repr((plan.decisions, plan.notes)).encode())
        state = churn(apply_plan(state, plan, now=float(step)), rng, step, rules)
    times.sort()
    return {
        "gpus": gpus,
        "nodes": gpus // 8,
        "projects": len(state.projects),
        "jobs": len(state.jobs),
        "pending_gpus_at_start": pending_gpus,
        "cycles": cycles,
        "decisions_per_cycle": round(decisions / cycles, 1),
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(times[min(len(times) - 1, int(0.95 * len(times)))], 2),
        "cpu_p50_ms": round(statistics.median(cpu), 2),
        "ref_p50_ms": round(statistics.median(ref), 2),
        "plans_sha256": digest.hexdigest(),
    }


def reference_pass(state: ClusterState) -> float:
    """CPU ms of the simplest n log n pass over the snapshot: sort the jobs, index their running replicas.

    On this machine even this grows faster than n log n from 10,240 to 51,200 GPUs (memory no longer fits
    the caches), so the table compares the cycle's growth with this pass's, measured in the same run.
    """
    gc.disable()
    c0 = time.process_time()
    index = {
        (j.project, j.name): [r for r in j.replicas if not r.releasing] for j in sorted(state.jobs, key=_key)
    }
    took = (time.process_time() - c0) * 1000
    gc.enable()
    del index
    return took


def _key(job: Job) -> tuple[str, str]:
    return (job.project, job.name)


def side_by_side(sizes: list[int], cycles: int, rules: Rules) -> int:
    """R20: the whole-GPU workload and the same with a quarter of its jobs fractional, measured in turns."""
    print(f"plan_cycle, whole-GPU jobs vs a quarter fractional, {cycles} cycles each, in turns; {rules}")
    print(
        f"{'GPUs':>7} {'jobs':>6} {'frac jobs':>9} {'whole p50':>9} {'frac p50':>9} {'ratio':>6} "
        f"{'whole cpu':>9} {'frac cpu':>9} {'ratio':>6}"
    )
    for gpus in sizes:
        whole, frac = _in_turns(gpus, cycles, rules)
        print(
            f"{gpus:>7} {whole['jobs']:>6} {frac['fractional']:>9} {whole['p50_ms']:>9} {frac['p50_ms']:>9} "
            f"{frac['p50_ms'] / whole['p50_ms']:>6.2f} {whole['cpu_p50_ms']:>9} {frac['cpu_p50_ms']:>9} "
            f"{frac['cpu_p50_ms'] / whole['cpu_p50_ms']:>6.2f}"
        )
    print(
        "ratio: the fractional workload's median cycle over the whole-GPU one's, wall clock and CPU time of the "
        "process (target: at most 1.2)"
    )
    return 0


def _in_turns(gpus: int, cycles: int, rules: Rules) -> tuple[dict[str, float], dict[str, float]]:
    runs: list[tuple[ClusterState, random.Random, Rules, list[float], list[float]]] = []
    for fractional in (False, True):
        mine = replace(rules, fractional=fractional)
        rng = random.Random(1)
        state = with_rules(synthetic(gpus, 1, mine), mine, rng)
        runs.append((state, rng, mine, [], []))
    config = Config(settle_seconds=0, usage_half_life=rules.usage_half_life)
    for step in range(cycles):
        for i, (state, rng, mine, times, cpu) in enumerate(runs):
            t0, c0 = time.perf_counter(), time.process_time()
            plan = plan_cycle(state, config, now=float(step))
            times.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
            after = churn(apply_plan(state, plan, now=float(step)), rng, step, mine)
            runs[i] = (after, rng, mine, times, cpu)
    out = []
    for state, _, _, times, cpu in runs:
        out.append(
            {
                "jobs": len(state.jobs),
                "fractional": sum(1 for j in state.jobs if j.gpu_fraction is not None),
                "p50_ms": round(statistics.median(times), 2),
                "cpu_p50_ms": round(statistics.median(cpu), 2),
            }
        )
    return out[0], out[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, action="append", help="cluster size (repeatable); default: all sizes")
    ap.add_argument("--cycles", type=int, default=20, help="measured cycles per size (default 20)")
    ap.add_argument("--json", action="store_true", help="print one JSON object per size")
    ap.add_argument(
        "--hash", action="store_true", help="print the SHA-256 of every cycle's decisions and notes"
    )
    ap.add_argument("--usage-half-life", type=float, default=0.0, help="R14: seconds (0: off)")
    ap.add_argument("--min-runtime", type=float, default=0.0, help="R15: seconds for every project (0: off)")
    ap.add_argument("--allowed-sizes", action="store_true", help="R16: elastic jobs at powers of two only")
    ap.add_argument("--domain-size", type=int, default=0, help="R17: nodes per topology domain (0: none)")
    ap.add_argument("--all-rules", action="store_true", help="all four on (module docstring)")
    ap.add_argument(
        "--fractions", action="store_true", help="R20: each size also with a quarter of the jobs fractional"
    )
    ap.add_argument(
        "--live-mix",
        action="store_true",
        help="the state of bench/live_scale.py at each size (module docstring)",
    )
    ap.add_argument("--warmup", type=int, default=10, help="with --live-mix: unmeasured cycles (default 10)")
    ap.add_argument(
        "--carry",
        action="store_true",
        help="plan with a Carry kept across cycles, as the engine does (same plans)",
    )
    args = ap.parse_args(argv)
    if args.cycles < 1 or any(g < 8 for g in args.gpus or ()):
        ap.error("--cycles must be >= 1 and --gpus >= 8")
    rules = Rules(args.usage_half_life, args.min_runtime, args.allowed_sizes, args.domain_size)
    if args.all_rules:
        rules = Rules(3600.0, 300.0, True, 16)
    rules = replace(rules, live_mix=args.live_mix, carry=args.carry)
    if args.fractions:
        return side_by_side(args.gpus or [10240], args.cycles, rules)
    warmup = args.warmup if args.live_mix else 0
    rows = [measure(g, args.cycles, rules=rules, warmup=warmup) for g in (args.gpus or SIZES)]
    if args.hash:
        for row in rows:
            print(f"{row['gpus']:>7} GPUs, {row['cycles']} cycles, {rules}: {row['plans_sha256']}")
        return 0
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(
        f"plan_cycle on synthetic clusters, {args.cycles} cycles per size (8-GPU nodes, 2 % churn per cycle); "
        f"{rules}"
    )
    print(
        f"{'GPUs':>7} {'projects':>8} {'jobs':>6} {'decisions':>9} {'p50 ms':>8} {'p95 ms':>8} "
        f"{'cpu p50':>8} {'x p50':>6} {'x nlogn':>7} {'x ref':>6}"
    )
    prev: dict[str, float | int] | None = None
    for row in rows:
        tx = nx = rx = "-"
        if prev:
            tx = f"{row['p50_ms'] / prev['p50_ms']:.1f}"
            n0, n1 = float(prev["gpus"]), float(row["gpus"])
            nx = f"{n1 * math.log(n1) / (n0 * math.log(n0)):.1f}"
            rx = f"{row['ref_p50_ms'] / prev['ref_p50_ms']:.1f}" if prev["ref_p50_ms"] else "-"
        print(
            f"{row['gpus']:>7} {row['projects']:>8} {row['jobs']:>6} {row['decisions_per_cycle']:>9} "
            f"{row['p50_ms']:>8} {row['p95_ms']:>8} {row['cpu_p50_ms']:>8} {tx:>6} {nx:>7} {rx:>6}"
        )
        prev = row
    print(
        "x p50: growth of the median cycle from the size above; x nlogn: what n log n growth allows; "
        "x ref: growth of a plain sort-and-index pass over the same snapshots (the machine's own n log n)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
