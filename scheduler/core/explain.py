"""R13: the sentences a person reads on a decision or a waiting job.

Contract: pure functions of the ledger's figures that return one sentence each, naming the project, the GPU
counts that matter and what would change the outcome. No decision logic lives here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from scheduler.core import goodput, minruntime, sizes
from scheduler.core.clock import clock
from scheduler.core.fairshare import never_fits
from scheduler.core.ledger import Ledger
from scheduler.core.model import Job
from scheduler.core.victims import work_since


class _HasVictim(Protocol):
    @property
    def key(self) -> tuple[str, str]: ...

    @property
    def gpus(self) -> int: ...


def counted(n: int, thing: str) -> str:
    """``1 GPU``, ``2 GPUs``; ``1 replica``, ``3 replicas``."""
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"


def _figures(ledger: Ledger, project: str) -> str:
    cut = ledger.shares.cut.get(project)
    figures = f"{ledger.alloc[project]} of fair share {ledger.shares.project[project]}"
    return figures if cut is None else f"{figures} ({cut})"


def blocked_by_caps(ledger: Ledger, job: Job, need: int, *, freed: int = 0, siblings: int = 0) -> str | None:
    """Why ``need`` more GPUs can never go to this job right now, if they cannot. ``freed``: GPUs its project
    could free by preempting its own lower-priority jobs (they count as not held); ``siblings``: GPUs a
    reclaim could take from the other projects of its department (they count against its caps only)."""
    g = job.gpus_per_replica
    beyond = beyond_cluster(g, need // g, ledger.largest_node, ledger.cluster_slots(g))
    if beyond is not None:
        return beyond
    if need <= ledger.room(job, freed, siblings):
        return None
    p = ledger.projects[job.project]
    held = ledger.claimed(p.name) - freed
    if p.limit_gpus is not None and held + need > p.limit_gpus:
        return f"project {p.name} is at its limit: {held} + {need} GPUs > limit {p.limit_gpus}"
    if job.interactive and ledger.interactive[p.name] + need > p.deserved_gpus:
        used = ledger.interactive[p.name]
        return (
            f"interactive jobs run only inside the deserved quota: project {p.name} has {used} of "
            f"{p.deserved_gpus} GPUs in interactive use and this job needs {need}"
        )
    no_borrowing = not p.allow_over_quota or not ledger.config.borrowing
    if no_borrowing and not job.interactive and held + need > p.deserved_gpus:
        return f"project {p.name} may not go over its quota: {held} + {need} > {p.deserved_gpus} GPUs"
    return f"department {p.department} has no room left for {counted(need, 'GPU')} (its limit, or its interactive quota)"


BEYOND = "does not fit today's cluster"


def beyond_cluster(g: int, k: int, largest: int, slots: int) -> str | None:
    """Why ``k`` replicas of ``g`` GPUs (each replica on one node) fit today's schedulable nodes even all
    empty, and what they would need; ``None`` when they could. Such a job waits, taking from nobody."""
    if not never_fits(g, k, largest, slots):
        return None
    if g > largest:
        return (
            f"{BEYOND}: no schedulable node has {counted(g, 'GPU')} for one replica (the "
            f"largest has {largest}); it would need a node of {g} GPUs, and waits for one without taking GPUs "
            "from anyone"
        )
    return (
        f"{BEYOND}: its {k} replicas of {counted(g, 'GPU')} each need one node's room and "
        f"the schedulable nodes hold at most {slots}; it would need room for {counted(k - slots, 'replica')} "
        "more, and waits for nodes without taking GPUs from anyone"
    )


_LENT = " (GPUs above fair share are lent until another project claims them)"


def started(ledger: Ledger, job: Job, k: int) -> str:
    lent = _LENT if ledger.alloc[job.project] > ledger.shares.project[job.project] else ""
    return f"started {counted(k, 'replica')} on idle GPUs; project {job.project} holds {_figures(ledger, job.project)}{lent}"


def grown(ledger: Ledger, job: Job, k: int, *, owed: bool) -> str:
    if owed or ledger.alloc[job.project] <= ledger.shares.project[job.project]:
        return f"grew by {counted(k, 'replica')} towards its fair share; project {job.project} holds {_figures(ledger, job.project)}"
    return f"grew by {counted(k, 'replica')} into idle GPUs; project {job.project} holds {_figures(ledger, job.project)}{_LENT}"


def waiting_for_release(ledger: Ledger, job: Job, need: int, units: Sequence[_HasVictim]) -> str:
    head = f"waiting for {counted(need, 'GPU')}; project {job.project} holds {_figures(ledger, job.project)}"
    if not units:
        return f"{head}; GPUs being released are held for it"
    return f"{head}; being reclaimed: {_victims(job, units)}"


def _victims(job: Job, units: Sequence[_HasVictim]) -> str:
    by_project: dict[str, int] = {}
    for u in units:
        by_project[u.key[0]] = by_project.get(u.key[0], 0) + u.gpus
    return ", ".join(
        f"{counted(g, 'GPU')} from {'its own lower-priority jobs' if p == job.project else 'project ' + p}"
        for p, g in sorted(by_project.items())
    )


def consolidating(
    ledger: Ledger, job: Job, need: int, moved: Sequence[object], units: Sequence[_HasVictim] = ()
) -> str:
    head = (
        f"waiting for {counted(need, 'GPU')} owed to project {job.project} ({_figures(ledger, job.project)}); "
        f"{counted(len(moved), 'replica')} of other jobs {'is' if len(moved) == 1 else 'are'} moving to other nodes to make room on one node"
    )
    if not units:
        return head
    return f"{head}; being reclaimed to make room for them: {_victims(job, units)}"


def draining(ledger: Ledger, job: Job, nodes: Sequence[str]) -> str:
    g = job.gpus_per_replica
    held = ", ".join(nodes) if nodes else "none yet"
    return (
        f"waiting for {job.min_replicas} x {g} GPUs on whole nodes; nodes held for it as they drain: {held} "
        f"(project {job.project} holds {_figures(ledger, job.project)})"
    )


def pending(ledger: Ledger, job: Job, need: int, *, entitled: bool) -> str:
    p = job.project
    if ledger.domains.required(job):  # R17
        return (
            f"waiting for {counted(need, 'GPU')} inside one topology domain (it requires one); no domain has "
            f"room for {counted(job.min_replicas, 'replica')} of {counted(job.gpus_per_replica, 'GPU')} now"
        )
    if entitled:
        return (
            f"waiting for {counted(need, 'GPU')}; project {p} is within its fair share ({_figures(ledger, p)}) "
            "but no GPUs can be reclaimed right now (others are within theirs, or settling after a resize)"
            f"{_protection(ledger, p)}"
        )
    return (
        f"waiting for {counted(need, 'idle GPU')}; project {p} holds {_figures(ledger, p)}, "
        "so it can only borrow GPUs that are idle"
    )


def _protection(ledger: Ledger, project: str) -> str:
    """R15: when the minimum runtime of jobs a reclaim for ``project`` could take ends (nothing when R2 lets
    its claims take them anyway: its project is below its guarantee)."""
    if not ledger.young or ledger.committed(project) < ledger.shares.guarantee[project]:
        return ""
    above = (q for q in ledger.projects if q != project and ledger.claimed(q) > ledger.shares.project[q])
    return minruntime.until_text(ledger.young, above)


def running_below_max(ledger: Ledger, job: Job) -> str:
    """Why a running elastic job is not at ``max_replicas`` after this cycle."""
    act, p = len(ledger.active[job.key]), job.project
    head = f"running {act} of max {job.max_replicas} replicas"
    if job.key in ledger.released:
        return f"{head}; shrunk: {ledger.released[job.key].reason}"
    if ledger.settling(job):
        until = ledger.settled_at(job)  # R18: longer for a job whose resize costs more
        return f"{head}; settling after a resize until {clock(until)}"
    if ledger.room(job) < job.gpus_per_replica:
        capped = blocked_by_caps(ledger, job, job.gpus_per_replica)  # its limit, quota or department's
        return f"{head}; {capped or f'project {p} has no room under its limit or quota'}"
    if ledger.config.goodput and job.throughput is not None and act >= goodput.peak(job.throughput):  # R19
        return f"{head}; it runs fastest at {act} (from the speeds it reported, more replicas would slow it down)"
    step = sizes.grow_at_least(job, act, 1)
    if job.allowed_replicas:  # R16: it grows a whole step at a time
        head = f"{head} ({sizes.describe(job)}); grows by {step} at once"
    held_to = _held_to_domain(ledger, job, step)
    if held_to:
        return f"{head}; {held_to} (project {p} holds {_figures(ledger, p)})"
    return f"{head}; grows when GPUs are idle (project {p} holds {_figures(ledger, p)})"


def _held_to_domain(ledger: Ledger, job: Job, step: int) -> str:
    """R17: a job that requires its master's domain and has no room there for its next ``step`` while GPUs
    are idle in other domains waits for room in its own, not for idle GPUs."""
    if not ledger.domains.required(job):
        return ""
    home = ledger.home(job)
    if home is None or ledger.domains.fit(home, ledger.free, job.gpus_per_replica) >= step:
        return ""
    elsewhere = ledger.free.total() - ledger.domains.spare(home, ledger.free)
    if elsewhere <= 0:
        return ""
    return (
        f"waits for room in its topology domain {home} (it requires one); "
        f"{counted(elsewhere, 'GPU')} {'is' if elsewhere == 1 else 'are'} idle elsewhere"
    )


def work_lost(job: Job, gpus: int, lost: float, now: float) -> str:
    """What stopping the job costs (R5's least-work-lost tie-break weighs it): ``loses ~40 GPU-minutes of
    work (4 GPUs x 10 min since its last checkpoint)``."""
    since = work_since(job)
    if job.checkpointed_at is not None and job.checkpointed_at >= since:
        anchor = "since its last checkpoint"
    elif job.checkpointed_at is None:
        anchor = "since it last started or was resized; it has reported no checkpoint"
    else:
        anchor = "since it last started or was resized, after its last checkpoint"
    if lost < 0.5:
        return "loses no work (it checkpointed or restarted just now)"
    return f"loses ~{amount(lost, 'GPU-')} of work ({counted(gpus, 'GPU')} x {amount(now - since)} {anchor})"


def amount(seconds: float, prefix: str = "") -> str:
    """A readable length: ``45 s``, ``12 min``, ``3.5 h`` (``prefix`` ``GPU-``: ``12 GPU-minutes``)."""
    if seconds < 90:
        n, unit = round(seconds), ("seconds" if prefix else "s")
    elif seconds < 90 * 60:
        n, unit = round(seconds / 60), ("minutes" if prefix else "min")
    else:
        hours = seconds / 3600
        figure = f"{hours:.1f}" if hours < 10 else f"{round(hours):,}"
        return f"{figure} {prefix}hours" if prefix else f"{figure} h"
    if prefix:
        return f"{n} {prefix}{unit[:-1] if n == 1 else unit}"
    return f"{n} {unit}"
