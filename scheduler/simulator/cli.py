"""Command line of the simulator: ``python -m scheduler.simulator [options]`` (and ``tide simulate``).

Contract: ``main(argv)`` parses ``argv`` into ``SimulationSettings``, runs ``run_simulation`` with a rich
progress bar (unless ``--no-progress``), prints the comparison table and the wall time of each policy, writes
the report to ``--out`` and returns the exit status (0; 2 for bad arguments, as argparse does).
``--trace`` and ``--vc-sizes`` take a file or the name of a trace installed with the package
(``scheduler.simulator.bundled``); anything else is a bad argument.
``build_parser`` is exposed so another CLI can reuse the options.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from scheduler.simulator.bundled import UnknownTrace, trace_file, vc_sizes_file
from scheduler.simulator.eta import eta_table
from scheduler.simulator.replay import ProgressHook, SimOptions
from scheduler.simulator.report import comparison_table
from scheduler.simulator.runner import POLICIES, SimulationSettings, run_simulation
from scheduler.simulator.trace import SyntheticSpec, parse_size_mix
from scheduler.simulator.workload import WorkloadOptions


def _workload_args(p: argparse.ArgumentParser) -> None:
    d = WorkloadOptions()
    g = p.add_argument_group("job shapes")
    g.add_argument("--elastic-share", type=float, default=d.elastic_share, help="of training jobs")
    g.add_argument("--min-fraction", type=float, default=d.min_fraction, help="min replicas / requested")
    g.add_argument("--max-factor", type=float, default=d.max_factor, help="max replicas / requested")
    g.add_argument("--interactive-share", type=float, default=d.interactive_share, help="of 1-GPU jobs")
    g.add_argument("--no-clamp", action="store_true", help="keep requests larger than the team quota")


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds >= 0")
    return value


def _sim_args(p: argparse.ArgumentParser) -> None:
    d = SimOptions()
    g = p.add_argument_group("replay")
    g.add_argument("--efficiency", type=float, default=d.efficiency, help="speed exponent of elastic scaling")
    g.add_argument("--restart-seconds", type=float, default=d.restart_seconds, help="cost of each resize")
    g.add_argument(
        "--checkpoint-seconds",
        type=float,
        default=d.checkpoint_seconds,
        help="a running job saves a checkpoint this often (an eviction loses the work since)",
    )
    g.add_argument("--cycle-seconds", type=float, default=d.cycle_seconds)
    g.add_argument("--grace-seconds", type=float, default=d.grace_seconds)
    g.add_argument("--settle-seconds", type=float, default=10.0)
    g.add_argument(
        "--usage-half-life",
        type=_non_negative,
        default=0.0,
        help="seconds; fair share over time: usage above quota, decayed by this half-life, lowers a "
        "project's over-quota weight (0 = off)",
    )
    g.add_argument(
        "--no-least-work-lost",
        action="store_true",
        help="R5's tie-break off: equal victims go newest first, not by the work they lose since their last "
        "checkpoint (see --checkpoint-seconds)",
    )
    g.add_argument("--check-invariants", action="store_true", help="run check_invariants every cycle")
    g.add_argument(
        "--eta-every",
        type=int,
        default=0,
        metavar="N",
        help="measure the start-time forecast at every N-th submission",
    )
    g.add_argument(
        "--eta-log", type=Path, metavar="FILE", help="write each ETA and start as JSON lines (bench/eta.py)"
    )
    g.add_argument(
        "--eta-declared",
        action="store_true",
        help="forecast from true run times, as if every job declared its own",
    )


def _synthetic_args(p: argparse.ArgumentParser) -> None:
    d = SyntheticSpec()
    g = p.add_argument_group("synthetic workload (when no --trace)")
    g.add_argument("--jobs", type=int, default=d.jobs)
    g.add_argument("--arrivals-per-hour", type=float, default=d.arrivals_per_hour)
    g.add_argument("--teams", type=int, default=d.teams)
    mix = ",".join(f"{s}:{w:g}" for s, w in d.size_mix)
    g.add_argument("--size-mix", default=mix, help="gpus:weight,...")
    g.add_argument("--median-duration", type=float, default=d.median_duration, help="seconds")


def _bundled(resolve: Callable[[str], Path]) -> Callable[[str], Path]:
    """An argparse type: a file path or a bundled name; anything else is a usage error (exit 2)."""

    def parse(text: str) -> Path:
        try:
            return resolve(text)
        except UnknownTrace as e:
            raise argparse.ArgumentTypeError(str(e)) from e

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m scheduler.simulator",
        description=__doc__.splitlines()[0],
        epilog="example, on the Philly trace installed with Tide: %(prog)s --trace philly --vc-sizes philly "
        "--gpus 64 --pollux-slice --out report/",
    )
    p.add_argument(
        "--trace", type=_bundled(trace_file), help="Philly-style job CSV, or a bundled trace: philly"
    )
    p.add_argument(
        "--vc-sizes",
        type=_bundled(vc_sizes_file),
        help="team sizes (vc,node num CSV, or philly for the bundled ones): quotas in proportion to them",
    )
    p.add_argument("--quotas", type=Path, help="YAML quotas (overrides --vc-sizes)")
    p.add_argument("--gpus", type=int, default=64, help="GPUs in the simulated cluster")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument(
        "--domain-size",
        type=int,
        default=0,
        metavar="N",
        help="nodes per topology domain (rack): gangs start inside one where they fit; the report gives the "
        "share of multi-node gangs that did (0: no domains)",
    )
    p.add_argument("--pollux-slice", action="store_true", help="sample jobs from the busiest window")
    p.add_argument("--slice-jobs", type=int, default=160)
    p.add_argument("--slice-hours", type=float, default=8.0)
    p.add_argument("--max-jobs", type=int, help="only the first N jobs of the trace")
    p.add_argument("--policies", default=",".join(POLICIES), help=f"comma list of {', '.join(POLICIES)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="write report.md and plots here")
    p.add_argument("--no-progress", action="store_true")
    _workload_args(p)
    _sim_args(p)
    _synthetic_args(p)
    return p


def settings_from(args: argparse.Namespace) -> SimulationSettings:
    return SimulationSettings(
        trace=args.trace,
        vc_sizes=args.vc_sizes,
        quotas=args.quotas,
        gpus=args.gpus,
        gpus_per_node=args.gpus_per_node,
        domain_size=args.domain_size,
        pollux_slice=args.pollux_slice,
        slice_jobs=args.slice_jobs,
        slice_hours=args.slice_hours,
        max_jobs=args.max_jobs,
        synthetic=SyntheticSpec(
            args.jobs, args.arrivals_per_hour, args.teams, parse_size_mix(args.size_mix), args.median_duration
        ),
        workload=WorkloadOptions(
            args.elastic_share, args.min_fraction, args.max_factor, args.interactive_share, not args.no_clamp
        ),
        sim=SimOptions(
            args.cycle_seconds,
            args.restart_seconds,
            args.checkpoint_seconds,
            args.efficiency,
            args.grace_seconds,
            args.check_invariants,
        ),
        settle_seconds=args.settle_seconds,
        usage_half_life=args.usage_half_life,
        least_work_lost=not args.no_least_work_lost,
        policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
        seed=args.seed,
        out_dir=args.out,
        eta_every=args.eta_every,
        eta_declared=args.eta_declared,
        eta_log=args.eta_log,
    )


@contextmanager
def _bar(console: Console, enabled: bool) -> Iterator[Progress | None]:
    if not enabled:
        yield None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        yield progress


def _hook_factory(progress: Progress, console: Console) -> Callable[[str, int], ProgressHook]:
    """Bar updates; when stderr is not a terminal (a log file), also a plain line every 30 s of wall time."""

    def factory(policy: str, jobs: int) -> ProgressHook:
        task = progress.add_task(policy, total=jobs)
        last = [time.monotonic()]

        def hook(now: float, finished: int) -> None:
            progress.update(task, completed=finished, description=f"{policy} day {now / 86400:.1f}")
            if not console.is_terminal and time.monotonic() - last[0] >= 30:
                last[0] = time.monotonic()
                console.print(f"{policy}: {finished}/{jobs} jobs done, virtual day {now / 86400:.1f}")

        return hook

    return factory


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.domain_size < 0:
        parser.error("--domain-size: give 0 (no domains) or a number of nodes")
    if args.eta_every < 0:
        parser.error("--eta-every: give 0 (off) or a positive number of submissions")
    settings = settings_from(args)
    console = Console(stderr=True)
    with _bar(console, not args.no_progress) as progress:
        factory = _hook_factory(progress, console) if progress is not None else None
        report = run_simulation(settings, factory)
    print(comparison_table(report.summaries))
    timings = zip(report.summaries, report.wall_seconds, report.cpu_seconds, strict=True)
    for summary, wall, cpu in timings:
        print(f"{summary.policy}: {wall:.1f} s wall, {cpu:.1f} s CPU, {summary.cycles} cycles")
    for summary, rows in zip(report.summaries, report.eta, strict=False):
        print(
            f"\nstart-time forecast ({summary.policy}), ETA given at submission vs the start that happened:"
        )
        print(eta_table(rows))
    for path in report.files:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
