"""The sizes and the projects of ``bench/live_scale.py``, shared with ``bench/cycle.py --live-mix``.

Contract: plain data, standard library only (the pure cycle's bench imports it without the service's client
libraries). ``size_of`` is the mix at a number of GPUs; ``project_specs`` lists, in the order the live bench
creates them, the departments and projects it creates at that size: the pure bench builds the same
snapshot from them that the service holds after the submits.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

CLIENTS = 8
GPUS_PER_NODE = 8
DESERVED = 100


@dataclass(frozen=True)
class Size:
    """One size of the run: nodes of 8 GPUs, projects that submit, departments they are in, jobs, clients."""

    nodes: int
    projects: int
    jobs: int
    departments: int = 0
    clients: int = CLIENTS
    submits_per_s: float = 200.0
    peak_rss_mib: float = 1024.0

    @property
    def gpus(self) -> int:
        return self.nodes * GPUS_PER_NODE


def size_of(gpus: int) -> Size:
    """The mix at ``gpus`` GPUs (see ``bench/live_scale.py``)."""
    if gpus == 81920:
        return Size(10240, 800, 40960, departments=40, clients=16, submits_per_s=500.0, peak_rss_mib=2048.0)
    nodes = gpus // GPUS_PER_NODE
    return Size(nodes, max(13, nodes * 101 // 1280), nodes * 4)


def department_specs(size: Size) -> list[dict[str, Any]]:
    """The departments' bodies: ``d0``..., each deserving 100 GPUs per project in it."""
    projects, departments = size.projects, size.departments
    return [
        {"name": f"d{d}", "deserved_gpus": DESERVED * len(range(d, projects, departments))}
        for d in range(departments)
    ]


def project_specs(size: Size) -> list[dict[str, Any]]:
    """The projects' bodies: ``p0``... (deserved 100 GPUs, weights 1-3, in departments round-robin if the size
    has any), then ``r2``, which submits nothing until the R2 check."""
    rng = random.Random(7)
    out: list[dict[str, Any]] = []
    for i in range(size.projects):
        body: dict[str, Any] = {
            "name": f"p{i}",
            "deserved_gpus": DESERVED,
            "over_quota_weight": rng.choice([1, 2, 3]),
        }
        if size.departments:
            body["department"] = f"d{i % size.departments}"
        out.append(body)
    out.append({"name": "r2", "deserved_gpus": DESERVED})
    return out
