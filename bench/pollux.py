"""Benchmark: Pollux's own workloads (OSDI'21 artifact) replayed through Tide's core, beside Tiresias.

Each workload (160 jobs over 8 hours on 16 nodes x 4 GPUs; bundled in scheduler/simulator/data/pollux/) runs
under the Pollux simulator's progress model: every 60 s all jobs advance and the policy allocates, every new
allocation stalls its job 30 s, each job keeps its given global batch size (Tide does not tune batch sizes).
Policies: ``tide-goodput`` (Tide with goodput-aware growth, R19), ``tide-goodput-cost`` (and R18 knowing each
resize costs the 30 s stall), ``tide-goodput-cost-usage`` (and R14's fair share over time, a one-hour
half-life), ``tide-goodput-cost-usage-half-to-given`` (the same, each job elastic from half its given size to
that size), ``tide-one-project-goodput-cost`` (``tide-goodput-cost`` with the whole cluster one project, so
that goodput decides which job grows, instead of a project per job), ``tide`` (Tide as before R19),
``tiresias`` (the jobs' given sizes, least-attained-service queue: the artifact's baseline, whose 3,469.69 s
on workload-6 the Pollux simulator reports), and two references that are not Tide policies:
``pollux-fixed-batch`` (Pollux's allocation objective with each job's batch size fixed) and
``oracle-fixed-batch`` (the job with the least work left first, read from the model: what allocation reaches
knowing job lengths). Prints a table; ``--json`` prints one object with ``avg_jct_s`` per policy (``--all``:
per workload, and their mean).

    python bench/pollux.py                      # workload-6
    python bench/pollux.py --all                # the eight workloads and the mean
    python bench/pollux.py --workload my.csv --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.simulator.pollux import POLICIES, WORKLOADS, load_workload, replay

# the Pollux simulator's README, workload-6 (Pollux also tunes each job's batch size)
REFERENCE = {"pollux": 2446.13, "tiresias": 3469.69, "optimus+oracle": 5301.88}


def workload_path(text: str) -> Path:
    """A CSV path, or a bundled workload's name (``workload-1`` .. ``workload-8``)."""
    path = Path(text)
    if path.is_file():
        return path
    bundled = WORKLOADS / f"{text.removesuffix('.csv')}.csv"
    if bundled.is_file():
        return bundled
    names = ", ".join(p.stem for p in sorted(WORKLOADS.glob("*.csv")))
    raise ValueError(f"{text!r} is neither a file nor a bundled workload ({names})")


def run(path: Path, policies: list[str], jobs: int | None) -> dict[str, dict[str, float]]:
    rows = load_workload(path, jobs)
    out: dict[str, dict[str, float]] = {}
    for name in policies:
        began = time.perf_counter()
        result = replay(rows, POLICIES[name]())
        jct = list(result.jct.values())
        out[name] = {
            "avg_jct_s": round(result.avg_jct, 2),
            "median_jct_s": round(statistics.median(jct), 2) if jct else 0.0,
            "makespan_s": result.makespan,
            "allocations_per_job": round(result.allocations / max(len(rows), 1), 2),
            "wall_s": round(time.perf_counter() - began, 1),
        }
    return out


def table(title: str, results: dict[str, dict[str, float]], pollux: bool) -> str:
    """One workload's rows; ``pollux``: with the ratio to Pollux's published figure (workload-6 only)."""
    lines = [
        title,
        f"{'policy':<40}{'avg JCT s':>11}{'median s':>10}{'makespan s':>12}{'allocs/job':>12}"
        f"{'vs Tiresias':>13}" + (f"{'vs Pollux':>11}" if pollux else ""),
    ]
    base = results.get("tiresias", {}).get("avg_jct_s")
    for name, r in results.items():
        vs_t = f"{r['avg_jct_s'] / base:.2f}x" if base else "-"
        lines.append(
            f"{name:<40}{r['avg_jct_s']:>11,.0f}{r['median_jct_s']:>10,.0f}{r['makespan_s']:>12,.0f}"
            f"{r['allocations_per_job']:>12.2f}{vs_t:>13}"
            + (f"{r['avg_jct_s'] / REFERENCE['pollux']:>10.2f}x" if pollux else "")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workload", default="workload-6", help="a workload CSV or a bundled name")
    parser.add_argument("--all", action="store_true", help="the eight bundled workloads and their mean")
    parser.add_argument("--jobs", type=int, default=None, help="only the first N jobs of each workload")
    parser.add_argument(
        "--policies", default=",".join(POLICIES), help=f"comma-separated, of: {', '.join(POLICIES)}"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args(argv)
    policies = [p for p in args.policies.split(",") if p]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        parser.error(f"unknown policy {', '.join(unknown) or '(none)'}; choose from {', '.join(POLICIES)}")
    if args.jobs is not None and args.jobs < 1:
        parser.error("--jobs takes a positive number")
    try:
        paths = (
            sorted(WORKLOADS.glob("workload-*.csv"), key=lambda p: int(p.stem.split("-")[1]))
            if args.all
            else [workload_path(args.workload)]
        )
        per = {p.stem: run(p, policies, args.jobs) for p in paths}
    except ValueError as e:
        parser.error(str(e))
    mean = {name: round(statistics.fmean(r[name]["avg_jct_s"] for r in per.values()), 2) for name in policies}
    if args.json:
        if args.all:
            doc: dict[str, object] = {
                "workloads": {w: {n: r[n]["avg_jct_s"] for n in policies} for w, r in per.items()},
                "avg_jct_s": mean,
            }
        else:
            ((name, results),) = per.items()
            doc = {
                "workload": name,
                "avg_jct_s": {n: r["avg_jct_s"] for n, r in results.items()},
                "details": results,
            }
        doc["reference_workload_6"] = REFERENCE
        print(json.dumps(doc, indent=2))
        return 0
    for name, results in per.items():
        whole6 = name == "workload-6" and args.jobs is None
        print(table(f"{name}{f' (first {args.jobs} jobs)' if args.jobs else ''}", results, whole6))
        print()
    if args.all:
        print("mean over the workloads: " + ", ".join(f"{n} {v:,.0f} s" for n, v in mean.items()))
    print(
        "Pollux simulator's README, workload-6: "
        + ", ".join(f"{n} {v:,.2f} s" for n, v in REFERENCE.items())
        + " (Pollux also tunes batch sizes)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
