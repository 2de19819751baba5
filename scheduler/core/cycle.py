"""The one entry point: ``plan_cycle(state, config, *, now) -> Plan``, and ``apply_plan`` for replays.

Contract: ``plan_cycle`` is a pure function: the same arguments give the same plan, whatever the order of the
tuples in the snapshot. A cycle is a short numbered pipeline, least disruptive step first:

1. fair shares (R1);
2. limits: a project above its limit gives back preemptible GPUs (R11);
3. restores: a running gang below ``min_replicas`` is made whole or sent back to pending (R8);
4. claims, in line order: start pending gangs (R8), grow towards fair share, by reclaim (R2, R5-R7) or
   preemption inside a project (R10) if need be;
5. grow into idle GPUs (R4, R9);
6. explain every job not at its wanted size (R13).

``apply_plan`` is what a perfect executor would do with a plan: the shell of the simulator and the tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from scheduler.core import collector, explain
from scheduler.core.allocate import serve_claims
from scheduler.core.carry import Carry
from scheduler.core.claims import Claims
from scheduler.core.fairshare import fair_shares
from scheduler.core.fractions import has_fractions, plan_fractions
from scheduler.core.growth import grow_idle, restore_gangs
from scheduler.core.ledger import Ledger
from scheduler.core.model import ClusterState, Config, Job, Replica
from scheduler.core.plan import Action, Decision, JobNote, Placement, Plan, ProjectShare
from scheduler.core.preemption import enforce_limits
from scheduler.core.starts import start_whole
from scheduler.core.victims import lost_work, victim_order


def plan_cycle(
    state: ClusterState,
    config: Config,
    *,
    now: float,
    explain_waiting: bool = True,
    carry: Carry | None = None,
) -> Plan:
    """Plan one cycle. ``explain_waiting=False`` leaves out the plan's ``notes`` (R13: why each job waits and
    its place in line), and only them: a replay that never reads them (the simulator) saves their cost; the
    decisions, with their reasons, and the reservations are the same either way. ``carry``: what the last
    cycles of the same caller computed (``scheduler.core.carry``), kept and reused where its inputs did not
    change; the plan is the same without it."""
    # The collector would walk the heap (the snapshot included) several times meanwhile: 20 % of a 51,200-GPU
    # cycle (``scheduler.core.collector``).
    with collector.paused():
        if has_fractions(state):  # R20: fractional jobs are planned through stand-ins for their GPUs, new
            return plan_fractions(state, config, now, explain_waiting, _plan)  # objects each cycle: no carry
        return _plan(state, config, now, explain_waiting, carry)


def _plan(
    state: ClusterState, config: Config, now: float, explain_waiting: bool, carry: Carry | None = None
) -> Plan:
    inputs = (state.jobs, state.projects, state.nodes, state.departments, config, explain_waiting)
    if carry is not None:  # the snapshot has not changed and no time the last plan compared with has come
        kept = carry.kept_plan(inputs, now)
        if kept is not None:
            return kept
    shares = fair_shares(state, config, carry)  # 1
    ledger = Ledger(state, shares, config, now, carry=carry)
    claims = Claims(outcomes={}, start_reasons={}, line=[], explain=explain_waiting)
    order = victim_order(ledger)
    enforce_limits(ledger, order)  # 2
    restore_gangs(ledger, claims)  # 3
    serve_claims(ledger, order, claims)  # 4
    grow_idle(ledger, claims)  # 5
    start_whole(ledger, claims)  # R18: a start about to grow waits to start whole (decision 62)
    dept_alloc = _dept_alloc(state, ledger)
    plan = Plan(  # 6
        decisions=_decisions(ledger, claims),
        notes=_notes(ledger, claims) if explain_waiting else (),
        shares=_shares(state, ledger),
        department_shares=tuple(
            ProjectShare(
                d.name,
                d.deserved_gpus,
                shares.department[d.name],
                dept_alloc.get(d.name, 0),
                0,
                d.over_quota_weight,
            )
            for d in sorted(state.departments, key=lambda d: d.name)
        ),
        reservations=tuple(ledger.reservations),
    )
    if carry is not None:
        carry.keep_plan(inputs, now, ledger.plan_holds_until(decided=bool(plan.decisions)), plan)
    ledger.end()
    return plan


def _decisions(ledger: Ledger, claims: Claims) -> tuple[Decision, ...]:
    out: list[Decision] = []
    for key, rel in ledger.released.items():
        replicas = tuple(
            Placement(r.index, r.node, r.gpus) for r in sorted(rel.replicas, key=lambda r: -r.index)
        )
        action = Action.EVICT if rel.whole else Action.SHRINK
        job, gpus = ledger.jobs[key], ledger.held_gpus[key]
        lost = lost_work(job, gpus, ledger.now)
        reason = f"{rel.reason}; {explain.work_lost(job, gpus, lost, ledger.now)}"
        out.append(Decision(action, key[0], key[1], replicas, reason, rel.cause, rel.for_job, lost))
    for key, placements in ledger.started.items():
        was_running = any(not r.releasing for r in ledger.jobs[key].replicas)
        action = Action.GROW if was_running else Action.START
        reason = claims.start_reasons.get(key, "")
        out.append(Decision(action, key[0], key[1], tuple(sorted(placements, key=lambda p: p.index)), reason))
    return tuple(out)


def _notes(ledger: Ledger, claims: Claims) -> tuple[JobNote, ...]:
    position = {key: i + 1 for i, key in enumerate(k for k in claims.line if claims.outcomes[k].waiting)}
    notes: list[JobNote] = []
    for key, job in ledger.jobs.items():  # in key order
        act = ledger.active[key]
        if act and len(act) >= job.max_replicas:
            continue
        if key in claims.outcomes:
            reason = claims.outcomes[key].reason
        elif key in ledger.stopping:
            n = sum(r.releasing for r in job.replicas)
            reason = f"waiting for {n} stopping replicas to exit before it is resized again"
        elif not act:  # every pending job is a claim with an outcome unless it was a victim this cycle
            reason = f"back to pending: {ledger.released[key].reason}"
        elif key in claims.held_back and key not in ledger.started:  # R18
            reason = f"running {len(act)} of max {job.max_replicas} replicas; {claims.held_back[key]}"
        else:
            reason = explain.running_below_max(ledger, job)
        notes.append(JobNote(key[0], key[1], reason, position.get(key)))
    return tuple(notes)


def _shares(state: ClusterState, ledger: Ledger) -> tuple[ProjectShare, ...]:
    before, s = ledger.held_by_project, ledger.shares
    return tuple(
        ProjectShare(
            p.name, p.deserved_gpus, s.project[p.name], before[p.name], s.demand[p.name], s.weight[p.name]
        )
        for p in sorted(state.projects, key=lambda p: p.name)
    )


def _dept_alloc(state: ClusterState, ledger: Ledger) -> dict[str, int]:
    """GPUs in the snapshot's active replicas per department: its projects' (``Ledger.held_by_project``)."""
    out: dict[str, int] = {}
    for p in state.projects:
        if p.department is not None:
            out[p.department] = out.get(p.department, 0) + ledger.held_by_project[p.name]
    return out


def apply_plan(state: ClusterState, plan: Plan, *, now: float, instant: bool = True) -> ClusterState:
    """The snapshot after a perfect executor carried out ``plan``.

    ``instant``: released replicas are gone at once (and replicas that were already releasing too);
    otherwise they stay as ``releasing`` until ``finish_releases``.
    """
    by_job: dict[tuple[str, str], list[Decision]] = {}
    for d in plan.decisions:
        by_job.setdefault((d.project, d.job), []).append(d)
    jobs = tuple(_apply_job(job, by_job.get(job.key, ()), now, instant) for job in state.jobs)
    return replace(state, jobs=jobs)


def _apply_job(job: Job, decisions: Sequence[Decision], now: float, instant: bool) -> Job:
    if not decisions and not (instant and any(r.releasing for r in job.replicas)):
        return job  # untouched: most jobs of a large snapshot (the forecast applies a plan every cycle)
    replicas = list(job.replicas)
    if instant:
        replicas = [r for r in replicas if not r.releasing]
    for d in decisions:
        if d.action in (Action.SHRINK, Action.EVICT):
            stop = {p.index for p in d.replicas}
            kept = [r for r in replicas if r.index not in stop or r.releasing]
            gone = (
                []
                if instant
                else [replace(r, releasing=True) for r in replicas if r.index in stop and not r.releasing]
            )
            replicas = kept + gone
        else:
            replicas += [Replica(p.index, p.node, p.gpus, share=p.share, gpu=p.gpu) for p in d.replicas]
    return replace(
        job,
        replicas=tuple(sorted(replicas, key=lambda r: (r.index, r.releasing))),
        last_resized_at=now if decisions else job.last_resized_at,
    )


def finish_releases(state: ClusterState) -> ClusterState:
    """Every releasing replica has exited."""
    return replace(
        state,
        jobs=tuple(replace(j, replicas=tuple(r for r in j.replicas if not r.releasing)) for j in state.jobs),
    )
