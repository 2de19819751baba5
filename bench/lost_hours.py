"""Where a replay's lost GPU-hours come from: the simulator's Tide run, its losses split by cause.

Usage (from the repository root; every option of ``python -m scheduler.simulator`` applies, the policy is
``tide`` unless ``--policies`` names one)::

    .venv/bin/python bench/lost_hours.py --trace philly --vc-sizes philly --gpus 512 --max-jobs 3000 \
        --restart-seconds 300 --no-progress [--json]

Contract: replays exactly what ``python -m scheduler.simulator`` replays (same workload, seed, options, and
the same ``plan_cycle``), through a ``Simulator`` subclass that only watches: it books each GPU-second the
report counts as lost (a segment's restart pause, and the work an eviction rolls back) to the decision that
caused it, and prints tables (or, with ``--json``, one object):

- by cause: growth (a running job grown: its restart), shrink by reclaim / preemption / consolidation,
  eviction by the same causes (work rolled back, and the restart of the job when it runs again); reclaim
  that freed whole nodes one at a time for a big replica ("reclaim, node-targeted") apart. The
  simulator models no failures, so none are counted;
- by the job's size (GPUs it held before the decision) and by how long it had run since its last restart;
- for growth, whether it paid: the progress the new size added until the job's next resize or end, against
  what it would have made at the old size over the same time (``paid`` = net gain above 0);
- regrowth: growth of a job whose previous resize was a shrink by reclaim (GPUs lent, taken back, lent
  again), with its restarts, and the restarts of the shrinks that came before a regrowth.

Restarts cut short by the next decision are charged as far as they ran, as the report charges them, so the
totals equal the report's lost GPU-hours.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import defaultdict
from dataclasses import dataclass

from scheduler.core import Action, Cause, Decision, Plan, resize_cost
from scheduler.simulator.cli import build_parser, settings_from
from scheduler.simulator.progress import Run, speed
from scheduler.simulator.replay import Simulator
from scheduler.simulator.report import summarize
from scheduler.simulator.runner import POLICIES, build_projects, load_jobs, policy_config
from scheduler.simulator.workload import make_nodes, rigid, shape_jobs

HOUR = 3600.0
SIZES = ((1, "1"), (2, "2"), (4, "3-4"), (8, "5-8"), (16, "9-16"), (10**9, ">16"))
# the reason of a unit taken to free a whole node (``preemption.Reclaimer._take_on``)
NODE_TARGETED = "to make room for one replica"
RAN = ((600, "< 10 min"), (1800, "10-30 min"), (3600, "30-60 min"), (4 * 3600, "1-4 h"), (1e18, "> 4 h"))


def _growth_kind(reason: str) -> str:
    return "into idle GPUs" if "into idle GPUs" in reason else "towards its fair share"


def _cause(d: Decision) -> str:
    """What a decision is booked to: growth by its kind; a reclaim that freed a whole node for a big replica
    (node-targeted, its reason says "to make room for one replica") apart from the rest of reclaim."""
    if d.action == Action.GROW:
        return _growth_kind(d.reason)
    if d.cause == Cause.RECLAIM and NODE_TARGETED in d.reason:
        return "reclaim, node-targeted"
    return d.cause.value


def bucket(value: float, edges: tuple[tuple[float, str], ...]) -> str:
    return next(label for edge, label in edges if value <= edge)


@dataclass(slots=True)
class Segment:
    """What started a job's current segment: the cause its restart pause is booked to."""

    cause: str
    size: str
    ran: str
    grown_from: int = 0  # for growth: GPUs before it
    started: float = 0.0
    regrowth: bool = False  # growth right after a shrink by reclaim


class Watching(Simulator):
    """The replay, unchanged, booking every lost GPU-second to its cause."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lost: dict[tuple[str, str, str], float] = defaultdict(float)
        self.count: dict[tuple[str, str, str], int] = defaultdict(int)
        self.segment: dict[tuple[str, str], Segment] = {}
        self.pending_cause: dict[tuple[str, str], tuple[str, str, str]] = {}  # evicted: its restart's cause
        self.decision: dict[tuple[str, str], tuple[Action, str]] = {}
        self.growth: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])  # count, GPU-h of restart
        # regrowth: growth after a shrink by reclaim; the restarts of those shrinks (count, GPU-h each)
        self.regrowth = [0, 0.0]
        self.shrink_before_regrowth = [0, 0.0]
        self.reclaim_shrink: dict[tuple[str, str], float] = {}  # job -> its last shrink's restart GPU-s

    def _apply(self, plan: Plan, now: float) -> None:
        self.decision = {(d.project, d.job): (d.action, _cause(d)) for d in plan.decisions}
        super()._apply(plan, now)

    def _book(self, key: tuple[str, str], seg: Segment | None, gpu_s: float) -> None:
        if seg is not None and gpu_s > 0:
            k = (seg.cause, seg.size, seg.ran)
            self.lost[k] += gpu_s

    def _close(self, run: Run, now: float) -> None:
        """The segment ends: book its restart pause, and judge a growth by what it added."""
        seg = self.segment.pop(run.spec.key, None)
        self._book(run.spec.key, seg, run.restart_loss(now))
        if seg is not None and seg.regrowth:
            self.regrowth[1] += run.restart_loss(now) / HOUR
        if seg is not None and seg.cause.startswith("shrink by reclaim"):
            self.reclaim_shrink[run.spec.key] = run.restart_loss(now)
        if seg is not None and seg.cause.startswith("growth"):
            span = now - run.seg_start
            made = run.rate * max(0.0, span - run.seg_delay)
            old = speed(run.spec.gpus, seg.grown_from, self.opts.efficiency) * span
            ended = "finished" if run.progress(now) >= run.spec.work - 1e-6 else "resized"
            verdict = ("paid" if made > old else "did not pay") + f", then {ended}"
            self.growth[verdict][0] += 1
            self.growth[verdict][1] += run.restart_loss(now) / HOUR

    def _finish(self, key: tuple[str, str], version: int, now: float) -> bool:
        run = self.runs[key]
        if run.version == version and run.finished_at is None:
            self._close(run, now)
        return super()._finish(key, version, now)

    def _resize(self, run: Run, gpus: int, now: float) -> None:
        old, key = run.gpus, run.spec.key
        if old == gpus:
            return
        _, cause = self.decision.get(key, (Action.START, "?"))
        ran = now - run.seg_start - run.seg_delay if old > 0 else 0.0
        size, since = bucket(old or gpus, SIZES), bucket(max(ran, 0.0), RAN)
        if old > 0:
            self._close(run, now)
        if gpus == 0:
            self.reclaim_shrink.pop(key, None)  # a regrowth follows a shrink directly, not a restart
        if old > 0 and gpus == 0:
            _, wasted = run.rollback(now, self.opts.checkpoint_seconds)
            k = (f"eviction by {cause}: rolled back", size, since)
            self.lost[k] += wasted
            self.count[k] += 1
            self.pending_cause[key] = (f"eviction by {cause}: restart", size, since)
        super()._resize(run, gpus, now)
        if gpus == 0:
            return
        if old == 0:
            if key in self.pending_cause:
                c, s, r = self.pending_cause.pop(key)
                self.segment[key] = Segment(c, s, r, started=now)
                self.count[(c, s, r)] += 1
            return
        settling = ran < resize_cost.settle(self.opts.restart_seconds, self.config)
        label = f"growth {cause}{' (settling)' if settling else ''}" if gpus > old else f"shrink by {cause}"
        shrunk = self.reclaim_shrink.pop(key, None)
        regrowth = gpus > old and shrunk is not None
        if regrowth:
            self.regrowth[0] += 1
            self.shrink_before_regrowth[0] += 1
            self.shrink_before_regrowth[1] += (shrunk or 0.0) / HOUR
        self.segment[key] = Segment(label, size, since, grown_from=old, started=now, regrowth=regrowth)
        self.count[(label, size, since)] += 1


def table(title: str, rows: dict[str, tuple[int, float]], total: float) -> str:
    lines = [f"| {title} | decisions | lost GPU-h | share |", "|---|---|---|---|"]
    for name, (n, gpu_s) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| {name} | {n:,} | {gpu_s / HOUR:,.1f} | {gpu_s / total:.0%} |")
    return "\n".join(lines)


def group(sim: Watching, index: int, cause_filter: str | None = None) -> dict[str, tuple[int, float]]:
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for k, v in sim.lost.items():
        if cause_filter is not None and not k[0].startswith(cause_filter):
            continue
        out[k[index]][1] += v
    for k, n in sim.count.items():
        if cause_filter is not None and not k[0].startswith(cause_filter):
            continue
        out[k[index]][0] += n
    return {k: (int(v[0]), v[1]) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    parser.prog = "bench/lost_hours.py"
    parser.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    args = parser.parse_args(argv)
    if args.policies == parser.get_default("policies"):
        args.policies = "tide"
    settings = settings_from(args)
    if len(settings.policies) != 1 or settings.policies[0] not in POLICIES:
        parser.error(f"--policies: give one of {', '.join(POLICIES)}")
    name = settings.policies[0]
    rng = random.Random(settings.seed)
    jobs = load_jobs(settings, rng)
    projects = build_projects(settings, jobs)
    nodes = make_nodes(settings.gpus, settings.gpus_per_node, settings.domain_size)
    specs = shape_jobs(jobs, projects, settings.workload, rng, settings.gpus)
    config = policy_config(name, settings.settle_seconds, settings.usage_half_life,
                           least_work_lost=settings.least_work_lost)  # fmt: skip
    shaped = specs if config.elastic else [rigid(s) for s in specs]
    cpu = time.process_time()
    sim = Watching(nodes, projects, shaped, config, settings.sim)
    result = sim.run()
    summary = summarize(name, result)
    total = sum(sim.lost.values())
    by_cause = group(sim, 0)
    out = {
        "policy": name,
        "restart_seconds": settings.sim.restart_seconds,
        "jobs": len(specs),
        "avg_jct_h": summary.avg_jct_h,
        "lost_gpu_h": summary.lost_gpu_h,
        "booked_gpu_h": total / HOUR,
        "resizes": result.counters.resizes,
        "evictions": result.counters.evictions,
        "by_cause": {k: {"decisions": n, "lost_gpu_h": s / HOUR} for k, (n, s) in by_cause.items()},
        "by_size": {k: s / HOUR for k, (_, s) in group(sim, 1).items()},
        "by_ran": {k: s / HOUR for k, (_, s) in group(sim, 2).items()},
        "growth": {k: {"decisions": v[0], "lost_gpu_h": v[1]} for k, v in sim.growth.items()},
        "regrowth": {
            "decisions": sim.regrowth[0],
            "lost_gpu_h": sim.regrowth[1],
            "shrinks_before_gpu_h": sim.shrink_before_regrowth[1],
        },
        "cpu_s": time.process_time() - cpu,
    }
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{name}, restart {settings.sim.restart_seconds:g} s, {len(specs):,} jobs: avg JCT "
          f"{summary.avg_jct_h:.2f} h, lost {summary.lost_gpu_h:,.1f} GPU-h (booked {total / HOUR:,.1f}), "
          f"{result.counters.resizes:,} resizes, {result.counters.evictions:,} evictions, "
          f"{out['cpu_s']:.0f} s CPU")  # fmt: skip
    print()
    print(table("cause", by_cause, total))
    print()
    for title, index in (("GPUs held before", 1), ("ran since its last restart", 2)):
        print(table(title, group(sim, index), total))
        print()
        for cause in ("growth", "shrink", "eviction"):
            rows = group(sim, index, cause)
            if rows:
                print(table(f"{title} ({cause})", rows, total))
                print()
    print("| growth | decisions | its restarts GPU-h |\n|---|---|---|")
    for k, (n, h) in sim.growth.items():
        print(f"| {k} | {n:,} | {h:,.1f} |")
    n, h = sim.regrowth
    print(f"| of which regrowth after a shrink by reclaim | {n:,.0f} | {h:,.1f} "
          f"(and {sim.shrink_before_regrowth[1]:,.1f} in the shrinks before them) |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
