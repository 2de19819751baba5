"""What ``plan_cycle`` keeps from one cycle to the next: its passes over every job, done again only where
their inputs changed. One ``Carry`` per caller that plans the same cluster cycle after cycle (the engine).

Contract: a carry only saves work: ``plan_cycle(state, config, now=..., carry=c)`` is the plan made without
it, whatever states ``c`` saw before (a property test plans random change sequences both ways). It relies on
the snapshot being immutable (frozen dataclasses, tuples): an input that *is* the object a result was
computed from has not changed, and nothing is compared by value that could be costly. The engine's kept
snapshot (``scheduler.store.live``) hands the same tuple of jobs while no job changed, and the same ``Job``
object for each job that did not change. Kept:

- R1 demand (``fairshare.placeable_demand``), by the tuples of jobs, projects and nodes: a cycle in which no
  job, project or node changed does not walk the jobs for it, one in which a few jobs changed counts only
  them (the division that follows is memoised per level: ``fairshare.divide``);
- the index the ledger builds from the jobs (``jobindex.Index``: jobs by key, in key order, and by project,
  their active replicas, GPUs held per job, project and node), by the tuples of jobs, projects, nodes and
  departments and the config: what a cycle only reads is shared, what it changes is copied; where only jobs
  changed, the kept index is patched with them (``jobindex.patch``, ``changed_jobs``) instead of built again.
  With it go what passes compute from it alone, on first use: each project's claimants and its line of GPUs
  held (``starts``), and the jobs running below their minimum (``growth.restore_gangs``); a patch keeps them
  for the projects none of whose jobs changed;
- the order of R5's victims (``victims.victim_order``), by the running jobs, the config and the step of R5's
  order: a snapshot changed only by jobs that do not run does not sort every project's running jobs again;
- each project's line (``claims.project_queues``), by its claimants (the same ``Job`` objects in the same
  order), the tuple of nodes (a job's active replicas depend on which nodes exist) and the rules that order a
  line: only the projects whose claimants changed are sorted again.

- the last plan itself (``kept_plan``), by the snapshot's tuples, the config and whether notes were asked
  for, while the time lies before the one until which the ledger said it holds (``Ledger.holds_until``): the
  earliest time at which a comparison with the clock the plan made would come out otherwise (a settle time,
  R7 and R18; a minimum runtime, R15; the next ten seconds, where a search took a victim in R5's
  least-work-lost order, which weighs the work lost as of their start: ``VictimOrder.taken``). A settled cluster
  is then not planned again until something changes or such a time comes. A plan that decided something is
  not kept (what it decided changes the snapshot).

A carry holds the last snapshot's tuples (and so their objects) until the next cycle replaces them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import is_
from typing import TypeAlias, TypeVar, cast

from scheduler.core.model import ClusterState, Config, Job
from scheduler.core.plan import Plan

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class JobChanges:
    """How one snapshot's jobs differ from the last one's, by identity (``Carry.changed_jobs``)."""

    came: list[Job]  # new or changed: not objects of the last snapshot, in the snapshot's order
    gone: list[Job]  # the last snapshot's jobs that are not objects of this one, in its order


# a kept value made again from how the snapshot's jobs changed and the value itself (``Carry.reuse``)
Patch: TypeAlias = Callable[[JobChanges, T], T]


@dataclass(slots=True)
class Carry:
    """The results kept between cycles, each with the inputs it was computed from (the module contract)."""

    _kept: dict[str, tuple[tuple[object, ...], object]] = field(default_factory=dict)
    _lines_of: tuple[object, ...] | None = None  # the nodes and the rules the kept lines were ordered under
    _lines: dict[str, tuple[list[Job], list[Job]]] = field(default_factory=dict)  # claimants, in line order
    _changes: tuple[tuple[Job, ...], tuple[Job, ...], JobChanges | None] | None = None  # the last pair's
    _plan: tuple[tuple[object, ...], float, float, Plan] | None = None  # inputs, made at, holds until, plan
    plans_kept: int = 0  # plans handed back whole (``kept_plan``), for the caller's metrics

    def kept_plan(self, inputs: tuple[object, ...], now: float) -> Plan | None:
        """The last plan, while each of ``inputs`` is the same object as it was made from and ``now`` lies
        between the time it was made at and the time until which it holds (``Ledger.holds_until``: the
        earliest time at which a comparison with the clock it made would come out otherwise); else ``None``."""
        kept = self._plan
        if kept is None or not kept[1] <= now < kept[2] or not _same(kept[0], inputs):
            return None
        self.plans_kept += 1
        return kept[3]

    def kept_until(self) -> float | None:
        """Until when the kept plan holds for its snapshot (``None``: no plan kept)."""
        return self._plan[2] if self._plan is not None else None

    def keep_plan(self, inputs: tuple[object, ...], now: float, holds_until: float, plan: Plan) -> None:
        """Keep ``plan``, made at ``now`` from ``inputs``, for ``kept_plan`` until ``holds_until``."""
        self._plan = (inputs, now, holds_until, plan) if holds_until > now else None

    def reuse(
        self,
        slot: str,
        inputs: tuple[object, ...],
        compute: Callable[[], T],
        patch: Patch[T] | None = None,
    ) -> T:
        """What ``compute()`` returned the last time for ``slot``, while each of ``inputs`` is the same object
        as then; else ``compute()``, kept with them. The caller must not change what it gets (copy it).
        ``patch``: where only the first input, the snapshot's tuple of jobs, changed, and by few jobs
        (``changed_jobs``), ``patch(those changes, the value kept)`` makes the value from the kept one without
        changing it, instead of ``compute()``."""
        kept = self._kept.get(slot)
        value: T | None = None
        if kept is not None:
            if _same(kept[0], inputs):
                return cast(T, kept[1])
            if patch is not None and _same(kept[0][1:], inputs[1:]):
                jobs = cast(tuple[tuple[Job, ...], tuple[Job, ...]], (kept[0][0], inputs[0]))
                changes = self.changed_jobs(*jobs)
                if changes is not None:
                    value = patch(changes, cast(T, kept[1]))
        if value is None:
            value = compute()
        self._kept[slot] = (inputs, value)
        return value

    def keep(self, slot: str, inputs: tuple[object, ...], value: object) -> None:
        """Keep ``value`` for ``slot`` as computed from ``inputs`` (``reuse`` hands it back while they are the
        same objects): for a value that depends on more than its inputs' identity, made again by its caller."""
        self._kept[slot] = (inputs, value)

    def changed_jobs(self, before: tuple[Job, ...], after: tuple[Job, ...]) -> JobChanges | None:
        """The jobs of ``after`` that are not objects of ``before`` and the other way round; ``None`` where more
        than a quarter of them changed (a result computed again whole is then about as cheap as one patched
        with them). Remembered for the last pair: every kept result patched in one cycle asks for the same."""
        last = self._changes
        if last is not None and last[0] is before and last[1] is after:
            return last[2]
        were, are = set(map(id, before)), set(map(id, after))
        came = [j for j in after if id(j) not in were]
        gone = [j for j in before if id(j) not in are]
        changes = None if 4 * (len(came) + len(gone)) > len(after) else JobChanges(came, gone)
        self._changes = (before, after, changes)
        return changes

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
