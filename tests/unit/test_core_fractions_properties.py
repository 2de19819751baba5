"""Property tests for GPU fractions (R20): random clusters with whole-GPU and fractional jobs in the mix.

Every cycle checks R20's invariants (no shared GPU booked above 1, a whole-GPU replica never on a shared GPU,
a GPU shared by one project and kind only, fractional gangs whole, whole and shared GPUs within each node) and
R1-R19 on the whole-GPU view (``corebuild.Cluster.cycle``); every plan is the same with the snapshot shuffled.
"""

from __future__ import annotations

import os
import random
from fractions import Fraction

from corebuild import Cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_core_properties import Spec, _check_determinism, workloads

from scheduler.core.fractions import booked_per_gpu

SHARES = [Fraction(1, 20), Fraction(1, 4), Fraction(1, 3), Fraction(1, 2), Fraction(1, 2), Fraction(7, 10)]


def _replay(
    c: Cluster, specs: list[Spec], rng: random.Random, fractional: list[bool], steps: int = 9
) -> None:
    projects = [p.name for p in c.state.projects]
    started: dict[str, int] = {}
    for step in range(steps):
        for i, s in enumerate(specs):
            if s.arrives != step:
                continue
            project = projects[s.project % len(projects)]
            if fractional[i % len(fractional)]:
                c.submit(
                    project,
                    f"j{i}",
                    min=s.min,
                    max=s.min,
                    gpu_fraction=SHARES[(i + s.lasts) % len(SHARES)],
                    interactive=s.interactive and i % 3 == 0,
                    priority=s.priority,
                )
            else:
                c.submit(project, f"j{i}", min=s.min, max=s.min + s.extra, gpus=s.gpus, priority=s.priority)
        for job in c.state.jobs:
            if job.active:
                started.setdefault(job.name, step)
            if job.name in started and step - started[job.name] >= specs[int(job.name[1:])].lasts:
                c.finish(job.project, job.name)
        if c.slow_release and step % 2:
            c.release_done()
        _check_determinism(c, rng)
        c.cycle()  # asserts every invariant
        assert all(b <= 1 for b in booked_per_gpu(c.state.jobs).values())


@settings(
    max_examples=int(os.environ.get("TIDE_PROPERTY_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(workloads(), st.lists(st.booleans(), min_size=1, max_size=6))
def test_invariants_hold_with_fractional_jobs_in_the_mix(
    w: tuple[Cluster, list[Spec], random.Random], fractional: list[bool]
) -> None:
    _replay(*w, fractional)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_fractions_of_one_project_never_take_more_gpus_than_whole_ones_would(
    w: tuple[Cluster, list[Spec], random.Random],
) -> None:
    """Packing: a project's shared GPUs never outnumber its fractional replicas, and at most one of its
    shared GPUs of each kind is at most half booked (first-fit leaves at most one such bin per opening)."""
    c, specs, rng = w
    _replay(c, specs, rng, [True])
    shared: dict[tuple[str, bool], set[tuple[str, int]]] = {}
    replicas: dict[tuple[str, bool], int] = {}
    for job in c.state.jobs:
        for r in job.active:
            if r.gpu is not None:
                shared.setdefault((job.project, job.interactive), set()).add((r.node, r.gpu))
                replicas[(job.project, job.interactive)] = replicas.get((job.project, job.interactive), 0) + 1
    for pool, gpus in shared.items():
        assert len(gpus) <= replicas[pool]
