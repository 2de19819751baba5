"""What a cycle remembers so that it does not search again for what cannot work: one ``CycleMemo`` per ledger.

Contract: the memo lives for one cycle (its ledger's) and only saves work: a cycle that forgot it all would
plan the same, slower. Remembering a failure is safe because of how a cycle changes its ledger: a trial that
fails is rolled back, and what is kept only fills the cluster up, so the GPUs available and the units other
projects may lose ("victims") only dwindle while claims are served. Hence two kinds of failure memory:

- on an unchanged ledger (a start's ``Shape``, with the ``Ledger.version`` it failed at): a start or hold of
  that shape fails again while the ledger stays as it was. Nothing else about the job lets a later one of the
  same shape succeed: one further back in its project's line has at least as many GPUs ahead of it, and a
  victim of this cycle is served in the next one. A version never comes back once the ledger has changed,
  so only the latest failure of each shape is kept;
- per victim project (``NoUnit``): a reclaim found no unit of that project it may take, none bigger than a
  size; while the project's jobs' replicas are as they were (its ``Ledger.touched`` count), none is found
  for that size or less with the same eligibility;
- for the rest of the cycle (``ReclaimPowers``, ``Consolidation``): as victims and available GPUs only
  dwindle, a reclaim or consolidation that failed for ``count`` replicas fails for every later claim at least
  as big with the same powers; the smallest failing count is kept (KAI's signatures).

Beside them the claim pass keeps ``held_in_vain`` (blocked starts whose one chance per cycle failed) and
``retry`` (failed starts waiting for a release in their project or department).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, TypeAlias, TypeVar

from scheduler.core.model import UNLIMITED, Job

if TYPE_CHECKING:
    from scheduler.core.victims import Floor

K = TypeVar("K")
# ``_build(T, fields)``: the named tuple ``T(*fields)``, less the generated constructor's Python call
_build = tuple.__new__


class Shape(NamedTuple):
    """What a start or hold depends on besides the ledger (the module contract)."""

    project: str
    gpus_per_replica: int
    min_replicas: int
    priority: int
    interactive: bool
    topology: str


def shape_of(job: Job) -> Shape:
    """The job's ``Shape`` (``_build``: this runs for every start tried)."""
    fields = (
        job.project,
        job.gpus_per_replica,
        job.min_replicas,
        job.priority,
        job.interactive,
        job.topology,
    )
    return _build(Shape, fields)


# The memo's values are plain tuples (one or more is made per claim; a named tuple costs several times more):
Version: TypeAlias = tuple[int, int]  # ``Ledger.version``
FailedStart: TypeAlias = tuple[Version, bool]  # the latest version a start failed at, whether it was entitled
Retry: TypeAlias = tuple[Job, int]  # a failed start, with how many releases the ledger had logged then


class ReclaimPowers(NamedTuple):
    """What a reclaim for replicas of ``gpus`` GPUs may take (``preemption.Reclaimer``)."""

    gpus: int
    below_guarantee: bool
    department: str | None  # the claimant's department (its limit and share count), if it has one
    top_ok: bool  # the claimant's top-level entity stays within its share
    floor: Floor
    spare: bool  # R15: jobs inside their minimum runtime are spared
    one_domain: bool  # R17: the claim must fit in one domain ...
    home: str | None  # ... its master's, if it runs


NoUnit: TypeAlias = tuple[str, int, bool, bool, int, int, str | None]
"""A reclaim's search of one victim project that found no unit it may take: the project, its ``touched``
count, the search's ``spare`` and ``below_guarantee`` (what makes a job eligible), and the ``fits``, ``most``
and ``within`` it searched with (``VictimOrder.next_unit``)."""


class Consolidation(NamedTuple):
    """A consolidation for replicas of ``gpus`` GPUs, with or without reclaim."""

    gpus: int
    reclaiming: bool


@dataclass(slots=True)
class CycleMemo:
    """The one cycle's memory (the module contract)."""

    starts: dict[Shape, FailedStart] = field(default_factory=dict)
    holds: dict[Shape, Version] = field(default_factory=dict)  # the latest version a hold failed at
    held_in_vain: set[tuple[str, str]] = field(default_factory=set)
    retry: list[Retry] = field(default_factory=list)
    reclaims: dict[ReclaimPowers, int] = field(default_factory=dict)  # the smallest count that failed
    no_unit: dict[NoUnit, int] = field(default_factory=dict)  # the largest unit size that found none
    consolidations: dict[Consolidation, int] = field(default_factory=dict)  # the same


def fails(failed: dict[K, int], key: K, count: int) -> bool:
    """Whether ``count`` replicas fail where fewer failed already this cycle."""
    return count >= failed.get(key, UNLIMITED)


def note_failure(failed: dict[K, int], key: K, count: int) -> None:
    """Remember that ``count`` replicas failed (so do more, for the rest of the cycle)."""
    failed[key] = min(count, failed.get(key, count))
