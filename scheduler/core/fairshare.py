"""R1 fair share: what each department and project is entitled to this cycle, in whole GPUs.

Contract: ``fair_shares(state, config)`` is a pure function of the snapshot. At each level (departments and
projects without one first, then each department's projects out of the department's share):

1. every claimant gets ``min(deserved, cap)``, where ``cap = min(demand, limit)`` (and ``deserved`` when it may
   not go over quota); if those quotas add up to more than the pool, the pool is split in proportion to them
   (``Shares.cut`` says so per project cut below its quota; ``quota_warnings`` for quotas as configured);
2. the rest is water-filled by ``over_quota_weight`` among claimants whose cap is not met; weight-0 claimants
   then share equally whatever nobody with a weight wanted;
3. shares become whole GPUs: floors, then one GPU each to the largest fractional parts, ties to the oldest.

Demand is what today's schedulable nodes could hold (``placeable_demand``): a job that can never fit
(``never_fits``, the one definition, which ``explain.beyond_cluster`` puts in words) counts nothing.

With ``config.usage_half_life`` set (R14), step 2 uses each project's weight adjusted for its decayed usage
above quota (``scheduler.core.usage``), among the claimants of its level that want more than their quota.

Exact arithmetic (``Fraction``) keeps ties exact, so the result never depends on float rounding or input order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import lru_cache
from typing import NamedTuple, TypeAlias

from scheduler.core import usage as r14
from scheduler.core.carry import Carry, JobChanges
from scheduler.core.model import ClusterState, Config, Department, Job, Project

Rational: TypeAlias = Fraction | int  # exact; ints where no fraction arose

DEPARTMENT, PROJECT = "dept", "proj"  # the kinds of ``Top``, in their order


class Top(NamedTuple):
    """Who takes part in a division: a department or a project (``kind``), by name. Ties at equal need go
    to departments first, then by name. At the top level a project's ``Top`` is its department's, if it has
    one (``Shares.top``): the department's limit and share count for all its projects."""

    kind: str  # DEPARTMENT or PROJECT
    name: str


@dataclass(frozen=True, slots=True)
class Claimant:
    """One participant of a division at one level."""

    name: Top
    deserved: int
    weight: Fraction | int
    cap: int
    order: tuple[float, str]


@dataclass(frozen=True, slots=True)
class Shares:
    """Output of R1. ``guarantee`` is ``min(deserved, demand)`` per project (what R2 promises); ``weight``
    is each project's over-quota weight as used this cycle (R14 may have lowered it)."""

    project: dict[str, int]
    department: dict[str, int]
    demand: dict[str, int]
    guarantee: dict[str, int]
    weight: dict[str, float]
    # projects whose fair share is below their quota because the quotas at their level add up to more than
    # its pool (step 1's proportional split): why, in words (R13 adds it to the figures it shows)
    cut: dict[str, str] = field(default_factory=dict)

    def top(self, project: Project) -> tuple[Top, int]:
        """The project's top-level entity (its department, if any) and that entity's fair share."""
        if project.department is not None and project.department in self.department:
            return (Top(DEPARTMENT, project.department), self.department[project.department])
        return (Top(PROJECT, project.name), self.project[project.name])


def project_cap(project: Project, demand: int, config: Config) -> int:
    """The most GPUs a project may be entitled to: its demand, under its limit and, without borrowing, quota."""
    cap = demand
    if project.limit_gpus is not None:
        cap = min(cap, project.limit_gpus)
    if not project.allow_over_quota or not config.borrowing:
        cap = min(cap, project.deserved_gpus)
    return max(cap, 0)


def fair_shares(state: ClusterState, config: Config, carry: Carry | None = None) -> Shares:
    """R1 (the module contract); ``carry`` keeps the demand while no job, project or node changed, and counts
    only the jobs that changed where nothing else did."""
    sizes = [n.gpus for n in state.nodes if n.schedulable]
    total = sum(sizes)
    if carry is None:
        demand = placeable_demand(state, sizes)
    else:

        def patch(changes: JobChanges, kept: dict[str, int]) -> dict[str, int]:
            return patched_demand(kept, changes, sizes)

        inputs = (state.jobs, state.projects, state.nodes)
        counted: dict[str, int] = carry.reuse("demand", inputs, lambda: placeable_demand(state, sizes), patch)
        demand = dict(counted)
    caps = {p.name: project_cap(p, demand[p.name], config) for p in state.projects}
    depts = {d.name: d for d in state.departments}
    members: dict[str, list[Project]] = {name: [] for name in depts}
    top: list[Claimant] = []
    for p in state.projects:
        if p.department in members:
            members[p.department].append(p)
        else:
            top.append(_project_claimant(p, caps[p.name]))
    for d in depts.values():
        cap = sum(caps[p.name] for p in members[d.name])
        if d.limit_gpus is not None:
            cap = min(cap, d.limit_gpus)
        if not config.borrowing:
            cap = min(cap, d.deserved_gpus)
        top.append(
            Claimant(
                Top(DEPARTMENT, d.name),
                d.deserved_gpus,
                _weight(d.over_quota_weight),
                cap,
                (d.created_at, d.name),
            )
        )
    usage = _usage(state, config, total)
    top = _with_usage(top, usage)
    top_share = divide(total, top)
    project_share = {top.name: v for top, v in top_share.items() if top.kind == PROJECT}
    dept_share = {top.name: v for top, v in top_share.items() if top.kind == DEPARTMENT}
    weight = {c.name.name: float(c.weight) for c in top if c.name.kind == PROJECT}
    for dname, projects in members.items():
        claimants = _with_usage([_project_claimant(p, caps[p.name]) for p in projects], usage)
        weight.update({c.name.name: float(c.weight) for c in claimants})
        inner = divide(dept_share[dname], claimants)
        project_share.update({k.name: v for k, v in inner.items()})
    guarantee = {p.name: min(p.deserved_gpus, demand[p.name], caps[p.name]) for p in state.projects}
    cut = _cut_quotas(
        state, top, total, members=members, dept_share=dept_share, caps=caps, share=project_share
    )
    return Shares(project_share, dept_share, demand, guarantee, weight, cut)


def _claimed(claimants: Sequence[Claimant]) -> int:
    """The quotas a division hands out first (step 1): ``min(deserved, cap)`` each."""
    return sum(max(min(c.deserved, c.cap), 0) for c in claimants)


def _cut_quotas(
    state: ClusterState,
    top: Sequence[Claimant],
    total: int,
    *,
    members: dict[str, list[Project]],
    dept_share: dict[str, int],
    caps: dict[str, int],
    share: dict[str, int],
) -> dict[str, str]:
    """Why each project whose share is below ``min(deserved, cap)`` got less: its level's quotas add up to
    more than the level's pool, so step 1 split the pool in proportion to them."""
    why: dict[str, str] = {}
    claimed = _claimed(top)
    if claimed > total:
        level = f"the quotas claimed add up to {claimed} GPUs, more than the {total} schedulable"
        for p in state.projects:
            why[p.name] = level
    for dname, projects in members.items():
        inner = sum(max(min(p.deserved_gpus, caps[p.name]), 0) for p in projects)
        if inner > dept_share[dname]:
            level = (
                f"department {dname}'s projects claim {inner} GPUs of quota, more than its share of "
                f"{dept_share[dname]}"
            )
            for p in projects:
                why.setdefault(p.name, level)  # a cut at the top level is the cause, if there was one
    quota = {p.name: p.deserved_gpus for p in state.projects}
    return {
        name: f"its quota of {quota[name]} is cut in proportion: {level}"
        for name, level in why.items()
        if share[name] < min(quota[name], caps[name])
    }


def never_fits(g: int, k: int, largest: int, slots: int) -> bool:
    """Whether ``k`` replicas of ``g`` GPUs (each on one node) can never fit today's schedulable nodes, even
    all empty: ``largest`` is the largest node's GPUs, ``slots`` the replicas of ``g`` GPUs they hold. The one
    definition of "can never fit": R1 demand leaves such jobs out and ``explain.beyond_cluster`` says why."""
    return g > largest or k > slots


def placeable_demand(state: ClusterState, node_sizes: Sequence[int]) -> dict[str, int]:
    """R1 demand per project: each job's ``max_replicas`` replicas, but only what today's schedulable nodes
    could ever hold. A job that can never fit (``never_fits``: a replica larger than the largest node, or
    more ``min_replicas`` than the nodes hold all empty) counts nothing; an elastic one counts at most the
    replicas the nodes hold all empty."""
    demand = {p.name: 0 for p in state.projects}
    _count_demand(demand, state.jobs, node_sizes, 1)
    return demand


def patched_demand(kept: dict[str, int], changes: JobChanges, node_sizes: Sequence[int]) -> dict[str, int]:
    """``placeable_demand`` of a snapshot from ``kept``, that of the last one (the same projects and nodes),
    and how their jobs differ: only the changed jobs are counted (``kept`` is left as it was)."""
    demand = dict(kept)
    _count_demand(demand, changes.gone, node_sizes, -1)
    _count_demand(demand, changes.came, node_sizes, 1)
    return demand


def _count_demand(demand: dict[str, int], jobs: Iterable[Job], node_sizes: Sequence[int], sign: int) -> None:
    """Add (``sign`` 1) or take away (-1) what ``jobs`` of the projects in ``demand`` count in it."""
    largest = max(node_sizes, default=0)
    # per replica size: the most replicas that fit (``never_fits`` is ``k > most`` for any k), -1 for none
    most: dict[int, int] = {}
    for job in jobs:  # this loop runs over every job: kept to dict look-ups
        name, g = job.project, job.gpus_per_replica
        room = most.get(g)
        if room is None:
            room = most[g] = _most_replicas(g, largest, node_sizes)
        if job.min_replicas > room or name not in demand:
            continue
        demand[name] += sign * min(job.max_replicas, room) * g


def _most_replicas(g: int, largest: int, node_sizes: Sequence[int]) -> int:
    """The most replicas of ``g`` GPUs that today's nodes could ever hold: ``k`` of them never fit exactly
    when ``k`` is above it."""
    if g <= 0:
        return -1  # no such job: nothing to count
    slots = sum(size // g for size in node_sizes)
    return -1 if never_fits(g, 1, largest, slots) else slots


def _usage(state: ClusterState, config: Config, total: int) -> dict[Top, float]:
    """R14: each project's normalised usage, only those above 0; empty when it is off."""
    half_life = config.usage_half_life
    if half_life <= 0:
        return {}
    out = {}
    for p in state.projects:
        u = r14.normalised(p.usage_gpu_seconds, total, half_life)
        if u > 0:
            out[Top(PROJECT, p.name)] = u
    return out


def _with_usage(claimants: list[Claimant], usage: dict[Top, float]) -> list[Claimant]:
    """R14: the weights of the claimants that want more than their quota, adjusted for their usage."""
    if not usage:
        return claimants
    wanting = {c.name: c.weight for c in claimants if c.weight > 0 and c.cap > c.deserved}
    if not any(name in usage for name in wanting):
        return claimants
    weights = r14.adjusted(wanting, usage)
    return [replace(c, weight=weights[c.name]) if c.name in weights else c for c in claimants]


def _weight(w: float) -> Fraction | int:
    """Exact weight; an int when it is whole (the usual case), which keeps the arithmetic below in ints."""
    f = Fraction(max(w, 0.0))
    return f.numerator if f.denominator == 1 else f


def _project_claimant(p: Project, cap: int) -> Claimant:
    return Claimant(
        Top(PROJECT, p.name), p.deserved_gpus, _weight(p.over_quota_weight), cap, (p.created_at, p.name)
    )


def divide(pool: int, claimants: Sequence[Claimant]) -> dict[Top, int]:
    """Divide ``pool`` whole GPUs among ``claimants`` (steps 1-3 of the module contract).

    A pure function of its arguments, so it is memoised: consecutive cycles mostly ask the same division."""
    return dict(_divide(pool, tuple(claimants)))


@lru_cache(maxsize=1024)
def _divide(pool: int, claimants: tuple[Claimant, ...]) -> dict[Top, int]:
    pool = max(pool, 0)
    # exact rationals throughout; they stay ints (much faster) until a level or a proportion needs a fraction
    base: dict[Top, Rational] = {c.name: max(min(c.deserved, c.cap), 0) for c in claimants}
    if sum(base.values()) > pool:
        share = _proportional(pool, base)
    else:
        share = dict(base)
        rest: Rational = pool - sum(share.values())
        weighted = [c for c in claimants if c.weight > 0]
        rest = _water_fill(share, [(c.name, c.weight, c.cap) for c in weighted], rest)
        unweighted: list[tuple[Top, Rational, Rational]] = [
            (c.name, 1, c.cap) for c in claimants if c.weight == 0
        ]
        _water_fill(share, unweighted, rest)
    return _whole(share, {c.name: c.order for c in claimants})


def _proportional(pool: int, base: dict[Top, Rational]) -> dict[Top, Rational]:
    """Quotas that oversubscribe the pool: each gets the pool in proportion to its quota."""
    total = sum(base.values())
    return {name: Fraction(pool * b) / total for name, b in base.items()}


def _ratio(need: Rational, w: Rational) -> Rational:
    return need if w == 1 else Fraction(need) / w


def _water_fill(
    share: dict[Top, Rational], items: list[tuple[Top, Rational, Rational]], rest: Rational
) -> Rational:
    """Raise a common level; each item gets ``level * weight`` more, up to its cap. Returns what is left."""
    open_items = sorted(
        ((name, w, cap - share[name]) for name, w, cap in items if cap > share[name]),
        key=lambda t: (_ratio(t[2], t[1]), t[0]),
    )
    weight_left: Rational = sum(w for _, w, _ in open_items)
    for i, (name, w, need) in enumerate(open_items):
        if rest <= 0:
            break
        if need * weight_left <= rest * w:  # this one is satisfied below the common level
            share[name] += need
            rest -= need
            weight_left -= w
            continue
        level = Fraction(rest) / weight_left
        for other, w2, _ in open_items[i:]:
            share[other] += level * w2
        return 0
    return rest


def _whole(share: dict[Top, Rational], order: dict[Top, tuple[float, str]]) -> dict[Top, int]:
    floors = {name: int(v) for name, v in share.items()}
    leftover = int(sum(share.values())) - sum(floors.values())
    by_fraction = sorted(share, key=lambda n: (-(share[n] - floors[n]), order[n]))
    for name in by_fraction[:leftover]:
        floors[name] += 1
    return floors


def quota_warnings(
    total: int, projects: Sequence[Project], departments: Sequence[Department]
) -> dict[str | None, str]:
    """Quotas that add up to more than what they divide (step 1 then cuts them in proportion), in words: the
    cluster's under key ``None`` (departments' quotas and those of projects without one, against the
    ``total`` schedulable GPUs; nothing while there are none), each department's under its name (its
    projects' quotas against its own)."""
    names = {d.name for d in departments}
    out: dict[str | None, str] = {}
    top = sum(d.deserved_gpus for d in departments)
    top += sum(p.deserved_gpus for p in projects if p.department not in names)
    if 0 < total < top:
        out[None] = (
            f"quotas add up to {top} GPUs (departments and projects without one), more than the {total} "
            "schedulable: fair shares cut each in proportion, so none is guaranteed in full"
        )
    for d in departments:
        inner = sum(p.deserved_gpus for p in projects if p.department == d.name)
        if inner > d.deserved_gpus:
            out[d.name] = (
                f"the quotas of department {d.name}'s projects add up to {inner} GPUs, more than its quota "
                f"of {d.deserved_gpus}: their fair shares are cut in proportion"
            )
    return out
