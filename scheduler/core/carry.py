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
- the index the ledger builds from the jobs (``ledger.Ledger``: jobs by key, in key order, and by project,
  their active replicas, GPUs held per job, project and node), by the tuples of jobs, projects, nodes and
  departments and the config: what a cycle only reads is shared, what it changes is copied;
- each project's line (``claims.project_queues``), by its claimants (the same ``Job`` objects in the same
  order), the tuple of nodes (a job's active replicas depend on which nodes exist) and the rules that order a
  line: only the projects whose claimants changed are sorted again.

A carry holds the last snapshot's tuples (and so their objects) until the next cycle replaces them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import is_
from typing import TypeVar, cast

from scheduler.core.model import ClusterState, Config, Job

T = TypeVar("T")


@dataclass(slots=True)
class Carry:
    """The results kept between cycles, each with the inputs it was computed from (the module contract)."""

    _kept: dict[str, tuple[tuple[object, ...], object]] = field(default_factory=dict)
    _lines_of: tuple[object, ...] | None = None  # the nodes and the rules the kept lines were ordered under
    _lines: dict[str, tuple[list[Job], list[Job]]] = field(default_factory=dict)  # claimants, in line order

    def reuse(self, slot: str, inputs: tuple[object, ...], compute: Callable[[], T]) -> T:
        """What ``compute()`` returned the last time for ``slot``, while each of ``inputs`` is the same object
        as then; else ``compute()``, kept with them. The caller must not change what it gets (copy it)."""
        kept = self._kept.get(slot)
        if kept is not None and _same(kept[0], inputs):
            return cast(T, kept[1])
        value = compute()
        self._kept[slot] = (inputs, value)
        return value

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
        if self._lines_of is None or not _same(self._lines_of, under):
            self._lines = {}
        kept, fresh = self._lines, {}
        for project, jobs in claimants.items():
            line = kept.get(project)
            if line is not None and _same(line[0], jobs):
                jobs[:] = line[1]
            else:
                before = list(jobs)
                order(jobs)
                line = (before, list(jobs))
            fresh[project] = line
        self._lines, self._lines_of = fresh, under


def _same(kept: Sequence[object], now: Sequence[object]) -> bool:
    """Whether two sequences hold the very same objects, in the same order."""
    return len(kept) == len(now) and all(map(is_, kept, now))
