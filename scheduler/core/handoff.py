"""Starts a plan holds GPUs for, made the moment those GPUs are free instead of a plan later.

Contract: a plan gives a job owed GPUs that are still being released a firm ``Reservation`` (the job starts
there) instead of a ``Start`` (``scheduler.core.plan``). ``held_starts(state, plan)`` lists those starts: each
job waiting with no replica in ``state`` (whole GPUs) whose firm holds make a size it may run at, at least its
``min_replicas`` (at most ``max_replicas``; the replicas in the order of its holds, so the first hosts the
master), with the plan's note on it. ``due_starts(held, free)`` returns, for each of them whose GPUs are all
free now (``free``: per node, the GPUs no replica holds or is placed on), the ``Start`` its holds stand for, in
the plan's order, each taking its GPUs from ``free`` before the next is looked at; the others keep waiting.

Pure, like the rest of the core. The live engine calls it between cycles (its release turns), so a claimant
starts as its victims exit instead of in the next cycle (a cycle takes over a second at 81,920 GPUs); the next
plan sees it running. Nothing is started that the plan did not hold GPUs for, and only on those GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass

from scheduler.core import sizes
from scheduler.core.explain import counted
from scheduler.core.model import ClusterState, Job
from scheduler.core.plan import Action, Decision, Placement, Plan


@dataclass(frozen=True, slots=True)
class HeldStart:
    """A start a plan holds GPUs for: ``replicas`` on the held GPUs, and why it was waiting (the plan's note)."""

    job: Job
    replicas: tuple[Placement, ...]
    waiting: str

    @property
    def gpus_by_node(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.replicas:
            out[p.node] = out.get(p.node, 0) + p.gpus
        return out


def held_starts(state: ClusterState, plan: Plan) -> tuple[HeldStart, ...]:
    """The starts ``plan`` holds GPUs for, in the order of its holds (see the module's contract)."""
    held: dict[tuple[str, str], dict[str, int]] = {}
    for r in plan.reservations:
        if r.firm:
            by_node = held.setdefault((r.project, r.job), {})
            by_node[r.node] = by_node.get(r.node, 0) + r.gpus
    if not held:
        return ()
    jobs = {job.key: job for job in state.jobs if job.key in held}
    notes = {(n.project, n.job): n.reason for n in plan.notes if (n.project, n.job) in held}
    out: list[HeldStart] = []
    for key, by_node in held.items():
        job = jobs.get(key)
        if job is None or job.replicas or job.gpu_fraction is not None or job.gpus_per_replica <= 0:
            continue  # a running job's growth restarts it: it waits for the next plan (as does a fraction)
        replicas = tuple(_placements(job, by_node))
        if replicas:
            out.append(HeldStart(job, replicas, notes.get(key, "GPUs were being released for it")))
    return tuple(out)


def _placements(job: Job, by_node: Mapping[str, int]) -> Iterable[Placement]:
    """The replicas the holds make, at the largest size the job may run at, or none below its minimum."""
    g = job.gpus_per_replica
    slots = [node for node, gpus in by_node.items() for _ in range(gpus // g)]
    count = max((n for n in sizes.sizes(job) if n <= len(slots)), default=0)
    return (Placement(i, node, g) for i, node in enumerate(slots[:count]))


def due_starts(held: Iterable[HeldStart], free: MutableMapping[str, int]) -> list[Decision]:
    """The held starts whose GPUs are all free now, as decisions; their GPUs are taken from ``free``."""
    out: list[Decision] = []
    for start in held:
        wanted = start.gpus_by_node
        if any(free.get(node, 0) < gpus for node, gpus in wanted.items()):
            continue
        for node, gpus in wanted.items():
            free[node] -= gpus
        job = start.job
        reason = (
            f"started {counted(len(start.replicas), 'replica')} on the GPUs held for it as soon as they were "
            f"free; it was {start.waiting}"
        )
        out.append(Decision(Action.START, job.project, job.name, start.replicas, reason))
    return out
