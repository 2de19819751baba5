"""Benchmark: how right the start-time forecast is, from the log of a simulator replay.

The replay (``python -m scheduler.simulator ... --eta-every N --eta-log FILE``) asks, at every N-th submission,
``scheduler.core.forecast`` when that job will start, from the replay's state then and from remaining-time
estimates the service could make (the jobs finished so far; ``--eta-declared``: true run times, as if declared),
and logs it, then logs each sampled job's first start. This prints the accuracy table (median and p90
absolute error of ``start_p50``, the share of jobs that started by ``start_p90`` (+ one cycle), the share
that started by ``start_p50``), for all sampled jobs that started and for those that waited over a minute,
plus how far into the trace the log goes and what a forecast cost. It works on the log of a replay still
running or cut off: the jobs it covers are those sampled and started so far.

    python -m scheduler.simulator --trace philly --vc-sizes philly --gpus 512 --policies tide \\
        --eta-every 50 --eta-log /tmp/eta.jsonl
    python bench/eta.py /tmp/eta.jsonl
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.simulator.eta import accuracy_of, eta_table, samples_from_log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("log", type=Path, help="JSON lines written by the simulator's --eta-log")
    parser.add_argument("--cycle-seconds", type=float, default=10.0, help="the replay's cycle (band slack)")
    args = parser.parse_args(argv)
    samples, starts, cpu = samples_from_log(args.log.read_text().splitlines())
    if not samples:
        print(f"{args.log}: no ETA in it yet")
        return 1
    last = max(s.submitted for s in samples) / 86400.0
    print(
        f"{len(samples):,} ETAs given up to virtual day {last:.1f}, {len(starts):,} of those jobs started; "
        f"CPU per forecast: median {statistics.median(cpu) * 1000:.1f} ms, "
        f"p90 {statistics.quantiles(cpu, n=10)[-1] * 1000 if len(cpu) > 1 else cpu[0] * 1000:.1f} ms, "
        f"total {sum(cpu):.0f} s"
    )
    print(eta_table(accuracy_of(samples, starts, args.cycle_seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
