"""GPU fractions (R20): jobs whose replicas each take a share of one GPU, planned through the whole-GPU core.

Contract: ``plan_fractions(state, config, now, explain_waiting, plan_whole)`` plans a snapshot that holds
fractional jobs (``Job.gpu_fraction``) with the whole-GPU pipeline ``plan_whole`` (``cycle._plan``), and
returns a plan in the snapshot's own terms. Pure, like the rest of the core.

How. A *shared GPU* is one GPU of a node that fractional replicas run on (``Replica.share`` of GPU
``Replica.gpu`` of the node). Replicas share a GPU only with replicas of the same project and the same kind
(interactive or training), as KAI-Scheduler's reservation pod holds a GPU for the pods that share it. The
whole-GPU core sees each shared GPU as what it is to everyone else: one GPU, held by a rigid one-replica job
of its project (interactive if its replicas are, the highest priority among them, their oldest submission
and their latest start). Fractional replicas that wait are packed first onto the project's shared GPUs that
have room (the fullest first, R12's spirit), the rest first-fit onto *new* GPUs, each a pending one-GPU job
of the project for the core. So every rule of the core applies to a shared GPU as to any 1-GPU job: a
project's quota, limit, fair share, department and usage count it as one GPU (R1, R2, R11, R14); a new
shared GPU starts only where a whole GPU is free (or after reclaim, R2 and R5-R7, or preemption, R10); an
interactive shared GPU within its quota is never a victim (R3); a shared GPU is a victim as a whole (all its
replicas stop, each fractional job with all its replicas: a fractional job is a rigid gang, R8). A shared GPU
each of whose jobs also runs on other shared GPUs is one stand-in with them (``units_of``), so stopping it
frees exactly the GPUs the core counts. A whole-GPU
replica never lands on a shared GPU, because the core counts that GPU as held.

The core's names for these stand-in jobs start with ``~`` (no job name can); its reasons are rewritten to
name the fractional jobs.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from fractions import Fraction

from scheduler.core.model import ClusterState, Config, Job, Replica
from scheduler.core.placement import node_sort_key
from scheduler.core.plan import Action, Cause, Decision, JobNote, Placement, Plan, Reservation

PlanWhole = Callable[[ClusterState, Config, float, bool], Plan]
JobKey = tuple[str, str]
GpuKey = tuple[str, int]  # (node, shared GPU number on it)
PREFIX = "~"
# Stand-ins of running shared GPUs by every figure they are made of: the same GPU with the same jobs is the
# same (frozen) job from cycle to cycle, made once. A cache of values, so the core stays pure; bounded.
_STAND_INS: dict[tuple[object, ...], Job] = {}
_STAND_INS_KEPT = 100_000
# the core's stand-in names in a reason, with the project before them when there is one
_STAND_IN = re.compile(r"(?:([a-z0-9][a-z0-9.-]*)/)?(~(?:gpu|new)/[A-Za-z0-9.-]+/\d+)")


def unit_of(jobs: Iterable[Job]) -> int:
    """The common denominator of every share of ``jobs`` (fractional ones): packing adds and compares whole
    numbers of ``1/unit`` of a GPU, exact and far cheaper than ``Fraction`` arithmetic."""
    dens: set[int] = set()
    for j in jobs:
        assert j.gpu_fraction is not None
        dens.add(j.gpu_fraction.denominator)
        dens.update(r.share.denominator for r in j.replicas if r.share is not None)
    return math.lcm(*dens) if dens else 1


def units(share: Fraction, unit: int) -> int:
    return share.numerator * (unit // share.denominator)


def has_fractions(state: ClusterState) -> bool:
    return any(j.gpu_fraction is not None for j in state.jobs)


def gpu_label(node: str, gpu: int) -> str:
    """The core's name for the stand-in job of shared GPU ``gpu`` of ``node``."""
    return f"{PREFIX}gpu/{node}/{gpu}"


@dataclass(slots=True)
class SharedGpu:
    """One shared GPU of the snapshot: its project, kind, what is booked on it (in ``1/unit`` of a GPU; releasing
    replicas too: they still hold their memory) and the jobs whose active replicas run there."""

    node: str
    gpu: int
    project: str
    interactive: bool
    booked: int = 0
    jobs: list[Job] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return bool(self.jobs)

    def stand_in(self) -> Job:
        """The one-GPU job the core sees for this GPU (its replica releasing once no job runs on it)."""
        if not self.jobs:
            return Job(
                self.project,
                gpu_label(self.node, self.gpu),
                1,
                1,
                1,
                interactive=self.interactive,
                replicas=(Replica(0, self.node, 1, releasing=True),),
            )
        return _stand_in([self])


def _stand_in(gpus: list[SharedGpu]) -> Job:
    """The rigid job of one GPU a replica the core sees for running shared GPUs ``gpus`` (one unit: see
    ``units_of``): their jobs' highest priority, oldest submission, latest start and oldest checkpoint."""
    first = gpus[0]
    if len(gpus) == 1 and len(first.jobs) == 1:  # most shared GPUs: their one job's figures
        (j,) = first.jobs
        priority, submitted, checkpointed = j.priority, j.submitted_at, j.checkpointed_at
        started = j.submitted_at if j.last_resized_at is None else j.last_resized_at
    else:
        members = list({j.key: j for g in gpus for j in g.jobs}.values())
        priority = max(j.priority for j in members)
        submitted = min(j.submitted_at for j in members)
        started = max(j.submitted_at if j.last_resized_at is None else j.last_resized_at for j in members)
        checkpoints = [j.checkpointed_at for j in members]
        checkpointed = None if None in checkpoints else min(c for c in checkpoints if c is not None)
    places = tuple((g.node, g.gpu) for g in gpus)
    key = (first.project, places, first.interactive, priority, submitted, started, checkpointed)
    job = _STAND_INS.get(key)
    if job is None:
        if len(_STAND_INS) >= _STAND_INS_KEPT:
            _STAND_INS.clear()
        n = len(gpus)
        job = _STAND_INS[key] = Job(
            first.project,
            gpu_label(first.node, first.gpu),
            n,
            n,
            1,
            first.interactive,
            priority,
            submitted,
            tuple(Replica(i, g.node, 1) for i, g in enumerate(gpus)),
            started,
            checkpointed,
        )
    return job


def shared_gpus(fractional: Iterable[Job], known: set[str], unit: int) -> dict[GpuKey, SharedGpu]:
    """Every shared GPU of the fractional jobs on a node the snapshot still has (``known``), by (node,
    number); booked in ``1/unit`` of a GPU. Its ``jobs`` are in no particular order (readers sort them)."""
    out: dict[GpuKey, SharedGpu] = {}
    for job in fractional:
        for r in job.replicas:
            if r.gpu is None or r.node not in known:
                continue
            g = out.get((r.node, r.gpu))
            if g is None:
                g = out[(r.node, r.gpu)] = SharedGpu(r.node, r.gpu, job.project, job.interactive)
            share = r.share if r.share is not None else job.gpu_fraction
            assert share is not None
            g.booked += share.numerator * (unit // share.denominator)
            if not r.releasing and job not in g.jobs:
                g.jobs.append(job)
    return out


def _gpu_order(key: GpuKey) -> tuple[tuple[tuple[int, int | str], ...], int]:
    return node_sort_key(key[0]), key[1]


def units_of(gpus: dict[GpuKey, SharedGpu]) -> dict[str, tuple[GpuKey, ...]]:
    """The shared GPUs the core sees as one stand-in job each, by the stand-in's name (its first GPU's label).

    Most are one GPU each. But a fractional gang stops whole (R8), so a GPU each of whose jobs also runs on
    another GPU empties when those others are stopped: seen as a stand-in of its own, it would come free
    without the core having stopped it, and the core would plan with a GPU fewer than it has. Such a GPU is
    one unit with every GPU its jobs run on: stopping the unit's stand-in stops all their jobs and frees
    exactly its GPUs, and no GPU outside it empties."""
    on: dict[JobKey, set[GpuKey]] = {}
    for k, g in gpus.items():
        for j in g.jobs:
            on.setdefault(j.key, set()).add(k)
    parent: dict[GpuKey, GpuKey] = {}

    def root(k: GpuKey) -> GpuKey:
        while (up := parent.get(k, k)) != k:
            parent[k] = parent.get(up, up)
            k = up
        return k

    for k, g in gpus.items():
        if g.jobs and all(len(on[j.key]) > 1 for j in g.jobs):
            for j in g.jobs:
                for other in on[j.key]:
                    a, b = sorted((root(k), root(other)), key=_gpu_order)
                    if a != b:
                        parent[b] = a
    groups: dict[GpuKey, list[GpuKey]] = {}
    for k in gpus:
        groups.setdefault(root(k), []).append(k)
    out: dict[str, tuple[GpuKey, ...]] = {}
    for members in groups.values():
        members.sort(key=_gpu_order)
        out[gpu_label(*members[0])] = tuple(members)
    return out


@dataclass(slots=True)
class _NewGpu:
    """GPUs the waiting fractional replicas would open: a pending job for the core. One GPU shared by
    one-replica jobs of a project and kind, or the GPUs of one fractional gang (its replicas packed among
    themselves: they start together or not at all, R8). ``slots``: the global number of each of its GPUs."""

    project: str
    interactive: bool
    number: int
    rooms: list[int] = field(default_factory=list)  # in 1/unit of a GPU
    slots: list[int] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)

    label: str = ""

    def __post_init__(self) -> None:
        self.label = f"{PREFIX}new/{'interactive' if self.interactive else 'training'}/{self.number}"

    def stand_in(self) -> Job:
        n = len(self.slots)
        return Job(
            self.project,
            self.label,
            n,
            n,
            1,
            interactive=self.interactive,
            priority=max(j.priority for j in self.jobs),
            submitted_at=min(j.submitted_at for j in self.jobs),
        )


Target = tuple[str, GpuKey | int]  # ("old", (node, gpu)) or ("new", the global number of a new GPU)


def _job_key(job: Job) -> JobKey:
    return job.key


def _line_key(job: Job) -> tuple[int, bool, float, JobKey]:
    return (-job.priority, not job.interactive, job.submitted_at, job.key)


def _best_old(rooms: dict[GpuKey, int], candidates: list[GpuKey], share: int) -> GpuKey | None:
    """The shared GPU with the least room that still fits ``share`` (then node order, then number)."""
    best: GpuKey | None = None
    for key in candidates:
        room = rooms[key]
        if room >= share and (best is None or room < rooms[best]):
            best = key
    return best


@dataclass(slots=True)
class Packing:
    """The fractional jobs of a snapshot: the shared GPUs, the jobs lost with a node, the waiting jobs in line
    order and where each of their replicas would go (``targets``), the new GPUs they would open (``news``)."""

    gpus: dict[GpuKey, SharedGpu]
    unit: int
    units: dict[str, tuple[GpuKey, ...]]  # the shared GPUs of each stand-in, by its name (``units_of``)
    lost: list[Job] = field(default_factory=list)
    waiting: list[Job] = field(default_factory=list)
    stopping: set[JobKey] = field(default_factory=set)
    targets: dict[JobKey, list[Target]] = field(default_factory=dict)
    news: dict[int, _NewGpu] = field(default_factory=dict)
    slot_of: dict[int, tuple[int, int]] = field(
        default_factory=dict
    )  # new GPU -> (its stand-in, replica index)

    @classmethod
    def of(cls, state: ClusterState) -> Packing:
        known = {n.name for n in state.nodes}
        projects = {p.name for p in state.projects}
        fractional = [j for j in state.jobs if j.gpu_fraction is not None]
        unit = unit_of(fractional)
        gpus = shared_gpus(fractional, known, unit)
        pack = cls(gpus, unit, units_of(gpus))
        for job in fractional:  # one pass; every list it fills is sorted below or read order-free
            if job.project not in projects:
                continue
            active = lost = releasing = False
            for r in job.replicas:
                if r.releasing:
                    releasing = True
                else:
                    active = True
                    lost = lost or r.node not in known
            if releasing:
                pack.stopping.add(job.key)
            if lost:
                pack.lost.append(job)
            elif not active and not releasing:
                pack.waiting.append(job)
        pack.waiting.sort(key=_line_key)
        pack.place({n.name for n in state.nodes if n.schedulable})
        return pack

    def place(self, schedulable: set[str]) -> None:
        """Onto the project's shared GPUs with room first (the fullest that fits), else first-fit onto new GPUs
        of the project and kind."""
        gpus, unit = self.gpus, self.unit
        wanted = {(j.project, j.interactive) for j in self.waiting if j.max_replicas == 1}
        rooms = {
            k: unit - g.booked
            for k, g in gpus.items()
            if g.booked < unit and g.active and (g.project, g.interactive) in wanted and g.node in schedulable
        }
        pools: dict[tuple[str, bool], list[GpuKey]] = {}
        for k in sorted(rooms, key=lambda k: (node_sort_key(k[0]), k[1])):
            g = gpus[k]
            pools.setdefault((g.project, g.interactive), []).append(k)
        shared_bins: dict[tuple[str, bool], list[_NewGpu]] = {}
        for job in self.waiting:
            assert job.gpu_fraction is not None
            share = units(job.gpu_fraction, unit)
            pool = (job.project, job.interactive)
            if job.max_replicas == 1:
                old = _best_old(rooms, pools.get(pool, []), share)
                if old is not None:
                    rooms[old] -= share
                    self.targets[job.key] = [("old", old)]
                    continue
                bins = shared_bins.setdefault(pool, [])
                fit = next((b for b in bins if b.rooms[0] >= share), None)
                if fit is None:
                    fit = self._open(job)
                    bins.append(fit)
                self.targets[job.key] = [("new", self._book(fit, job, share))]
            else:
                gang = self._open(job)
                self.targets[job.key] = [
                    ("new", self._book(gang, job, share)) for _ in range(job.max_replicas)
                ]

    def _open(self, job: Job) -> _NewGpu:
        b = self.news[len(self.news)] = _NewGpu(job.project, job.interactive, len(self.news))
        return b

    def _book(self, b: _NewGpu, job: Job, share: int) -> int:
        """Book ``share`` on the first of ``b``'s GPUs with room, a new one if none has; its global number."""
        i = next((i for i, room in enumerate(b.rooms) if room >= share), None)
        if i is None:
            i = len(b.rooms)
            b.rooms.append(self.unit)
            b.slots.append(len(self.slot_of))
            self.slot_of[b.slots[i]] = (b.number, i)
        b.rooms[i] -= share
        if job not in b.jobs:
            b.jobs.append(job)
        return b.slots[i]

    def stand_ins(self) -> list[Job]:
        """One job per unit of shared GPUs (most are one GPU) and per new GPU wanted: what the whole-GPU core
        plans."""
        gpus = self.gpus
        return [
            gpus[keys[0]].stand_in() if len(keys) == 1 else _stand_in([gpus[k] for k in keys])
            for keys in self.units.values()
        ] + [b.stand_in() for b in self.news.values()]


def plan_fractions(
    state: ClusterState, config: Config, now: float, explain_waiting: bool, plan_whole: PlanWhole
) -> Plan:
    pack = Packing.of(state)
    gpus, news = pack.gpus, pack.news
    # the whole-GPU view: whole jobs, one stand-in job per shared GPU and per new GPU wanted
    whole = [j for j in state.jobs if j.gpu_fraction is None]
    inner = plan_whole(replace(state, jobs=(*whole, *pack.stand_ins())), config, now, explain_waiting)

    names = _Names(pack)
    inner_reason = {d.job: d.reason for d in inner.decisions if d.job.startswith(PREFIX) and d.project}
    releases: list[Decision] = []
    starts: list[Decision] = []
    freed: set[GpuKey] = set()
    opened: dict[int, GpuKey] = {}
    evicted: dict[JobKey, Decision] = {}
    for d in inner.decisions:
        if not d.job.startswith(PREFIX):
            fixed = names.decision(d)
            (releases if d.action in (Action.SHRINK, Action.EVICT) else starts).append(fixed)
            continue
        if d.action in (Action.SHRINK, Action.EVICT):
            for key in pack.units[d.job]:
                freed.add(key)
                for job in gpus[key].jobs:
                    evicted.setdefault(job.key, d)
        elif d.job.startswith(f"{PREFIX}new/"):
            b = news[int(d.job.rsplit("/", 1)[1])]
            for p in d.replicas:
                opened[b.slots[p.index]] = (p.node, -1)
    for job in pack.lost:
        if job.key not in evicted:
            evicted[job.key] = Decision(
                Action.EVICT,
                job.project,
                job.name,
                (),
                "a node it ran on is gone; a fractional job restarts whole",
                Cause.NODE,
            )
    jobs_by_key = {j.key: j for j in state.jobs}
    known = {n.name for n in state.nodes}
    for job_key, why in sorted(evicted.items()):
        releases.append(_evict(jobs_by_key[job_key], why, names, now, known))

    _number_opened(gpus, opened)
    fractional_starts, waits = _start_waiting(pack, freed, opened, inner_reason, names)
    starts += fractional_starts
    started = {(d.project, d.job) for d in starts}
    notes = _notes(inner, names, pack, waits=waits, started=started, explain=explain_waiting)
    reservations = tuple(names.reservation(r) for r in inner.reservations)
    return replace(
        inner,
        decisions=(*releases, *starts),
        notes=notes,
        reservations=reservations,
    )


def _number_opened(gpus: dict[GpuKey, SharedGpu], opened: dict[int, GpuKey]) -> None:
    """Number the GPUs opened on each node: the lowest numbers no shared GPU of that node has."""
    used: dict[str, set[int]] = {}
    for node, number in gpus:
        used.setdefault(node, set()).add(number)
    for b in sorted(opened):
        node = opened[b][0]
        taken = used.setdefault(node, set())
        n = next(i for i in range(len(taken) + 1) if i not in taken)
        taken.add(n)
        opened[b] = (node, n)


def _start_waiting(
    pack: Packing, freed: set[GpuKey], opened: dict[int, GpuKey], inner_reason: dict[str, str], names: _Names
) -> tuple[list[Decision], dict[JobKey, str]]:
    """Start the waiting jobs whose every replica has its place: on a shared GPU that is not being freed, or
    on a new GPU the core started. What waits because its GPU is being freed says so."""
    gpus = pack.gpus
    starts: list[Decision] = []
    started_on: dict[GpuKey, list[str]] = {}
    waits: dict[JobKey, str] = {}
    for job in pack.waiting:
        share = job.gpu_fraction
        assert share is not None
        places: list[GpuKey] = []
        for kind, where in pack.targets[job.key]:
            if kind == "old":
                assert isinstance(where, tuple)
                if where in freed:
                    waits[job.key] = (
                        "the shared GPU it was to join is being freed; it is placed again next cycle"
                    )
                    break
                places.append(where)
            else:
                assert isinstance(where, int)
                if where not in opened:
                    break
                places.append(opened[where])
        else:
            partners = sorted(
                {f"{j.project}/{j.name}" for k in places if k in gpus for j in gpus[k].jobs}
                | {name for k in places for name in started_on.get(k, [])}
            )
            for k in places:
                started_on.setdefault(k, []).append(f"{job.project}/{job.name}")
            labels = [
                pack.news[pack.slot_of[w][0]].label
                for kind, w in pack.targets[job.key]
                if kind == "new" and isinstance(w, int)
            ]
            new_reason = next((inner_reason[label] for label in labels if label in inner_reason), "")
            starts.append(
                Decision(
                    Action.START,
                    job.project,
                    job.name,
                    tuple(Placement(i, node, 0, share=share, gpu=n) for i, (node, n) in enumerate(places)),
                    names.text(_start_reason(job, places, partners, new_reason)),
                )
            )
    return starts, waits


class _Names:
    """Rewrites the core's stand-in names in its reasons and holds into the fractional jobs they stand for."""

    def __init__(self, pack: Packing) -> None:
        self.pack = pack
        self.news = {b.label: b for b in pack.news.values()}

    def _jobs(self, label: str) -> list[Job] | None:
        """The jobs running on the shared GPUs of stand-in ``label``, in key order; None if it is none."""
        keys = self.pack.units.get(label)
        if keys is None:
            return None
        return sorted({j.key: j for k in keys for j in self.pack.gpus[k].jobs}.values(), key=_job_key)

    def _words(self, label: str) -> str | None:
        jobs = self._jobs(label)
        if jobs is not None:
            members = ", ".join(f"{j.project}/{j.name}" for j in jobs) or "stopping jobs"
            many = len(self.pack.units[label]) > 1
            return f"the GPUs shared by {members}" if many else f"the GPU shared by {members}"
        b = self.news.get(label)
        return None if b is None else ", ".join(f"{j.project}/{j.name}" for j in b.jobs)

    def _sub(self, found: re.Match[str]) -> str:
        words = self._words(found.group(2))
        if words is None:
            return found.group(0)
        project = found.group(1)
        if project is None or words.startswith("the GPU") or words.startswith(f"{project}/"):
            return words
        return f"{project}/{words}"

    def text(self, reason: str) -> str:
        if "~gpu/" not in reason and "~new/" not in reason:
            return reason
        return _STAND_IN.sub(self._sub, reason)

    def first(self, project: str, label: str) -> str:
        """The name of the first fractional job a stand-in stands for (its own label if none)."""
        jobs = self._jobs(label)
        if jobs:
            return jobs[0].name
        b = self.news.get(label)
        return b.jobs[0].name if b is not None else label

    def for_job(self, key: JobKey | None) -> JobKey | None:
        if key is None or not key[1].startswith(PREFIX):
            return key
        return (key[0], self.first(*key))

    def decision(self, d: Decision) -> Decision:
        if (
            "~gpu/" not in d.reason
            and "~new/" not in d.reason
            and (d.for_job is None or not d.for_job[1].startswith(PREFIX))
        ):
            return d
        return replace(d, reason=self.text(d.reason), for_job=self.for_job(d.for_job))

    def reservation(self, r: Reservation) -> Reservation:
        if not r.job.startswith(PREFIX):
            return r
        return replace(r, job=self.first(r.project, r.job))


def _evict(job: Job, why: Decision, names: _Names, now: float, known: set[str]) -> Decision:
    share = job.gpu_fraction
    assert share is not None
    active = sorted((r for r in job.replicas if not r.releasing and r.node in known), key=lambda r: -r.index)
    since = job.submitted_at if job.last_resized_at is None else job.last_resized_at
    if job.checkpointed_at is not None and job.checkpointed_at > since:
        since = job.checkpointed_at
    lost = float(share * len(active)) * (now - since) if now > since else 0.0
    return Decision(
        Action.EVICT,
        job.project,
        job.name,
        tuple(Placement(r.index, r.node, 0, share=r.share, gpu=r.gpu) for r in active),
        names.text(why.reason) if why.job.startswith(PREFIX) else why.reason,
        why.cause,
        names.for_job(why.for_job),
        lost,
    )


def show(share: Fraction) -> str:
    """A share as people write it: 0.5, 0.25, 0.333."""
    return f"{float(share):.3g}"


def _start_reason(job: Job, places: list[GpuKey], partners: list[str], new_reason: str) -> str:
    share = job.gpu_fraction
    assert share is not None
    where = ", ".join(f"GPU {n} of {node}" for node, n in places)
    count = "1 replica" if len(places) == 1 else f"{len(places)} replicas"
    words = f"started {count} of {show(share)} GPU on {where}"
    if partners:
        words += f", sharing it with {', '.join(partners)}"
    if not new_reason:
        return words
    return f"{words}; {new_reason.replace('started 1 replica', 'opened the shared GPU', 1)}"


def _notes(
    inner: Plan,
    names: _Names,
    pack: Packing,
    *,
    waits: dict[JobKey, str],
    started: set[JobKey],
    explain: bool,
) -> tuple[JobNote, ...]:
    if not explain:
        return ()
    waiting, targets, news, stopping = pack.waiting, pack.targets, pack.news, pack.stopping
    by_label: dict[JobKey, JobNote] = {}
    kept: list[JobNote] = []  # the core's notes on whole jobs, in key order as it gives them
    for n in inner.notes:
        if n.job.startswith(PREFIX):
            by_label[(n.project, n.job)] = n
        elif "~gpu/" in n.reason or "~new/" in n.reason:
            kept.append(replace(n, reason=names.text(n.reason)))
        else:
            kept.append(n)
    out: list[JobNote] = []
    for job in waiting:
        if job.key in started:
            continue
        if job.key in waits:
            out.append(JobNote(job.project, job.name, waits[job.key], None))
            continue
        note = next(
            (
                by_label[(job.project, news[pack.slot_of[w][0]].label)]
                for kind, w in targets[job.key]
                if kind == "new"
                and isinstance(w, int)
                and (job.project, news[pack.slot_of[w][0]].label) in by_label
            ),
            None,
        )
        if note is not None:
            out.append(JobNote(job.project, job.name, names.text(note.reason), note.queue_position))
        else:
            out.append(
                JobNote(
                    job.project, job.name, "waiting for the other replicas of its gang to be placed", None
                )
            )
    for project, name in sorted(stopping):
        out.append(JobNote(project, name, "waiting for its stopping replicas to exit", None))
    out.sort(key=_note_key)
    return tuple(heapq.merge(kept, out, key=_note_key))


def _note_key(note: JobNote) -> JobKey:
    return (note.project, note.job)


def booked_per_gpu(jobs: Iterable[Job]) -> dict[GpuKey, Fraction]:
    """The fraction booked on each shared GPU (releasing replicas included): never above 1 (R20)."""
    out: dict[GpuKey, Fraction] = {}
    for job in jobs:
        for r in job.replicas:
            if r.gpu is not None and r.share is not None:
                out[(r.node, r.gpu)] = out.get((r.node, r.gpu), Fraction(0)) + r.share
    return out


def whole_view(state: ClusterState, plan: Plan) -> tuple[ClusterState, Plan]:
    """The snapshot and plan as the whole-GPU rules see them: each shared GPU, and each new GPU the waiting
    fractions want, a one-GPU job of its project (evicted when every job on it is, started when the plan opens
    it), exactly what ``plan_fractions`` gives the core. The invariants judge R1-R19 on it."""
    pack = Packing.of(state)
    gpus = pack.gpus
    jobs = {j.key: j for j in state.jobs}
    evicted = {(d.project, d.job): d for d in plan.decisions if d.action == Action.EVICT}
    releases: list[Decision] = []
    starts: list[Decision] = []
    opened: dict[int, dict[int, Placement]] = {}
    for d in plan.decisions:
        job = jobs.get((d.project, d.job))
        if job is None or job.gpu_fraction is None:
            (releases if d.action in (Action.SHRINK, Action.EVICT) else starts).append(d)
            continue
        if d.action != Action.START:
            continue
        for p, (kind, where) in zip(d.replicas, pack.targets[job.key], strict=True):
            if kind == "new" and isinstance(where, int):
                number, index = pack.slot_of[where]
                opened.setdefault(number, {})[index] = Placement(index, p.node, 1)
    for number, places in sorted(opened.items()):
        b = pack.news[number]
        starts.append(
            Decision(Action.START, b.project, b.label, tuple(p for _, p in sorted(places.items())), "")
        )
    for label, keys in sorted(pack.units.items(), key=lambda unit: unit[1][0]):
        on = [j for k in keys for j in gpus[k].jobs]
        if on and all(j.key in evicted for j in on):
            held = tuple(Placement(i, node, 1) for i, (node, _) in enumerate(keys))
            releases.append(replace(evicted[on[0].key], job=label, replicas=held))
    whole = [j for j in state.jobs if j.gpu_fraction is None]
    return (
        replace(state, jobs=(*whole, *pack.stand_ins())),
        replace(plan, decisions=(*releases, *starts)),
    )


def fraction_violations(after: ClusterState) -> list[str]:
    """R20's invariants on a snapshot with a plan applied (releasing replicas still hold what they held)."""
    out: list[str] = []
    capacity = {n.name: n.gpus for n in after.nodes}
    whole: dict[str, int] = {}
    shared: dict[str, set[int]] = {}
    owners: dict[GpuKey, set[tuple[str, bool]]] = {}
    for job in after.jobs:
        active = [r for r in job.replicas if not r.releasing and r.node in capacity]
        if job.gpu_fraction is not None and active and len(active) != job.max_replicas:
            out.append(
                f"fractional job {job.project}/{job.name} runs {len(active)} of its {job.max_replicas} replicas"
            )
        for r in job.replicas:
            if r.gpu is None:
                if job.gpu_fraction is not None:
                    out.append(
                        f"replica {r.index} of fractional job {job.project}/{job.name} has no shared GPU"
                    )
                whole[r.node] = whole.get(r.node, 0) + r.gpus
            else:
                if job.gpu_fraction is None or r.gpus:
                    out.append(
                        f"replica {r.index} of {job.project}/{job.name} holds whole GPUs on a shared GPU"
                    )
                shared.setdefault(r.node, set()).add(r.gpu)
                owners.setdefault((r.node, r.gpu), set()).add((job.project, job.interactive))
    for key, booked in sorted(booked_per_gpu(after.jobs).items()):
        if booked > 1:
            out.append(f"shared GPU {key[1]} of node {key[0]} is booked {booked} (above 1)")
    for key, who in sorted(owners.items()):
        if len(who) > 1:
            out.append(
                f"shared GPU {key[1]} of node {key[0]} is shared across projects or kinds: {sorted(who)}"
            )
    for node, numbers in sorted(shared.items()):
        if node in capacity and whole.get(node, 0) + len(numbers) > capacity[node]:
            out.append(
                f"node {node}: {whole.get(node, 0)} whole GPUs and {len(numbers)} shared GPUs above its {capacity[node]}"
            )
    return out
