"""The submit path alone, side by side: checkouts in turns, the submits of ``bench/live_scale.py`` at a size.

Starts ``tide serve --executor memory`` of each ``--tree`` (a checkout; this one if none is given) on a scratch
PostgreSQL database at ``--gpus`` (the sizes of ``bench/live_scale.py``: its nodes, departments, projects and
job mix), creates its projects, then submits its jobs over REST from ``--clients`` clients (the size's, 8 or
16) and nothing else (no ``/cluster`` polling, no cycle windows): submits/s, p50, the CPU each process spent
per submit (the API, the engine placing the jobs meanwhile, PostgreSQL, this load generator) and how many
cycles the engine ran during the submits. ``--rounds`` runs every tree once per round, in turns, so a host
whose speed drifts weighs on each alike; the table gives each tree's median and range. Hosts vary up to 3x
in speed: compare trees measured in the same run, not with figures of another host.

    .venv/bin/python bench/submit_rate.py --gpus 10240 --rounds 3 --tree /path/to/base --tree .
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_scale import cpu_now, create_projects, job_bodies, submit_all
from live_sizes import GPUS_PER_NODE, size_of
from livekit import histogram, scrape, scratch_database, serve

KEYS = ("submits_per_s", "api", "postgres", "engine", "client", "cycles")


def once(postgres: str, tree: str, gpus: int, clients: int | None) -> dict[str, float]:
    size = size_of(gpus)
    bodies = job_bodies(size.jobs, size.projects)
    statuses: Counter[int] = Counter()
    with (
        scratch_database(postgres) as url,
        serve(url, nodes=size.nodes, gpus_per_node=GPUS_PER_NODE, tree=tree) as (port, pid),
    ):
        asyncio.run(create_projects(port, size, statuses))
        cycles_before = histogram(scrape(port), "tide_cycle_duration_seconds")[1]
        before = cpu_now(pid)
        latencies, elapsed = asyncio.run(submit_all(port, bodies, statuses, clients or size.clients))
        spent = {k: v - before[k] for k, v in cpu_now(pid).items()}
        cycles = histogram(scrape(port), "tide_cycle_duration_seconds")[1] - cycles_before
    refused = {code: n for code, n in statuses.items() if code >= 300}
    if refused:
        raise SystemExit(f"{tree}: answers other than 2xx: {refused}")
    return {
        "submits_per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1e3,
        **{k: v / len(latencies) * 1e3 for k, v in spent.items()},
        "cycles": cycles,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=10240, help="a size of bench/live_scale.py")
    parser.add_argument("--tree", action="append", help="a checkout to run (give several); default: this one")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, help="default: the size's (8, or 16 at 81,920 GPUs)")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    trees = args.tree or [str(Path(__file__).resolve().parents[1])]
    runs: dict[str, list[dict[str, float]]] = {tree: [] for tree in trees}
    for round_ in range(args.rounds):
        for tree in trees:
            run = once(args.postgres, tree, args.gpus, args.clients)
            runs[tree].append(run)
            print(
                f"round {round_ + 1} {tree}: " + ", ".join(f"{k} {v:.2f}" for k, v in run.items()), flush=True
            )
    size = size_of(args.gpus)
    print(
        f"\n{args.gpus} GPUs, {size.jobs} submits from {args.clients or size.clients} clients, {args.rounds} rounds"
    )
    print(
        "tree: submits/s median (range); CPU ms per submit, medians: API / PostgreSQL / engine / load generator; cycles"
    )
    for tree, found in runs.items():
        med = {k: statistics.median(r[k] for r in found) for k in KEYS}
        low, high = min(r["submits_per_s"] for r in found), max(r["submits_per_s"] for r in found)
        print(
            f"{tree}: {med['submits_per_s']:.1f} ({low:.0f}-{high:.0f}); {med['api']:.2f} / {med['postgres']:.2f}"
            f" / {med['engine']:.2f} / {med['client']:.2f}; {med['cycles']:.0f}"
        )


if __name__ == "__main__":
    main()
