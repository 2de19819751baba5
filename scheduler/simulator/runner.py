"""One call that does a whole simulation: load or generate jobs, build the cluster, replay every policy.

Contract: ``run_simulation(settings)`` is deterministic in ``settings`` (the seed included): it loads the
trace (or generates a synthetic one), derives projects and job shapes once, replays them through the core's
``plan_cycle`` under each requested policy, and, when ``settings.out_dir`` is set, writes the report there.
Policies (all through the same ``plan_cycle``; only ``Config`` switches and job shapes differ):

- ``tide``: borrowing and elastic jobs (``Config()``).
- ``whole-job``: borrowing, every job rigid at its requested size, reclaim evicts whole jobs
  (``Config(elastic=False)``), as KAI-Scheduler or Kueue do for a PyTorchJob.
- ``static``: each team only its quota, rigid jobs (``Config(borrowing=False, elastic=False)``), like a
  plain Kubernetes ResourceQuota.

``usage_half_life`` (seconds, 0 = off) turns on fair share over time (R14) for the policies that borrow;
their name in the report then says so (``tide, half-life 24 h``). ``least_work_lost=False`` turns R5's
least-work-lost tie-break off (equal victims go newest first, as before it); the name says ``newest first``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO

from scheduler.core import Config, Project
from scheduler.simulator.eta import EtaRow, EtaSimulator, accuracy
from scheduler.simulator.plots import write_report
from scheduler.simulator.replay import ProgressHook, RunResult, SimOptions, Simulator
from scheduler.simulator.report import Summary, summarize
from scheduler.simulator.trace import (
    SyntheticSpec,
    TraceJob,
    fold_teams,
    load_philly,
    load_vc_sizes,
    pollux_slice,
    synthetic,
)
from scheduler.simulator.workload import (
    JobSpec,
    WorkloadOptions,
    load_quota_file,
    make_nodes,
    rigid,
    scale_quotas,
    shape_jobs,
)

POLICIES: dict[str, Config] = {
    "tide": Config(),
    "whole-job": Config(elastic=False),
    "static": Config(borrowing=False, elastic=False),
}


@dataclass(frozen=True, slots=True)
class SimulationSettings:
    """Everything a simulation depends on. ``trace=None`` means a synthetic workload from ``synthetic``."""

    trace: Path | None = None
    vc_sizes: Path | None = None
    quotas: Path | None = None
    gpus: int = 64
    gpus_per_node: int = 8
    domain_size: int = 0  # nodes per topology domain (R17); 0: no domains
    pollux_slice: bool = False
    slice_jobs: int = 160
    slice_hours: float = 8.0
    max_jobs: int | None = None
    synthetic: SyntheticSpec = field(default_factory=SyntheticSpec)
    workload: WorkloadOptions = field(default_factory=WorkloadOptions)
    sim: SimOptions = field(default_factory=SimOptions)
    settle_seconds: float = 10.0
    usage_half_life: float = 0.0
    least_work_lost: bool = True
    policies: tuple[str, ...] = ("tide", "whole-job", "static")
    seed: int = 0
    out_dir: Path | None = None
    eta_every: int = 0  # ask for an ETA at every N-th submission and measure it (0: never)
    eta_declared: bool = False  # ETAs from the jobs' true run times, as if declared (else from history)
    eta_log: Path | None = (
        None  # JSON lines of each ETA and start (one file per policy: -POLICY added if several)
    )


@dataclass(frozen=True, slots=True)
class SimulationReport:
    summaries: tuple[Summary, ...]
    results: tuple[RunResult, ...]
    wall_seconds: tuple[float, ...]
    cpu_seconds: tuple[float, ...]
    settings_text: tuple[str, ...]
    files: tuple[Path, ...] = ()
    eta: tuple[tuple[EtaRow, ...], ...] = ()  # per policy, when ``eta_every`` is set


def load_jobs(settings: SimulationSettings, rng: random.Random) -> list[TraceJob]:
    if settings.trace is None:
        return synthetic(settings.synthetic, rng)
    jobs = load_philly(settings.trace)
    if settings.vc_sizes is not None and settings.quotas is None:
        jobs = fold_teams(jobs, load_vc_sizes(settings.vc_sizes))
    if settings.pollux_slice:
        jobs = pollux_slice(jobs, rng, settings.slice_jobs, settings.slice_hours)
    return jobs[: settings.max_jobs] if settings.max_jobs is not None else jobs


def build_projects(settings: SimulationSettings, jobs: Sequence[TraceJob]) -> tuple[Project, ...]:
    if settings.quotas is not None:
        return load_quota_file(settings.quotas)
    sizes = load_vc_sizes(settings.vc_sizes) if settings.vc_sizes is not None else {}
    return scale_quotas(sizes, [j.team for j in jobs], settings.gpus)


def policy_config(
    name: str, settle_seconds: float, usage_half_life: float = 0.0, *, least_work_lost: bool = True
) -> Config:
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    config = POLICIES[name]
    half_life = usage_half_life if config.borrowing else 0.0
    return replace(
        config, settle_seconds=settle_seconds, usage_half_life=half_life, least_work_lost=least_work_lost
    )


def policy_label(name: str, config: Config) -> str:
    """The policy's name in reports: with R14 on, the half-life too; with R5's tie-break off, says so."""
    if not config.least_work_lost:
        name = f"{name}, newest first"
    if config.usage_half_life <= 0:
        return name
    return f"{name}, half-life {config.usage_half_life / 3600:g} h"


def describe(settings: SimulationSettings, projects: Sequence[Project], jobs: int) -> tuple[str, ...]:
    w, s = settings.workload, settings.sim
    source = str(settings.trace) if settings.trace else f"synthetic {settings.synthetic}"
    if settings.pollux_slice:
        source += f" (slice: {settings.slice_jobs} jobs from the busiest {settings.slice_hours:g} h)"
    quotas = ", ".join(f"{p.name}={p.deserved_gpus}" for p in projects)
    return (
        f"workload: {source}; {jobs} jobs; seed {settings.seed}",
        f"cluster: {settings.gpus} GPUs on {settings.gpus_per_node}-GPU nodes"
        + (f" in topology domains of {settings.domain_size} nodes" if settings.domain_size else "")
        + f"; quotas: {quotas}",
        f"jobs: {w.elastic_share:.0%} of training jobs elastic from ceil({w.min_fraction:g} x requested) to "
        f"{w.max_factor:g} x requested replicas (baselines: rigid at requested size); "
        f"{w.interactive_share:.0%} of 1-GPU jobs interactive; requests clamped to the team quota: "
        f"{w.clamp_to_quota}",
        f"speed: requested x (allocated/requested)^{s.efficiency:g}; restart {s.restart_seconds:g} s per "
        f"resize or restart; checkpoint every {s.checkpoint_seconds:g} s (eviction loses work since); "
        "equal victims: "
        + ("least work lost first (R5)" if settings.least_work_lost else "newest first (tie-break off)"),
        f"loop: cycle every {s.cycle_seconds:g} s when something changed; "
        f"settle {settings.settle_seconds:g} s; "
        f"R2 bound = grace {s.grace_seconds:g} s + one cycle",
        "fair share over time (R14): "
        + (f"usage half-life {settings.usage_half_life:g} s" if settings.usage_half_life > 0 else "off"),
    )


def _eta_log(settings: SimulationSettings, policy: str) -> TextIO | None:
    path = settings.eta_log
    if path is None or not settings.eta_every:
        return None
    if len(settings.policies) > 1:
        path = path.with_name(f"{path.stem}-{policy}{path.suffix}")
    return path.open("w")


def run_simulation(
    settings: SimulationSettings, progress: Callable[[str, int], ProgressHook] | None = None
) -> SimulationReport:
    """Run every policy in ``settings.policies``; ``progress(policy, jobs)`` may return a progress hook."""
    rng = random.Random(settings.seed)
    jobs = load_jobs(settings, rng)
    projects = build_projects(settings, jobs)
    nodes = make_nodes(settings.gpus, settings.gpus_per_node, settings.domain_size)
    specs = shape_jobs(jobs, projects, settings.workload, rng, settings.gpus)
    summaries, results, walls, cpus = [], [], [], []
    etas: list[tuple[EtaRow, ...]] = []
    for name in settings.policies:
        config = policy_config(
            name, settings.settle_seconds, settings.usage_half_life, least_work_lost=settings.least_work_lost
        )
        shaped: list[JobSpec] = specs if config.elastic else [rigid(s) for s in specs]
        hook = progress(name, len(shaped)) if progress is not None else None
        began, cpu = time.perf_counter(), time.process_time()
        log = _eta_log(settings, name)
        sim = (
            EtaSimulator(
                nodes,
                projects,
                shaped,
                config,
                settings.sim,
                every=settings.eta_every,
                declared=settings.eta_declared,
                log=log,
            )
            if settings.eta_every
            else Simulator(nodes, projects, shaped, config, settings.sim)
        )
        try:
            result = sim.run(hook)
        finally:
            if log is not None:
                log.close()
        walls.append(time.perf_counter() - began)
        cpus.append(time.process_time() - cpu)
        summaries.append(summarize(policy_label(name, config), result))
        if isinstance(sim, EtaSimulator):
            etas.append(accuracy(sim.samples, result.runs, settings.sim.cycle_seconds))
        results.append(result)
    text = describe(settings, projects, len(specs))
    report = SimulationReport(
        tuple(summaries), tuple(results), tuple(walls), tuple(cpus), text, eta=tuple(etas)
    )
    if settings.out_dir is None:
        return report
    pairs = list(zip(summaries, results, strict=True))
    files = write_report(settings.out_dir, "Tide simulation", text, pairs)
    return replace(report, files=tuple(files))
