"""Benchmark: what one start-time forecast of every waiting job costs the service, by cluster size.

The service recomputes its ETAs at most every ``--eta-every`` seconds (default 30) in a worker process at
nice +10 (``scheduler.engine.eta_worker``): this measures one such recompute, ``scheduler.core.forecast`` on
the snapshot of ``bench/cycle.py`` (8-GPU nodes, a project per ~100 GPUs, a job per 2 GPUs, about a third of
the demand pending), each job given a seeded log-normal time left (median 2 h, upper guess 3 x that). It
prints the CPU seconds of the forecast (both runs, median and upper), the waiting jobs, and how many got a
start time within the horizon, for horizons of 100 and 400 cycles (the service's default is 400).

    python bench/eta_engine.py                 # 1,024 and 10,240 GPUs
    python bench/eta_engine.py --gpus 512
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cycle import synthetic

from scheduler.core import Config
from scheduler.core.estimate import Estimate, Source
from scheduler.core.forecast import Horizon, forecast, waiting


def measure(gpus: int, cycles: int, seed: int = 1) -> dict[str, float | int]:
    rng = random.Random(seed)
    state = synthetic(gpus, seed)
    left = {}
    for job in state.jobs:
        p50 = 7200.0 * rng.lognormvariate(0.0, 1.0)
        left[job.key] = Estimate(p50, 3 * p50, Source.PROJECT)
    began = time.process_time()
    etas = forecast(state, Config(), now=0.0, left=left, horizon=Horizon(cycles=cycles))
    cpu = time.process_time() - began
    return {
        "gpus": gpus,
        "jobs": len(state.jobs),
        "waiting": sum(1 for j in state.jobs if waiting(j)),
        "horizon_cycles": cycles,
        "cpu_s": round(cpu, 2),
        "with_time": sum(1 for e in etas.values() if e.start_p50 is not None),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, action="append", help="cluster size (repeatable)")
    args = ap.parse_args(argv)
    print("| GPUs | jobs | waiting | horizon cycles | forecast CPU s | waiting jobs given a time |")
    print("|---|---|---|---|---|---|")
    for gpus in args.gpus or (1024, 10240):
        for cycles in (100, 400):
            r = measure(gpus, cycles)
            print(
                f"| {r['gpus']:,} | {r['jobs']:,} | {r['waiting']:,} | {r['horizon_cycles']} | {r['cpu_s']} "
                f"| {r['with_time']:,} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
