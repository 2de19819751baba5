"""From trace rows to what the scheduler sees: projects with quotas, nodes, and job shapes.

Contract:
- ``scale_quotas`` splits the cluster's GPUs among the teams present in the workload in proportion to their
  published virtual-cluster sizes (largest remainder, ties by name), so the quotas add up to the cluster;
  a team with no published size weighs ``default_nodes`` nodes. ``load_quota_file`` reads the same from YAML.
- ``shape_jobs`` decides, with the ``random.Random`` passed in, which jobs are elastic and which interactive,
  and their replica ranges (the defaults are stated in ``WorkloadOptions`` and in every report).
- A job's work is ``duration x gpus`` GPU-seconds at its requested size; ``rigid`` pins a job at that size
  (what the baselines run, and what ``Config(elastic=False)`` expects).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from scheduler.core import Node, Project
from scheduler.simulator.trace import TraceJob


@dataclass(frozen=True, slots=True)
class WorkloadOptions:
    """How trace jobs become Tide jobs.

    ``elastic_share`` of training jobs are elastic, from ``ceil(min_fraction x requested)`` to
    ``max_factor x requested`` replicas; ``interactive_share`` of single-GPU jobs are interactive (never
    elastic, never evicted). A replica is 8 GPUs (one node) for requests of 8 or more, else 1 GPU.
    ``clamp_to_quota`` shrinks a request larger than its team's quota to that quota (work shrinks with it),
    so that static partitioning can run every job; it applies equally to every policy.
    """

    elastic_share: float = 0.8
    min_fraction: float = 0.5
    max_factor: float = 2.0
    interactive_share: float = 0.05
    clamp_to_quota: bool = True


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job as submitted: requested ``gpus`` (= ``requested_replicas x gpus_per_replica``) and its work."""

    project: str
    name: str
    submit: float
    work: float
    gpus: int
    gpus_per_replica: int
    min_replicas: int
    max_replicas: int
    interactive: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.project, self.name)

    @property
    def requested_replicas(self) -> int:
        return self.gpus // self.gpus_per_replica


def rigid(spec: JobSpec) -> JobSpec:
    """The same job pinned at its requested size (baselines without elasticity)."""
    return replace(spec, min_replicas=spec.requested_replicas, max_replicas=spec.requested_replicas)


def largest_remainder(weights: Mapping[str, float], total: int) -> dict[str, int]:
    """Split ``total`` in proportion to ``weights``: floors, then +1 by largest remainder, ties by name."""
    whole = sum(weights.values())
    if whole <= 0:
        return dict.fromkeys(weights, 0)
    exact = {k: total * w / whole for k, w in weights.items()}
    out = {k: math.floor(v) for k, v in exact.items()}
    order = sorted(exact, key=lambda k: (-(exact[k] - out[k]), k))
    for k in order[: total - sum(out.values())]:
        out[k] += 1
    return out


def scale_quotas(
    vc_nodes: Mapping[str, int], teams: Sequence[str], total_gpus: int, default_nodes: int = 1
) -> tuple[Project, ...]:
    """Quotas for ``teams`` in proportion to their VC sizes, adding up to ``total_gpus``."""
    weights = {t: float(vc_nodes.get(t, default_nodes)) for t in sorted(set(teams))}
    return tuple(Project(name, q) for name, q in largest_remainder(weights, total_gpus).items())


def _project_from_yaml(name: str, value: Any) -> Project:
    if isinstance(value, int):
        return Project(name, value)
    if not isinstance(value, dict) or "deserved_gpus" not in value:
        raise ValueError(f"project {name!r}: give an integer quota or a mapping with deserved_gpus")
    limit = value.get("limit_gpus")
    return Project(
        name,
        int(value["deserved_gpus"]),
        over_quota_weight=float(value.get("over_quota_weight", 1.0)),
        limit_gpus=None if limit is None else int(limit),
        allow_over_quota=bool(value.get("allow_over_quota", True)),
    )


def load_quota_file(path: str | Path) -> tuple[Project, ...]:
    """YAML ``projects: {a: 16}`` or ``{a: {deserved_gpus: 16, over_quota_weight: 2, limit_gpus: 24}}``."""
    data = yaml.safe_load(Path(path).read_text())
    projects = data.get("projects") if isinstance(data, dict) else None
    if not isinstance(projects, dict):
        raise ValueError(f"{path}: expected a top-level 'projects' mapping")
    return tuple(_project_from_yaml(str(k), v) for k, v in sorted(projects.items()))


def make_nodes(total_gpus: int, gpus_per_node: int = 8, domain_size: int = 0) -> tuple[Node, ...]:
    """``total_gpus`` GPUs on nodes of ``gpus_per_node`` (the last one smaller if it does not divide);
    ``domain_size`` > 0 puts them in topology domains of that many nodes, in order (R17)."""
    count = math.ceil(total_gpus / gpus_per_node)
    sizes = [gpus_per_node] * (count - 1) + [total_gpus - gpus_per_node * (count - 1)]
    return tuple(
        Node(f"node{i:04d}", g, domain=f"domain{i // domain_size:03d}" if domain_size > 0 else None)
        for i, g in enumerate(sizes)
    )


def _shape(job: TraceJob, gpus: int, opts: WorkloadOptions, rng: random.Random) -> JobSpec:
    per = 8 if gpus >= 8 and gpus % 8 == 0 else 1
    want = gpus // per
    interactive = gpus == 1 and rng.random() < opts.interactive_share
    elastic = not interactive and rng.random() < opts.elastic_share
    low = max(1, math.ceil(want * opts.min_fraction)) if elastic else want
    high = max(want, math.floor(want * opts.max_factor)) if elastic else want
    return JobSpec(job.team, job.name, job.submit, job.duration * gpus, gpus, per, low, high, interactive)


def shape_jobs(
    jobs: Sequence[TraceJob],
    projects: Sequence[Project],
    opts: WorkloadOptions,
    rng: random.Random,
    cluster_gpus: int,
) -> list[JobSpec]:
    """Trace jobs -> ``JobSpec``s. Jobs of teams without a project are an error (fold them first)."""
    quota = {p.name: p.deserved_gpus for p in projects}
    out = []
    for job in jobs:
        if job.team not in quota:
            raise ValueError(f"job {job.name}: team {job.team!r} has no project")
        cap = max(1, quota[job.team]) if opts.clamp_to_quota else cluster_gpus
        gpus = min(job.gpus, cap, cluster_gpus)
        spec = _shape(job, gpus, opts, rng)
        top = max(spec.requested_replicas, cluster_gpus // spec.gpus_per_replica)
        out.append(replace(spec, max_replicas=min(spec.max_replicas, top)))
    return out
