"""PNG plots of simulated runs (matplotlib with the Agg backend; no display needed).

Contract: ``write_plots(out_dir, results)`` writes ``utilisation.png`` (allocated GPUs over time per policy,
hourly averages, with the demand of the first policy), ``allocation.png`` (time-average allocation per
project per policy beside its deserved quota) and ``jct.png`` (CDF of job completion times), and returns
their paths. ``write_report`` adds ``report.md`` (see ``report``) beside them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from scheduler.simulator.replay import RunResult
from scheduler.simulator.report import HOUR, Summary, project_rows, render_markdown


def hourly(series: Sequence[tuple[float, int, int]], end: float, column: int) -> list[float]:
    """Time-average of a step series over each hour of ``[0, end)``."""
    bins = max(1, int(end // HOUR) + 1)
    acc = [0.0] * bins
    for (t, *vals), nxt in zip(series, [*series[1:], (end, 0, 0)], strict=True):
        value, start, stop = vals[column], t, nxt[0]
        while start < stop:
            b = int(start // HOUR)
            edge = min(stop, (b + 1) * HOUR)
            acc[min(b, bins - 1)] += value * (edge - start)
            start = edge
    return [a / HOUR for a in acc]


def _utilisation(path: Path, results: Sequence[tuple[Summary, RunResult]]) -> None:
    fig, ax = plt.subplots(figsize=(10, 4))
    for i, (summary, result) in enumerate(results):
        used = hourly(result.recorder.series, result.end_time, 0)
        ax.plot(range(len(used)), used, label=summary.policy, linewidth=0.8)
        if i == 0:
            demand = hourly(result.recorder.series, result.end_time, 1)
            ax.plot(range(len(demand)), demand, label="demand", color="grey", linestyle=":", linewidth=0.6)
    if results:
        ax.axhline(results[0][1].recorder.capacity, color="black", linewidth=0.6, label="cluster")
    ax.set(xlabel="hour", ylabel="GPUs allocated (hourly mean)", title="Utilisation over time")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _allocation(path: Path, results: Sequence[tuple[Summary, RunResult]]) -> None:
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / max(1, len(results) + 1)
    names: list[str] = []
    for i, (summary, result) in enumerate(results):
        rows = project_rows(result.recorder, result.end_time)
        names = [r.project for r in rows]
        xs = [x + (i + 1) * width for x in range(len(rows))]
        ax.bar(xs, [r.avg_alloc for r in rows], width, label=summary.policy)
        if i == 0:
            ax.bar(range(len(rows)), [r.deserved for r in rows], width, label="deserved", color="grey")
    ax.set_xticks([x + 0.4 for x in range(len(names))], names, rotation=45, fontsize=7)
    ax.set(ylabel="GPUs (time average)", title="Allocation vs deserved quota per project")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _jct(path: Path, results: Sequence[tuple[Summary, RunResult]]) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for summary, result in results:
        jct = sorted(
            ((r.finished_at or 0.0) - r.spec.submit) / HOUR for r in result.runs if r.finished_at is not None
        )
        if jct:
            ax.plot(jct, [(i + 1) / len(jct) for i in range(len(jct))], label=summary.policy)
    ax.set_xscale("log")
    ax.set(xlabel="job completion time (h, log)", ylabel="fraction of jobs", title="JCT distribution")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(out_dir: Path, results: Sequence[tuple[Summary, RunResult]]) -> list[Path]:
    paths = [out_dir / "utilisation.png", out_dir / "allocation.png", out_dir / "jct.png"]
    _utilisation(paths[0], results)
    _allocation(paths[1], results)
    _jct(paths[2], results)
    return paths


def write_report(
    out_dir: str | Path, title: str, settings: Sequence[str], results: Sequence[tuple[Summary, RunResult]]
) -> list[Path]:
    """Write ``report.md`` and the plots into ``out_dir`` (created if missing); return the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(out, results)
    report = out / "report.md"
    report.write_text(render_markdown(title, settings, results, [p.name for p in plots]))
    return [report, *plots]
