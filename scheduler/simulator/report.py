"""Summaries of simulated runs and the report written to an output directory.

Contract: ``summarize`` turns a ``RunResult`` into plain numbers (hours for times, GPU-hours for work), the
same numbers for the same result. ``write_report`` writes ``report.md`` (comparison table, per-project
table, the settings and definitions used) and three PNG plots (matplotlib, Agg backend): utilisation over
time, allocation against deserved quota per project, and the JCT distribution (see ``plots``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.simulator.metrics import Recorder
from scheduler.simulator.replay import RunResult

HOUR = 3600.0


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class Summary:
    policy: str
    jobs: int
    finished: int
    avg_jct_h: float
    p50_jct_h: float
    p95_jct_h: float
    avg_queue_h: float
    p50_queue_h: float
    p95_queue_h: float
    utilisation: float
    utilisation_arrivals: float
    demand_served: float
    guarantee_worst: float
    longest_below_s: float
    longest_below_running_s: float
    borrowed_gpu_h: float
    resizes: int
    evictions: int
    churn: int
    lost_gpu_h: float
    fairness: float
    daily_fairness: float
    cycles: int
    makespan_h: float
    # R17: share of gangs started on several nodes that started inside one topology domain (NaN: no domains)
    one_domain_share: float = math.nan


@dataclass(frozen=True, slots=True)
class ProjectRow:
    project: str
    deserved: int
    avg_alloc: float
    honoured: float
    longest_below_s: float
    longest_below_running_s: float
    borrowed_gpu_h: float
    lent_gpu_h: float


def project_rows(rec: Recorder, makespan: float) -> list[ProjectRow]:
    span = makespan or 1.0
    return [
        ProjectRow(
            name,
            t.deserved,
            t.alloc / span,
            t.honoured / t.guaranteed if t.guaranteed else 1.0,
            t.longest_below,
            t.longest_below_running,
            t.borrowed / HOUR,
            t.lent / HOUR,
        )
        for name, t in rec.projects.items()
    ]


def used_until(series: Sequence[tuple[float, int, int]], end: float) -> float:
    """GPU-seconds allocated over ``[0, end)`` from the step series ``(time, used, demand)``."""
    total = 0.0
    for (t, used, _), nxt in zip(series, [*series[1:], (end, 0, 0)], strict=True):
        total += used * max(0.0, min(nxt[0], end) - t)
    return total


def summarize(policy: str, result: RunResult) -> Summary:
    done = [r for r in result.runs if r.finished_at is not None]
    jct = [(r.finished_at or 0.0) - r.spec.submit for r in done]
    queue = [(r.first_start or 0.0) - r.spec.submit for r in result.runs if r.first_start is not None]
    rec, c = result.recorder, result.counters
    rows = project_rows(rec, result.end_time)
    span = result.end_time or 1.0
    last = max((r.spec.submit for r in result.runs), default=0.0)
    return Summary(
        policy=policy,
        jobs=len(result.runs),
        finished=len(done),
        avg_jct_h=sum(jct) / len(jct) / HOUR if jct else math.nan,
        p50_jct_h=percentile(jct, 50) / HOUR,
        p95_jct_h=percentile(jct, 95) / HOUR,
        avg_queue_h=sum(queue) / len(queue) / HOUR if queue else math.nan,
        p50_queue_h=percentile(queue, 50) / HOUR,
        p95_queue_h=percentile(queue, 95) / HOUR,
        utilisation=rec.used_time / (rec.capacity * span),
        utilisation_arrivals=used_until(rec.series, last) / (rec.capacity * last) if last else math.nan,
        demand_served=rec.served_time / rec.servable_time if rec.servable_time else 1.0,
        guarantee_worst=min((r.honoured for r in rows), default=1.0),
        longest_below_s=max((r.longest_below_s for r in rows), default=0.0),
        longest_below_running_s=max((r.longest_below_running_s for r in rows), default=0.0),
        borrowed_gpu_h=sum(r.borrowed_gpu_h for r in rows),
        resizes=c.resizes,
        evictions=c.evictions,
        churn=c.churn,
        lost_gpu_h=(c.restart_loss + c.eviction_loss) / HOUR,
        fairness=rec.fairness_time / rec.fairness_weight if rec.fairness_weight else 1.0,
        daily_fairness=rec.daily_fairness(),
        cycles=c.cycles,
        makespan_h=span / HOUR,
        one_domain_share=_one_domain_share(result),
    )


def _one_domain_share(result: RunResult) -> float:
    c = result.counters
    if not c.multi_node_starts or not result.domains:
        return math.nan
    return c.one_domain_starts / c.multi_node_starts


COLUMNS = (
    ("policy", "policy", "{}"),
    ("finished", "finished", "{}"),
    ("avg JCT h", "avg_jct_h", "{:.2f}"),
    ("p50 JCT h", "p50_jct_h", "{:.2f}"),
    ("p95 JCT h", "p95_jct_h", "{:.2f}"),
    ("avg queue h", "avg_queue_h", "{:.2f}"),
    ("p50 queue h", "p50_queue_h", "{:.2f}"),
    ("p95 queue h", "p95_queue_h", "{:.2f}"),
    ("util % (arrivals)", "utilisation_arrivals", "{:.1%}"),
    ("util % (makespan)", "utilisation", "{:.1%}"),
    ("demand served %", "demand_served", "{:.1%}"),
    ("worst guarantee %", "guarantee_worst", "{:.1%}"),
    ("longest R2 wait s", "longest_below_s", "{:.0f}"),
    ("longest R2 wait, running GPUs only s", "longest_below_running_s", "{:.0f}"),
    ("borrowed GPU-h", "borrowed_gpu_h", "{:.0f}"),
    ("resizes", "resizes", "{}"),
    ("evictions", "evictions", "{}"),
    ("churn", "churn", "{}"),
    ("lost GPU-h", "lost_gpu_h", "{:.1f}"),
    ("fairness", "fairness", "{:.3f}"),
    ("over-quota fairness per day", "daily_fairness", "{:.3f}"),
    ("multi-node gangs in one domain %", "one_domain_share", "{:.1%}"),
    ("cycles", "cycles", "{}"),
)


def comparison_table(summaries: Sequence[Summary]) -> str:
    """Markdown table, one row per policy."""
    head = "| " + " | ".join(c[0] for c in COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in COLUMNS) + "|"
    rows = [
        "| " + " | ".join(fmt.format(getattr(s, attr)) for _, attr, fmt in COLUMNS) + " |" for s in summaries
    ]
    return "\n".join([head, rule, *rows])


def project_table(rows: Sequence[ProjectRow]) -> str:
    lines = [
        "| project | deserved | avg alloc | guarantee honoured | longest R2 wait s | running GPUs only s "
        "| borrowed GPU-h | lent GPU-h |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.project} | {r.deserved} | {r.avg_alloc:.1f} | {r.honoured:.1%} | {r.longest_below_s:.0f} "
        f"| {r.longest_below_running_s:.0f} | {r.borrowed_gpu_h:.0f} | {r.lent_gpu_h:.0f} |"
        for r in rows
    ]
    return "\n".join(lines)


def render_markdown(
    title: str, settings: Sequence[str], results: Sequence[tuple[Summary, RunResult]], plots: Sequence[str]
) -> str:
    parts = [f"# {title}", "", "## Comparison", "", comparison_table([s for s, _ in results]), ""]
    for summary, result in results:
        parts += [f"## Per project: {summary.policy}", ""]
        parts += [project_table(project_rows(result.recorder, result.end_time)), ""]
        parts += [f"- warning: {w}" for w in result.counters.warnings]
    parts += ["## Settings", "", *[f"- {line}" for line in settings], ""]
    parts += ["## Plots", "", *[f"![{p}]({p})" for p in plots], ""]
    return "\n".join(parts)
