"""Invariants every plan must keep; run by tests, the simulator at every cycle and the live loop in debug.

Contract: ``check_invariants(state, plan, config, *, now)`` returns the violated rules as sentences (empty when
all hold). It judges the plan by the snapshot it was made from and by that snapshot with the plan applied
(released replicas kept as releasing: they still hold their GPUs).
"""

from __future__ import annotations

from scheduler.core import fractions, goodput, minruntime, resize_cost, sizes, topology
from scheduler.core.cycle import apply_plan
from scheduler.core.fairshare import Shares, Top, fair_shares
from scheduler.core.model import UNLIMITED, ClusterState, Config, Job, Project
from scheduler.core.plan import Action, Cause, Plan


def check_invariants(state: ClusterState, plan: Plan, config: Config, *, now: float) -> list[str]:
    if fractions.has_fractions(state):  # R20: its own invariants, then R1-R19 on the whole-GPU view
        own = fractions.fraction_violations(apply_plan(state, plan, now=now, instant=False))
        return own + _check(*fractions.whole_view(state, plan), config, now)
    return _check(state, plan, config, now)


def _check(state: ClusterState, plan: Plan, config: Config, now: float) -> list[str]:
    after = apply_plan(state, plan, now=now, instant=False)
    return [
        *_nodes_not_over_allocated(after),
        *_limits_kept(state, after),
        *_caps_kept_with_holds(state, plan, after, config),
        *_interactive_rules(state, plan, after),
        *_master_last(state, plan),
        *_gangs_whole(after),
        *_sizes_kept(after),
        *_domains_kept(after, plan, config),
        *_work_conserved(after, plan, config, now),
        *_guarantee_served(state, after, plan, config),
        *_reclaim_never_ping_pongs(state, plan, config),
        *_min_runtime_kept(state, plan, config, now),
        *_settle_kept(state, plan, config, now),
        *_drain_held_once(state, plan),
        *_starts_whole(state, after, plan, config),
    ]


def _starts_whole(before: ClusterState, after: ClusterState, plan: Plan, config: Config) -> list[str]:
    """R18, decisions 62 and 71: a job is not started while GPUs being released are held for it to grow by next
    cycle (it starts once, whole, when they are free) if its resize costs anything, or if, with a settle time
    longer than until the next plan, its project is at its guarantee without them (it could not grow into them
    then)."""
    held = {(r.project, r.job) for r in plan.reservations if r.firm}
    starts = [
        (d.project, d.job) for d in plan.decisions if d.action == Action.START and (d.project, d.job) in held
    ]
    if not starts:
        return []
    projects = {p.name: p for p in before.projects}
    costs = resize_cost.costs(before.jobs, projects, {d.name: d for d in before.departments}, config)
    # a node whose holds take more than its idle GPUs: some of what is held there is still being released
    releasing = {node for node, gpus in _idle(after, plan).items() if gpus < 0}
    claimed = _claimed(after, plan)
    settles = config.settle_seconds > config.next_plan_seconds  # past the next plan: it could not grow then
    guarantee = fair_shares(before, config).guarantee if settles else {}
    out: list[str] = []
    for p, j in starts:
        growth = [r for r in plan.reservations if (r.project, r.job) == (p, j) and r.firm]
        if not any(r.node in releasing for r in growth):
            continue
        if costs.get((p, j), 0.0) > 0:
            out.append(
                f"{p}/{j} starts now and waits for more GPUs being released to grow at once (a resize costs "
                f"it {costs[(p, j)]:g} s)"
            )
        elif guarantee and claimed[p] - sum(r.gpus for r in growth) >= guarantee[p]:
            out.append(
                f"{p}/{j} starts now and waits for more GPUs being released that it may not grow into for "
                f"its settle time ({config.settle_seconds:g} s)"
            )
    return out


def _drain_held_once(before: ClusterState, plan: Plan) -> list[str]:
    """Decision 35: a node is held as it drains (a hold of less than one replica) for one job at most."""
    g = {job.key: job.gpus_per_replica for job in before.jobs}
    holders: dict[str, set[tuple[str, str]]] = {}
    for r in plan.reservations:
        if not r.firm and r.gpus < g.get((r.project, r.job), 0):
            holders.setdefault(r.node, set()).add((r.project, r.job))
    return [
        f"node {node} is held for {len(jobs)} jobs at once: {sorted(jobs)}"
        for node, jobs in holders.items()
        if len(jobs) > 1
    ]


def _held(state: ClusterState) -> dict[str, int]:
    held = {n.name: 0 for n in state.nodes}
    for job in state.jobs:
        for r in job.replicas:
            held[r.node] = held.get(r.node, 0) + r.gpus
    return held


def _idle(after: ClusterState, plan: Plan) -> dict[str, int]:
    """GPUs of each schedulable node neither held (releasing replicas included) nor reserved by the plan;
    negative where the plan's holds take GPUs still being released."""
    idle = {n.name: n.gpus for n in after.nodes if n.schedulable}
    for node, held in _held(after).items():
        if node in idle:
            idle[node] -= held
    for r in plan.reservations:
        if r.node in idle:
            idle[r.node] -= r.gpus
    return idle


def _alloc(state: ClusterState, *, interactive: bool | None = None) -> dict[str, int]:
    alloc = {p.name: 0 for p in state.projects}
    for job in state.jobs:
        if interactive is None or job.interactive == interactive:
            alloc[job.project] += sum(r.gpus for r in job.active)
    return alloc


def _claimed(after: ClusterState, plan: Plan) -> dict[str, int]:
    """GPUs per project in active replicas once the plan is applied, plus those it firmly holds for them (they
    start there next cycle): the core's ``Ledger.claimed``."""
    claimed = _alloc(after)
    for r in plan.reservations:
        if r.firm:
            claimed[r.project] += r.gpus
    return claimed


def _nodes_not_over_allocated(after: ClusterState) -> list[str]:
    held = _held(after)
    return [
        f"node {n.name} holds {held[n.name]} GPUs of {n.gpus}" for n in after.nodes if held[n.name] > n.gpus
    ]


def _limits_kept(before: ClusterState, after: ClusterState) -> list[str]:
    """R11 (a project already above a lowered limit only by interactive jobs is left alone: R3)."""
    alloc, fixed = _alloc(after), _alloc(after, interactive=True)
    return [
        f"project {p.name} holds {alloc[p.name]} GPUs above its limit {p.limit_gpus}"
        for p in before.projects
        if p.limit_gpus is not None and alloc[p.name] > max(p.limit_gpus, fixed[p.name])
    ]


def _caps_kept_with_holds(before: ClusterState, plan: Plan, after: ClusterState, config: Config) -> list[str]:
    """R11 and quotas without borrowing, for what a plan gives: a project (and its department) that the plan
    starts, grows or firmly holds GPUs for stays within its limit, and within its quota when it may not
    borrow, counting the firm holds (they start there next cycle; decision 3)."""
    held = _claimed(after, plan)
    given = {d.project for d in plan.decisions if d.action in (Action.START, Action.GROW)}
    given |= {r.project for r in plan.reservations if r.firm}
    out: list[str] = []
    for p in before.projects:
        may_borrow = p.allow_over_quota and config.borrowing
        if p.name in given and _room(p.limit_gpus, p.deserved_gpus, may_borrow, held[p.name]) < 0:
            caps = (
                f"limit {p.limit_gpus}, quota {p.deserved_gpus}{'' if may_borrow else ' without borrowing'}"
            )
            out.append(f"project {p.name} is given GPUs up to {held[p.name]}, above its caps ({caps})")
    dept_of = {p.name: p.department for p in before.projects}
    for dept, room in _dept_room(after, config, held=held).items():
        if room < 0 and any(dept_of[name] == dept for name in given):
            out.append(
                f"department {dept} is given {-room} GPUs above its limit (or its quota, without borrowing)"
            )
    return out


def _interactive_rules(before: ClusterState, plan: Plan, after: ClusterState) -> list[str]:
    """R3: interactive jobs start only inside the deserved quota and are never victims."""
    interactive = {j.key for j in before.jobs if j.interactive}
    out = [
        f"interactive job {d.project}/{d.job} was a victim ({d.action})"
        for d in plan.decisions
        if (d.project, d.job) in interactive and d.action in (Action.SHRINK, Action.EVICT)
    ]
    grew = {(d.project, d.job) for d in plan.decisions if d.action in (Action.START, Action.GROW)}
    inter_after = _alloc(after, interactive=True)
    for p in before.projects:
        if any(k[0] == p.name for k in grew & interactive) and inter_after[p.name] > p.deserved_gpus:
            out.append(
                f"project {p.name} runs {inter_after[p.name]} interactive GPUs over quota {p.deserved_gpus}"
            )
    return out


def _master_last(before: ClusterState, plan: Plan) -> list[str]:
    """R5: a shrink never takes the master; an eviction takes every active replica."""
    jobs = {j.key: j for j in before.jobs}
    out: list[str] = []
    for d in plan.decisions:
        stopped = {p.index for p in d.replicas}
        if d.action == Action.SHRINK and 0 in stopped:
            out.append(f"{d.project}/{d.job}: master shrunk while workers stay")
        if d.action == Action.EVICT and stopped != {r.index for r in jobs[(d.project, d.job)].active}:
            out.append(f"{d.project}/{d.job}: evicted without all of its replicas")
    return out


def _gangs_whole(after: ClusterState) -> list[str]:
    """R8: a running job never has fewer than ``min_replicas`` active replicas."""
    return [
        f"{j.project}/{j.name} runs {len(j.active)} replicas, below min {j.min_replicas}"
        for j in after.jobs
        if 0 < len(j.active) < j.min_replicas
    ]


def _sizes_kept(after: ClusterState) -> list[str]:
    """R16: a running job with allowed sizes runs at one of them (replicas on a node that is gone are lost)."""
    known = {n.name for n in after.nodes}
    out: list[str] = []
    for j in after.jobs:
        count = sum(r.node in known for r in j.active)
        if j.allowed_replicas and not sizes.allowed(j, count):
            out.append(f"{j.project}/{j.name} runs {count} replicas, not among its {sizes.describe(j)}")
    return out


def _domain_of(state: ClusterState, config: Config) -> dict[str, str]:
    """R17: each schedulable node's topology domain, where nodes carry one and the rule is on."""
    return {n.name: n.domain for n in state.nodes if n.domain and n.schedulable} if config.topology else {}


def _domains_kept(after: ClusterState, plan: Plan, config: Config) -> list[str]:
    """R17: a job that requires one topology domain and was started or grown by this plan runs inside one."""
    domain = _domain_of(after, config)
    grew = {(d.project, d.job) for d in plan.decisions if d.action in (Action.START, Action.GROW)}
    out: list[str] = []
    for j in after.jobs:
        if domain and j.topology == topology.REQUIRED and j.key in grew:
            spans = {domain.get(r.node) for r in j.active}
            if len(spans) > 1 or None in spans:
                out.append(
                    f"{j.project}/{j.name} requires one topology domain but runs across {sorted(map(str, spans))}"
                )
    return out


def _fits_idle(job: Job, idle: dict[str, int], domain: dict[str, str]) -> int:
    """Replicas of ``job`` the idle GPUs hold where it may go (R17: one domain when it requires it)."""
    g = job.gpus_per_replica
    if not domain or job.topology != topology.REQUIRED:
        return sum(v // g for v in idle.values() if v > 0)
    per: dict[str, int] = {}
    for node, v in idle.items():
        if v > 0 and node in domain:
            per[domain[node]] = per.get(domain[node], 0) + v // g
    if job.active:
        return per.get(domain.get(job.active[0].node, ""), 0)
    return max(per.values(), default=0)


def _work_conserved(after: ClusterState, plan: Plan, config: Config, now: float) -> list[str]:
    """R4: no idle GPU (not held, not reserved) while a preemptible replica that may use it waits. A
    project's reservations count against its own room, as the core counts them (decisions 3 and 18)."""
    idle = _idle(after, plan)
    alloc = _alloc(after)
    for r in plan.reservations:
        alloc[r.project] += r.gpus
    projects = {p.name: p for p in after.projects}
    depts = _dept_room(after, config, held=alloc)
    domains = _domain_of(after, config)
    resized = {(d.project, d.job) for d in plan.decisions} | {(r.project, r.job) for r in plan.reservations}
    costs = resize_cost.costs(after.jobs, projects, {d.name: d for d in after.departments}, config)  # R18
    ends = resize_cost.settle_ends(after.jobs, costs, config)
    out: list[str] = []
    for job in after.jobs:
        if job.interactive or any(r.releasing for r in job.replicas):
            continue
        settling = _settling(job, config, now, ends) and job.key not in resized
        want = _wanted(job, config, settling=settling, cost=costs.get(job.key, 0.0))
        if want == 0 or (
            job.key in resized
            and job.active
            and any(r.job == job.name and r.project == job.project for r in plan.reservations)
        ):
            continue
        p = projects[job.project]
        room = _room(p.limit_gpus, p.deserved_gpus, p.allow_over_quota and config.borrowing, alloc[p.name])
        room = min(room, depts.get(p.department or "", room))
        fits = _fits_idle(job, idle, domains)
        if want * job.gpus_per_replica <= room and fits >= want:
            out.append(f"{job.project}/{job.name} waits for {want} replicas while GPUs are idle")
    return out


def _wanted(job: Job, config: Config, *, settling: bool, cost: float = 0.0) -> int:
    """Replicas a job could use next: its gang when pending, its next size when elastic and not settling
    (R18: the smallest growth that pays for its restart; none if even growing to its max would not)."""
    if not job.active:
        return job.max_replicas if not config.elastic else job.min_replicas
    n = len(job.active)
    if config.elastic and n < job.max_replicas and not settling:
        least = resize_cost.smallest_paying(n, cost, config)
        if least > job.max_replicas - n:
            return 0  # no growth it may make pays
        step = sizes.grow_at_least(job, n, least)  # the next allowed size (R16)
        if config.goodput and job.throughput and n + step > goodput.peak(job.throughput):
            return 0  # R19: never past its peak speed, where more replicas would slow it down
        return step
    return 0


def _settling(job: Job, config: Config, now: float, ends: dict[tuple[str, str], float] | None = None) -> bool:
    t = job.last_resized_at
    if t is None:
        return False
    end = (ends or {}).get(job.key)
    return now < (t + config.settle_seconds if end is None else end)


def _room(limit: int | None, deserved: int, may_borrow: bool, alloc: int) -> int:
    caps = [limit - alloc] if limit is not None else []
    if not may_borrow:
        caps.append(deserved - alloc)
    return min(caps) if caps else UNLIMITED


def _dept_room(state: ClusterState, config: Config, held: dict[str, int] | None = None) -> dict[str, int]:
    """GPUs each capped department (a limit, or no borrowing) may still take, its projects holding ``held``
    (else what they run)."""
    alloc = _alloc(state) if held is None else held
    room: dict[str, int] = {}
    for d in state.departments:
        caps = [d.limit_gpus] if d.limit_gpus is not None else []
        caps += [] if config.borrowing else [d.deserved_gpus]
        if caps:
            room[d.name] = min(caps) - sum(alloc[p.name] for p in state.projects if p.department == d.name)
    return room


def _may_take(state: ClusterState, job: Job, gpus: int, config: Config, shares: Shares) -> bool:
    """Whether caps (R3, R11, no over-quota) let ``job`` take ``gpus`` more GPUs in ``state``; a department's
    caps count what its other projects hold above their fair shares in preemptible jobs as free (a reclaim
    between them leaves its total as it was: decision 36)."""
    p = next(p for p in state.projects if p.name == job.project)
    alloc, inter = _alloc(state)[p.name], _alloc(state, interactive=True)[p.name]
    room = _room(p.limit_gpus, p.deserved_gpus, p.allow_over_quota and config.borrowing, alloc)
    dept_room = _dept_room(state, config).get(p.department or "")
    if dept_room is not None and not job.interactive:
        held, fixed = _alloc(state), _alloc(state, interactive=True)
        dept_room += sum(
            max(0, min(held[q.name] - shares.project[q.name], held[q.name] - fixed[q.name]))
            for q in state.projects
            if q.department == p.department and q.name != p.name
        )
    room = min(room, room if dept_room is None else dept_room)
    if job.interactive:
        room = min(room, p.deserved_gpus - inter, _dept_interactive_room(state, p.department))
    return gpus <= room


def _dept_interactive_room(state: ClusterState, dept: str | None) -> int:
    d = next((d for d in state.departments if d.name == dept), None)
    if d is None:
        return UNLIMITED
    members = {p.name for p in state.projects if p.department == dept}
    used = sum(r.gpus for j in state.jobs if j.interactive and j.project in members for r in j.active)
    return d.deserved_gpus - used


def _guarantee_served(before: ClusterState, after: ClusterState, plan: Plan, config: Config) -> list[str]:
    """R2: a project below ``min(deserved, demand)`` with a pending job it is owed gets GPUs, reserved or now,
    unless what the plan leaves takeable (idle, or preemptible above a fair share) could not fit that job,
    or the job does not fit today's cluster at all."""
    shares = fair_shares(before, config)
    alloc = _alloc(before)
    served = {d.project for d in plan.decisions if d.action in (Action.START, Action.GROW)}
    served |= {r.project for r in plan.reservations}
    reserved = sum(r.gpus for r in plan.reservations)
    held_to_one_domain = bool(_domain_of(before, config))  # R17: such a gang waits for room in one domain
    out: list[str] = []
    for p in before.projects:
        if alloc[p.name] >= shares.guarantee[p.name] or p.name in served:
            continue
        owed = [
            j
            for j in before.jobs
            if j.project == p.name
            and not j.replicas
            and not (held_to_one_domain and j.topology == topology.REQUIRED)
            and _gang(j, config) // j.gpus_per_replica <= _slots(before, j.gpus_per_replica)
            and alloc[p.name] + _gang(j, config) <= shares.project[p.name]
            and _may_take(after, j, _gang(j, config), config, shares)
            and _gang(j, config) <= _takeable(after, shares, p, _gang(j, config)) - reserved
        ]
        if owed:
            out.append(
                f"project {p.name} is below its guarantee and {owed[0].name} is owed GPUs but got none"
            )
    return out


def _takeable(state: ClusterState, shares: Shares, claimant: Project, gang: int) -> int:
    """GPUs R2 can draw on for ``claimant``: idle ones, and preemptible ones held above a fair share, across
    departments only while the claimant's department stays within its own share (R7 at that level).
    Interactive GPUs are never victims (R3), so where quotas add up to more than the cluster the guarantee
    can fall short."""
    idle = sum(n.gpus for n in state.nodes if n.schedulable) - sum(
        r.gpus for j in state.jobs for r in j.replicas if _schedulable(state, r.node)
    )
    alloc, fixed = _alloc(state), _alloc(state, interactive=True)
    projects = {p.name: p for p in state.projects}
    top_alloc: dict[Top, int] = {}
    for name, a in alloc.items():
        key = shares.top(projects[name])[0]
        top_alloc[key] = top_alloc.get(key, 0) + a
    c_top, c_share = shares.top(claimant)
    crossing = top_alloc[c_top] + gang <= c_share
    over = 0
    for name, a in alloc.items():
        top, share = shares.top(projects[name])
        if a <= shares.project[name] or (top != c_top and (not crossing or top_alloc[top] <= share)):
            continue
        over += min(a - shares.project[name], a - fixed[name])
    return idle + over


def _slots(state: ClusterState, g: int) -> int:
    """Replicas of ``g`` GPUs the schedulable nodes could hold all empty: a gang needing more waits (R8)."""
    return sum(n.gpus // g for n in state.nodes if n.schedulable)


def _schedulable(state: ClusterState, node: str) -> bool:
    return any(n.name == node and n.schedulable for n in state.nodes)


def _gang(job: Job, config: Config) -> int:
    return (job.min_replicas if config.elastic else job.max_replicas) * job.gpus_per_replica


def _reclaim_never_ping_pongs(before: ClusterState, plan: Plan, config: Config) -> list[str]:
    """R7: reclaim takes only from projects above their fair share, for projects below theirs. A victim is
    measured by what it holds plus what the plan starts or firmly holds for it (its own claims this cycle,
    served before the reclaim; decision 3); a claimant by what it holds less what it gave up itself in this
    plan (R10: it preempted its own lower-priority jobs first, and reclaims only the rest; decision 29)."""
    shares = fair_shares(before, config)
    alloc = _alloc(before)
    own = _less_own_preemptions(alloc, plan)
    firm: dict[str, int] = {}
    for r in plan.reservations:
        if r.firm:
            firm[r.project] = firm.get(r.project, 0) + r.gpus
    for d in plan.decisions:
        if d.action in (Action.START, Action.GROW):
            firm[d.project] = firm.get(d.project, 0) + d.gpus
    out: list[str] = []
    for d in plan.decisions:
        if d.cause != Cause.RECLAIM or d.for_job is None:
            continue
        if alloc[d.project] + firm.get(d.project, 0) <= shares.project[d.project]:
            out.append(f"reclaim took from {d.project}, which is not above its fair share")
        claimant = d.for_job[0]
        if own[claimant] >= shares.project[claimant]:
            out.append(f"reclaim for {claimant}, which is not below its fair share")
    return out


def _less_own_preemptions(alloc: dict[str, int], plan: Plan) -> dict[str, int]:
    """What each project holds less what it gave up itself in ``plan`` (R10: preemptions inside a project)."""
    out = dict(alloc)
    for d in plan.decisions:
        if d.cause == Cause.PREEMPT:
            out[d.project] -= d.gpus
    return out


def _settle_kept(before: ClusterState, plan: Plan, config: Config, now: float) -> list[str]:
    """R7, R18: no job inside its settle time (ten resize costs, at least ``settle_seconds``) is shrunk or
    evicted by reclaim for another project unless that project was below its guarantee (R2; R10 and the
    other causes are not reclaim)."""
    projects = {p.name: p for p in before.projects}
    costs = resize_cost.costs(before.jobs, projects, {d.name: d for d in before.departments}, config)
    ends = resize_cost.settle_ends(before.jobs, costs, config)
    settling = {j.key for j in before.jobs if j.active and _settling(j, config, now, ends)}
    if not settling or not any(d.cause == Cause.RECLAIM for d in plan.decisions):
        return []
    shares, alloc = fair_shares(before, config), _less_own_preemptions(_alloc(before), plan)
    return [
        f"{d.project}/{d.job} was reclaimed for {d.for_job[0]} inside its settle time, and project "
        f"{d.for_job[0]} was not below its guarantee"
        for d in plan.decisions
        if d.cause == Cause.RECLAIM
        and d.for_job is not None
        and d.for_job[0] != d.project
        and (d.project, d.job) in settling
        and alloc[d.for_job[0]] >= shares.guarantee[d.for_job[0]]
    ]


def _min_runtime_kept(before: ClusterState, plan: Plan, config: Config, now: float) -> list[str]:
    """R15: no job inside its minimum runtime is taken for another project (reclaim, or a move to make a whole
    node) unless that project was below its guarantee (counting what it gave up itself in this plan)."""
    projects = {p.name: p for p in before.projects}
    departments = {d.name: d for d in before.departments}
    young = minruntime.young(before.jobs, projects, departments, now)
    if not young:
        return []
    shares, alloc = fair_shares(before, config), _less_own_preemptions(_alloc(before), plan)
    return [
        f"{d.project}/{d.job} was taken for {d.for_job[0]} inside its minimum runtime, and project "
        f"{d.for_job[0]} was not below its guarantee"
        for d in plan.decisions
        if d.for_job is not None
        and d.for_job[0] != d.project
        and (d.project, d.job) in young
        and alloc[d.for_job[0]] >= shares.guarantee[d.for_job[0]]
    ]
