"""What the carry patches from the last cycle's where only jobs changed equals what is computed whole.

The ledger's job index (``jobindex``) and R1's demand (``fairshare.placeable_demand``).

The engine's snapshot changes by a few jobs a cycle: a submit, a start, a shrink, a finish. Random snapshots
of jobs on nodes (some replicas being released, some on nodes gone from the snapshot, some on cordoned
nodes, interactive jobs in departments, jobs of a project that no longer exists) go through random changes
of that kind; after each, the index patched from the last one must be the index built from scratch: every
field, with ``jobs`` and the lists in the same order (the claim pass walks them in key order), and what the
passes compute from it on first use (the projects' lines and claimants, the jobs running short, the jobs on
each node), whether the last index had computed them (the patch keeps them where the jobs they come from did
not change) or not; and so must the demand.
"""

from __future__ import annotations

import random
from dataclasses import asdict, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core import jobindex
from scheduler.core.carry import Carry, JobChanges
from scheduler.core.fairshare import DEPARTMENT, PROJECT, Top, patched_demand, placeable_demand
from scheduler.core.model import ClusterState, Job, Node, Project, Replica

NODES = [f"n{i}" for i in range(6)]
KNOWN = set(NODES[:5])  # n5 is gone from the snapshot
SCHEDULABLE = NODES[:4]  # n4 is cordoned
PROJECTS = {
    "a": Project("a", 4, department="d"),
    "b": Project("b", 4, department="d"),
    "c": Project("c", 2),
}


def _top(project: str) -> Top:
    department = PROJECTS[project].department
    return Top(DEPARTMENT, department) if department is not None else Top(PROJECT, project)


def _job(rng: random.Random, name: str) -> Job:
    project = rng.choice([*PROJECTS, "gone"])
    lo = rng.randint(1, 3)
    replicas = tuple(
        Replica(i, rng.choice(NODES), rng.choice([1, 2]), releasing=rng.random() < 0.2)
        for i in rng.sample(range(6), rng.choice([0, 0, 1, 2, 3]))
    )
    return Job(project, name, lo, lo + rng.randint(0, 2), interactive=rng.random() < 0.3, replicas=replicas)


def _changed(rng: random.Random, jobs: tuple[Job, ...], serial: list[int]) -> tuple[Job, ...]:
    """A few jobs submitted, finished or changed (a new object for the same job); the rest the same objects,
    in the snapshot's order or shuffled."""
    out = list(jobs)
    for _ in range(rng.randint(0, 3)):
        move = rng.random()
        if move < 0.35 or not out:
            serial[0] += 1
            out.insert(rng.randrange(len(out) + 1), _job(rng, f"j{serial[0]}"))
        elif move < 0.6:
            del out[rng.randrange(len(out))]
        else:
            i = rng.randrange(len(out))
            fresh = _job(rng, out[i].name)
            out[i] = replace(fresh, project=out[i].project)
    if rng.random() < 0.2:
        rng.shuffle(out)
    return tuple(out)


UNORDERED = {"active", "held_gpus", "lines"}  # only looked up: their order may differ


def _fields(index: jobindex.Index) -> dict[str, object]:
    """Every field, the walked dicts as lists of their items (so their order counts)."""
    return {
        name: list(value.items()) if isinstance(value, dict) and name not in UNORDERED else value
        for name, value in asdict(index).items()
    } | {"by_project": [(p, list(keys)) for p, keys in index.by_project.items()]}


def _computed(index: jobindex.Index, rigid: bool, projects: list[str]) -> jobindex.Index:
    """``index`` with what the passes compute from it on first use made for ``projects`` (lines) and whole
    (claimants, the jobs running short, the jobs on each node), as the claim pass makes them."""
    for project in projects:
        jobindex.line(index, project)
    jobindex.claimants(index, elastic=not rigid)
    jobindex.short(index)
    jobindex.jobs_on_node(index)
    return index


def _build(jobs: tuple[Job, ...], rigid: bool) -> jobindex.Index:
    return jobindex.build(jobs, PROJECTS, _top, KNOWN, SCHEDULABLE, rigid=rigid)


def _patch(index: jobindex.Index, changes: JobChanges, rigid: bool) -> jobindex.Index:
    return jobindex.patch(index, changes, projects=PROJECTS, top_key=_top, known=KNOWN, rigid=rigid)


SIZES = [
    8,
    8,
    4,
    2,
]  # the schedulable nodes' GPUs: a job of 16 replicas of 2 never fits, one of 3 x 8 does not


def _demand(jobs: tuple[Job, ...]) -> dict[str, int]:
    nodes = tuple(Node(f"n{i}", g) for i, g in enumerate(SIZES))
    return placeable_demand(ClusterState(nodes, tuple(PROJECTS.values()), jobs), SIZES)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.booleans())
def test_a_patched_index_is_the_index_built_whole(seed: int, rigid: bool) -> None:
    rng = random.Random(seed)
    serial = [0]
    jobs = tuple(_job(rng, f"j{serial[0] + i}") for i in range(40))
    serial[0] += 40
    index, demand = _build(jobs, rigid), _demand(jobs)
    for _ in range(12):
        after = _changed(rng, jobs, serial)
        if len({j.key for j in after}) < len(after):
            continue  # two jobs of one name: not a snapshot
        changes = Carry().changed_jobs(jobs, after)
        assert changes is not None  # at most 3 of 40 changed
        if rng.random() < 0.7:  # the last cycle's passes computed some or all of it
            _computed(index, rigid, rng.sample(sorted(PROJECTS), rng.randint(0, len(PROJECTS))))
        kept, counted = _fields(index), dict(demand)
        patched = _patch(index, changes, rigid)
        more = patched_demand(demand, changes, SIZES)
        assert _fields(index) == kept and demand == counted  # what was kept is left as it was
        fresh = _build(after, rigid)
        if index.claimants is None:  # nothing computed to keep: the patch starts without it
            assert _fields(patched) == _fields(fresh)
        every = list(PROJECTS)
        assert _fields(_computed(patched, rigid, every)) == _fields(_computed(fresh, rigid, every))
        assert more == _demand(after)
        jobs, index, demand = after, patched, more


def test_more_than_a_quarter_changed_is_computed_whole() -> None:
    rng = random.Random(7)
    jobs = tuple(_job(rng, f"j{i}") for i in range(8))
    carry = Carry()
    some = (*jobs[:6], _job(rng, "new"), _job(rng, "newer"))  # 2 gone, 2 new: 4 of 8
    assert carry.changed_jobs(jobs, some) is None
    fewer = jobs[1:]  # 1 of 7
    changes = carry.changed_jobs(jobs, fewer)
    assert changes is not None and changes.gone == [jobs[0]] and not changes.came
    assert carry.changed_jobs(jobs, fewer) is changes  # the last pair's, remembered
    assert _fields(_patch(_build(jobs, False), changes, False)) == _fields(_build(fewer, False))


@pytest.mark.parametrize("rigid", [False, True])
def test_an_elastic_job_is_indexed_rigid_at_its_max_with_elastic_scaling_off(rigid: bool) -> None:
    others = tuple(Job("c", f"o{i}", 1, 1) for i in range(4))
    job = Job("a", "x", 1, 3, replicas=(Replica(0, "n0", 1),))
    index = _build((*others, job), rigid)
    changes = Carry().changed_jobs(others, (*others, job))
    assert changes is not None
    assert index.jobs[job.key].min_replicas == (3 if rigid else 1)
    assert _fields(_patch(_build(others, rigid), changes, rigid)) == _fields(index)
