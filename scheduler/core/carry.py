"""What ``plan_cycle`` keeps from one cycle to the next: its passes over every job, done again only where
their inputs changed. One ``Carry`` per caller that plans the same cluster cycle after cycle (the engine).

Contract: a carry only saves work: ``plan_cycle(state, config, now=..., carry=c)`` is the plan made without
it, whatever states ``c`` saw before (a property test plans random change sequences both ways). It relies on
the snapshot being immutable (frozen dataclasses, tuples): an input that *is* the object a result was
computed from has not changed, and nothing is compared by value that could be costly. The engine's kept
snapshot (``scheduler.store.live``) hands the same tuple of jobs while no job changed, and the same ``Job``
object for each job that did not change. Kept:

- R1 demand (``fairshare.placeable_demand``), by the tuples of jobs, projects and nodes: a cycle in which no
  job, project or node changed does not walk the jobs for it (the division that follows is memoised per
  level: ``fairshare.divide``);
- the jobs in key order (``ledger.Ledger``), by the tuples of jobs and projects;
- each project's line (``claims.project_queues``), by its claimants (the same ``Job`` objects in the same
  order), the tuple of nodes (a job's active replicas depend on which nodes exist) and the rules that order a
  line: only the projects whose claimants changed are sorted again.

A carry holds the last snapshot's tuples (and so their objects) until the next cycle replaces them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import is_

from scheduler.core.model import ClusterState, Config, Job


@dataclass(slots=True)
class Carry:
    """The results kept between cycles, each with the inputs it was computed from (the module contract)."""

    _demand: tuple[ClusterState, dict[str, int]] | None = None
    _key_order: tuple[ClusterState, list[Job]] | None = None
    _lines_of: tuple[object, ...] | None = None  # the nodes and the rules the kept lines were ordered under
    _lines: dict[str, tuple[list[Job], list[Job]]] = field(default_factory=dict)  # claimants, in line order

    def demand(self, state: ClusterState, compute: Callable[[], dict[str, int]]) -> dict[str, int]:
        """R1 demand per project: the kept one while the jobs, projects and nodes are the same objects."""
        kept = self._demand
        if kept is not None and _same(kept[0], state):
            return dict(kept[1])
        demand = compute()
        self._demand = (state, dict(demand))
        return demand

    def key_order(self, state: ClusterState, compute: Callable[[], list[Job]]) -> list[Job]:
        """The jobs in key order: the kept list while the jobs and the projects are the same objects."""
        kept = self._key_order
        if kept is not None and kept[0].jobs is state.jobs and kept[0].projects is state.projects:
            return kept[1]
        ordered = compute()
        self._key_order = (state, ordered)
        return ordered

    def lines(
        self,
        state: ClusterState,
        config: Config,
        claimants: dict[str, list[Job]],
        order: Callable[[list[Job]], None],
    ) -> None:
        """Put each project's ``claimants`` (in key order) in line order with ``order`` (sorting in place),
        or as the kept line where that project's claimants are the same objects as when it was kept."""
        under = (state.nodes, config.elastic, config.goodput)
        if self._lines_of is None or any(a is not b for a, b in zip(self._lines_of, under, strict=True)):
            self._lines = {}
        kept, fresh = self._lines, {}
        for project, jobs in claimants.items():
            line = kept.get(project)
            if line is not None and len(line[0]) == len(jobs) and all(map(is_, line[0], jobs)):
                jobs[:] = line[1]
            else:
                before = list(jobs)
                order(jobs)
                line = (before, list(jobs))
            fresh[project] = line
        self._lines, self._lines_of = fresh, under


def _same(a: ClusterState, b: ClusterState) -> bool:
    return a.jobs is b.jobs and a.projects is b.projects and a.nodes is b.nodes
