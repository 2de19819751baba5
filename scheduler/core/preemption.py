"""Victim search: R5 order, R6 minimal victims, R7 no ping-pong, R10 priority, R11 limits.

Contract: every function works on a ``Ledger`` and either leaves a consistent set of releases in it and
returns the units taken, or rolls the ledger back and returns ``None``. Units and their order (R5), and the
order in which candidate victim sets are tried, are ``victims``'; ``room.make_room`` runs that search with
the pieces here: ``reclaim`` (a ``Reclaimer``: R5-R7 down to a ``Floor``), R6's fill-back, and R11's
``enforce_limits``. Across projects (reclaim) the project furthest above its fair share gives first,
re-ranked after every unit.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from scheduler.core import minruntime, sizes
from scheduler.core.explain import counted
from scheduler.core.fairshare import DEPARTMENT
from scheduler.core.ledger import Ledger
from scheduler.core.memo import NoUnit, ReclaimPowers, fails, note_failure
from scheduler.core.model import UNLIMITED, Job
from scheduler.core.plan import Cause
from scheduler.core.victims import Floor, Unit, VictimOrder, unit_cost


def _on(node: str, units: list[Unit]) -> int:
    """GPUs the units hold on ``node`` (an extra and its whole job both count: an upper bound)."""
    return sum(r.gpus for u in units for r in u.replicas if r.node == node)


class Reclaimer:
    """R5-R7 for one claimant: which projects may lose what to it (``over``, ``allowed``, ``eligible``).

    A victim is measured by what it holds plus what is already promised to it this cycle (``claimed``);
    ``below_guarantee``: the claimant's project is below its guarantee, so settling jobs are not spared;
    ``floor``: how far a victim project may drop (``victims.Floor``: below its fair share only for a unit that
    cannot be split); by default R2's full power with ``below_guarantee``, else a victim stays at its fair
    share. ``spare``: jobs inside their minimum runtime are not taken (R15); only a claim with
    ``below_guarantee`` may turn it off (R2 wins).
    """

    def __init__(
        self,
        ledger: Ledger,
        order: VictimOrder,
        claim: Job,
        count: int,
        *,
        below_guarantee: bool,
        floor: Floor | None = None,
        spare: bool = True,
    ) -> None:
        self.ledger, self.order, self.claim, self.below_guarantee = ledger, order, claim, below_guarantee
        self.spare = spare or not below_guarantee
        self.floor = floor if floor is not None else (Floor.ANY if below_guarantee else Floor.SHARE)
        self.c_top = ledger.top_key(claim.project)
        need = count * claim.gpus_per_replica
        self.c_top_ok = ledger.top_claimed(self.c_top) + need <= _top_share(ledger, claim.project)
        self.reason = f"reclaimed for {claim.project}/{claim.name}"
        self._largest: dict[str, int | None] = {}  # ``by_node``'s: what each project may give in one unit
        # ``by_node``'s, for one pass over the nodes: whether a project may lose replicas to the claim at all
        self._gives: dict[str, bool] = {}

    def over(self, project: str) -> int:
        return self.ledger.claimed(project) - self.ledger.shares.project[project]

    def allowed(self, project: str, unit: Unit) -> bool:
        largest = self.largest(project)
        return largest is not None and unit.gpus <= largest

    def largest(self, project: str) -> int | None:
        """The most GPUs one unit of ``project`` may hold as the ledger stands (R7 down to the floor, and its
        department's share), or ``None`` when none may be taken. It only falls as units are taken."""
        ledger, floor = self.ledger, self.floor
        share, guarantee = ledger.shares.project[project], ledger.shares.guarantee[project]
        most = _most_taken(ledger.claimed(project), share, guarantee, floor)
        v_top = ledger.top_key(project)
        if v_top == self.c_top:
            return most
        if not self.c_top_ok:
            return None
        # a department has no guarantee of its own: below its fair share only with R2's full power
        top_floor = Floor.SHARE if floor == Floor.SHARE else Floor.ANY
        top_held = ledger.top_claimed(v_top)
        return min(most, _most_taken(top_held, _top_share(ledger, project), 0, top_floor))

    def eligible(self, job: Job) -> bool:
        ledger = self.ledger
        if self.spare and job.key in ledger.young:  # R15
            return False
        return job.key != self.claim.key and (self.below_guarantee or not ledger.settling(job))

    def until(
        self,
        done: Callable[[], bool],
        node_min: int,
        most: int = UNLIMITED,
        avoid: str | None = None,
        within: str | None = None,
    ) -> list[Unit] | None:
        """Take units, projects furthest above their fair share first, until ``done()`` (R6 fill-back);
        ``most``: no whole job holding more GPUs than that; ``avoid``: no job with a replica on that node;
        ``within``: only units with a replica on a node of that R17 domain."""
        ledger, claim = self.ledger, self.claim
        eligible = self.eligible
        # what ``eligible`` reads besides the job and its project's replicas (``memo.NoUnit``)
        kind: tuple[bool, bool] | None = (self.spare, self.below_guarantee)
        if avoid is not None:
            kind = None

            def eligible(job: Job) -> bool:
                return self.eligible(job) and all(r.node != avoid for r in ledger.active[job.key])

        over = self.over
        # ``over`` of every project, inlined: this runs for every reclaim tried (800 projects at 81,920 GPUs)
        alloc, reserved, share = ledger.alloc, ledger.reserved, ledger.shares.project
        heap = [
            (-above, p)
            for p in ledger.project_names
            if (above := alloc[p] + reserved.get(p, 0) - share[p]) > 0 and p != claim.project
        ]
        heapq.heapify(heap)
        return _take_until_fits(
            ledger,
            claim,
            done,
            heap,
            node_min=node_min,
            most=most,
            within=within,
            order=self.order,
            eligible=eligible,
            largest=self.largest,
            over=over,
            reason=self.reason,
            cause=Cause.RECLAIM,
            kind=kind,
        )

    def by_node(self, count: int) -> list[Unit] | None:
        """For replicas too big for victims scattered across nodes: one node at a time, until ``count``
        replicas fit (a rigid 2 x 8-GPU gang needs two whole nodes); all or nothing."""
        ledger, g = self.ledger, self.claim.gpus_per_replica
        mark = ledger.checkpoint()
        taken: list[Unit] = []
        self._largest = {}  # only falls as units are taken: an upper bound for the whole search
        while ledger.avail.slots(g) < count:
            # the node that fits one more replica after the fewest GPUs evicted there, then the fewest whole
            # jobs (R5: extras before whole jobs), each node taking what the rules allow in R5 order; with
            # resize costs (decision 64), then the node whose victims' jobs lose the fewest GPU-seconds
            self._gives = {}
            node = ledger.cheapest(ledger.avail.nodes, self._one_more_replica, self._least_for_one_more)
            if node is None:
                ledger.rollback(mark)
                return None
            taken += self.on_node(node, self._one_more(node))
        return taken

    def _one_more(self, node: str) -> int:
        """The GPUs ``node`` must have available to fit one more replica of the claimant."""
        g = self.claim.gpus_per_replica
        return (self.ledger.avail.value[node] // g + 1) * g

    def _least_for_one_more(self, node: str) -> tuple[float, ...]:
        """The least ``_one_more_replica`` can cost on ``node``: the GPUs it lacks, taken in extras that cost
        their jobs nothing (a full cluster: any node whose one borrowed replica fits the claimant is as cheap
        as the first one found, and the other 10,000 nodes need not be tried)."""
        lacking = self._one_more(node) - self.ledger.avail.value[node]
        return (lacking, 0) if not self.order.costs else (lacking, 0, 0.0)

    def _one_more_replica(self, node: str) -> tuple[float, ...] | None:
        """Take on ``node`` what makes room for one more replica: what that costs, or ``None``. The cost is
        (GPUs, whole jobs) taken; with resize costs (R18, decision 64) then the GPU-seconds taking them costs
        their jobs (``unit_cost``: the work an evicted job loses since its checkpoint and its restart, the
        restart of the replicas a shrunk job keeps), so equal nodes go by what their victims lose."""
        ledger, target = self.ledger, self._one_more(node)
        if ledger.capacity(node) < target or not self._may_free(node, target - ledger.avail.value[node]):
            return None
        units = self.units_on(node)
        if ledger.avail.value[node] + _on(node, units) < target:
            return None
        spent: list[float] | None = [] if self.order.costs else None
        taken = self._take_on(node, target, units, spent)
        if ledger.avail.value[node] < target:
            return None
        gpus, whole = sum(u.gpus for u in taken), sum(u.whole for u in taken)
        return (gpus, whole) if spent is None else (gpus, whole, sum(spent))

    def _may_free(self, node: str, lacking: int) -> bool:
        """Whether the units ``units_on(node)`` lists could free ``lacking`` GPUs on ``node`` at all: a quick
        upper bound, no unit built or sorted (most nodes of a full cluster hold nothing the rules let go). A
        replica counts when its job could be a unit there and it fits what its project may give in one unit
        (``largest``, remembered for the search in ``_largest``: it only falls as units are taken). Whether a
        project may give at all is remembered for one pass over the nodes (``_gives``): each node's trial is
        undone before the next, so it is the same for all of them."""
        ledger, largest, gives = self.ledger, self._largest, self._gives
        free = 0
        for key in ledger.on_node(node):
            p = key[0]
            may = gives.get(p)
            if may is None:
                may = gives[p] = self._project_may_lose(p)
            if not may or not self._job_may_lose(key):
                continue
            most = largest[p] if p in largest else largest.setdefault(p, self.largest(p))
            if most is None:
                continue
            free += sum(r.gpus for r in ledger.active[key] if r.node == node and r.gpus <= most)
            if free >= lacking:
                return True
        return False

    def _may_lose(self, key: tuple[str, str]) -> bool:
        """Whether job ``key`` may lose replicas to this claim at all (``units_on`` lists its units): another
        project's (its own jobs give way by priority only, R10, as in ``until``), running, preemptible, not
        started this cycle, eligible (R15, settle time) and its project above its fair share."""
        return self._project_may_lose(key[0]) and self._job_may_lose(key)

    def _project_may_lose(self, project: str) -> bool:
        """``_may_lose``'s part that is the project's: another one than the claimant's, above its fair share."""
        return project != self.claim.project and self.over(project) > 0

    def _job_may_lose(self, key: tuple[str, str]) -> bool:
        """``_may_lose``'s part that is the job's: running, preemptible, not started this cycle, eligible."""
        ledger = self.ledger
        job = ledger.jobs[key]
        return (
            bool(ledger.active[key]) and job.preemptible and key not in ledger.started and self.eligible(job)
        )

    def units_on(self, node: str, *, local: bool = False) -> list[Unit]:
        """Units with a replica on ``node``, in R5 order: lowest priority; extras (highest index first) before
        whole jobs; least work lost, then newest job first. ``local``: only whole jobs with every replica on
        ``node``."""
        ledger, lost, costs = self.ledger, self.order.lost, self.order.costs
        keyed: list[tuple[tuple[int, float, float, float, str, int], Unit]] = []
        for key in ledger.on_node(node):
            if not self._may_lose(key):
                continue
            job, act = ledger.jobs[key], ledger.active[key]
            # one replica each, highest index first; with allowed sizes only the step down to the next one
            # (R16: taking a later step without it would leave the job off its sizes)
            steps = sizes.extras(job, act)
            # R18 (decision 48): with resize costs, what taking each costs its job ranks the units (a job's
            # extras together, at the cost of the first), else extras before whole jobs
            c = costs.get(key, 0.0) if costs else 0.0
            rank = unit_cost(ledger, Unit(key, steps[0], False), lost[key], c) if c and steps else 0.0
            for tail in steps[:1] if job.allowed_replicas else steps:
                if any(r.node == node for r in tail):
                    keyed.append(
                        (
                            (job.priority, rank, lost[key], -job.submitted_at, job.name, -tail[0].index),
                            Unit(key, tail, False),
                        )
                    )
            if not local or all(r.node == node for r in act):
                whole = Unit(key, tuple(act), True)
                rank = unit_cost(ledger, whole, lost[key], c) if costs else 1.0
                keyed.append(((job.priority, rank, lost[key], -job.submitted_at, job.name, 0), whole))
        keyed.sort(key=lambda ku: ku[0])
        return [u for _, u in keyed]

    def takeable_on(self, node: str, *, local: bool = False) -> int:
        """At most what the rules could free on ``node`` (a quick bound before trying)."""
        return _on(node, self.units_on(node, local=local))

    def on_node(self, node: str, target: int, *, local: bool = False) -> list[Unit]:
        """Take what the rules allow on ``node`` in R5 order until it has ``target`` GPUs available (or the
        units run out: the caller checks). ``local``: no whole job with replicas on other nodes."""
        return self._take_on(node, target, self.units_on(node, local=local))

    def _take_on(
        self, node: str, target: int, units: list[Unit], spent: list[float] | None = None
    ) -> list[Unit]:
        """``spent``: where to add what taking each unit costs its job (``unit_cost``), if given."""
        ledger, claim = self.ledger, self.claim
        taken: list[Unit] = []
        if units and ledger.avail.value[node] < target:  # it walks units in R5 order, the step's
            self.order.taken(ledger)
        for unit in units:
            if ledger.avail.value[node] >= target:
                break
            # a whole job's unit is what is left of it after its extras here went (its master always is)
            still = {r.index for r in ledger.active[unit.key]}
            left = [r for r in unit.replicas if r.index in still]
            unit = Unit(unit.key, tuple(left), unit.whole)  # noqa: PLW2901
            if not self.allowed(unit.key[0], unit):
                continue
            if spent is not None:
                c = self.order.costs.get(unit.key, 0.0)
                spent.append(unit_cost(ledger, unit, self.order.lost[unit.key], c))
            why = f"{self.reason}: {standing(ledger, unit.key[0])} (on {node}, to make room for one replica)"
            why += minruntime.overridden(ledger.young, unit.key, claim.project)
            ledger.release(unit.key, left, why, Cause.RECLAIM, claim.key)
            taken.append(unit)
        return taken


def reclaim(
    ledger: Ledger,
    order: VictimOrder,
    claim: Job,
    count: int,
    *,
    below_guarantee: bool,
    floor: Floor | None = None,
    spare: bool = True,
    room: bool = False,
) -> list[Unit] | None:
    """Take units from projects above their fair share until ``count`` replicas of ``claim`` fit; ``room``:
    and until its caps leave room for them (its department's limit, which victims of its own department
    relieve: ``from_siblings``)."""
    g = claim.gpus_per_replica
    rules = Reclaimer(ledger, order, claim, count, below_guarantee=below_guarantee, floor=floor, spare=spare)
    # what failed for fewer replicas with the same powers fails for more (``memo``); R17: a claim that requires
    # one domain is measured in one (its master's, or the roomiest): its own key
    c_top = rules.c_top
    required = ledger.domains.required(claim)
    dept = c_top.name if c_top.kind == DEPARTMENT else None
    home = ledger.home(claim) if required else None
    memo = ReclaimPowers(g, below_guarantee, dept, rules.c_top_ok, rules.floor, rules.spare, required, home)
    if fails(ledger.memo.reclaims, memo, count):
        return None  # (a claim that needs room as well fails where one that did not failed)
    done = fits(ledger, claim, count)
    if room:
        placeable, need = done, count * g

        def done() -> bool:
            return placeable() and ledger.room(claim) >= need

    # decision 36: a victim in its department relieves its caps on whatever node it runs (decision 7's
    # "nodes big enough for the claimant's replica" holds only for freeing GPUs; R6 gives back the rest)
    node_min = 1 if room else g
    if required:
        # R17: until it fits in one domain, fill-back returning the rest; else one domain at a time
        taken = rules.until(done, node_min)
        if taken is None:
            taken = _in_one_domain(rules, count, done, home)
    else:
        taken = reclaim_with(rules, count, done, node_min)
    if taken is None and not room:  # (another project of its department may have the room it lacked)
        note_failure(ledger.memo.reclaims, memo, count)
    return taken


def reclaim_with(
    rules: Reclaimer, count: int, done: Callable[[], bool], node_min: int | None = None
) -> list[Unit] | None:
    """R5 order until ``done()`` (the claimant fits, and has room where asked), from nodes of at least
    ``node_min`` GPUs (default: the claimant's replica); for replicas bigger than one GPU, one node at a
    time if that fails (kept only if ``done()`` then holds)."""
    ledger, g = rules.ledger, rules.claim.gpus_per_replica
    taken = rules.until(done, g if node_min is None else node_min)
    if taken is None and g > 1:
        mark = ledger.checkpoint()
        taken = rules.by_node(count)
        if taken is not None and not done():
            ledger.rollback(mark)
            taken = None
    return taken


def _in_one_domain(
    rules: Reclaimer, count: int, done: Callable[[], bool], home: str | None
) -> list[Unit] | None:
    """R17 (decision 38): victims taken in R5 order across domains left none with room for a claim that
    requires one (the victims' floor stopped the unit that would complete a domain). Try each domain that
    could hold it (its master's, if it runs), taking only victims with a replica there, and keep the one that
    costs least (GPUs taken, then whole jobs; ties to the first name)."""
    ledger, g = rules.ledger, rules.claim.gpus_per_replica
    domains = ledger.domains

    def take(domain: str) -> list[Unit] | None:
        def there() -> bool:
            return domains.fit(domain, ledger.avail, g) >= count and done()

        return rules.until(there, g, within=domain)

    def cost(domain: str) -> tuple[int, int] | None:
        taken = take(domain)
        return None if taken is None else (sum(u.gpus for u in taken), sum(u.whole for u in taken))

    if home is not None:
        return take(home)
    options = [d for d in domains.names if sum(ledger.capacity(n) // g for n in domains.members[d]) >= count]
    best = ledger.cheapest(options, cost)
    return None if best is None else take(best)


def from_siblings(ledger: Ledger, claim: Job, *, below_guarantee: bool) -> int:
    """GPUs a reclaim could take from the other projects of the claimant's department (decision 36): what
    they hold above their fair share, or, for a claim below its guarantee (R2 may take a unit that cannot be
    split), every preemptible GPU of those above it. Such a move leaves the department's total as it was, so
    it relieves the department's caps (R11) for the claim; 0 outside a department or without reclaim."""
    dept = ledger.projects[claim.project].department
    if dept is None or dept not in ledger.departments or not ledger.config.reclaim:
        return 0
    if lost_to_reclaim(ledger, claim.project):
        return 0
    top, share = ledger.top_key(claim.project), ledger.shares.project
    total = 0
    for q in ledger.project_names:
        if q == claim.project or ledger.top_key(q) != top or (over := ledger.claimed(q) - share[q]) <= 0:
            continue
        preemptible = ledger.alloc[q] - ledger.interactive[q]
        total += preemptible if below_guarantee else min(over, preemptible)
    return total


def lost_to_reclaim(ledger: Ledger, project: str) -> bool:
    """A project that was a reclaim victim this cycle reclaims nothing itself before the next (R7)."""
    return ledger.reclaimed.get(project, 0) > 0


def fits(ledger: Ledger, claim: Job, count: int) -> Callable[[], bool]:
    """Whether ``count`` replicas of ``claim`` fit on GPUs free or being released (R17: in one domain when
    it requires one)."""
    if ledger.domains.required(claim):
        return lambda: ledger.slots_for(claim, ledger.avail) >= count
    g = claim.gpus_per_replica
    return lambda: ledger.avail.slots(g) >= count


def _take_until_fits(
    ledger: Ledger,
    claim: Job,
    done: Callable[[], bool],
    heap: list[tuple[int, str]],
    *,
    node_min: int,
    most: int = UNLIMITED,
    within: str | None = None,
    order: VictimOrder,
    eligible: Callable[[Job], bool],
    largest: Callable[[str], int | None],
    over: Callable[[str], int],
    reason: str,
    cause: Cause,
    kind: tuple[bool, bool] | None = None,
) -> list[Unit] | None:
    """Units of the project furthest above its fair share first (``heap``), re-ranked after each, until
    ``done()``. A project's next unit is the first in R5 order that it may give (``largest``: a job whose
    unit is bigger than that gives nothing, its smaller units being taken first, and the bound only falls
    as units are taken); a project that has none drops out. ``kind``: what ``eligible`` depends on besides
    the job, if only that: a project found with nothing to give is not searched again while its jobs'
    replicas stay as they were (``memo.NoUnit``: a failing reclaim searches every project above its share)."""
    mark = ledger.checkpoint()
    taken: list[Unit] = []
    no_unit = ledger.memo.no_unit
    while not done():
        if not heap:
            ledger.rollback(mark)
            return None
        _, project = heapq.heappop(heap)
        bound = largest(project)
        if bound is None:
            continue
        key: NoUnit | None = None
        if kind is not None:
            key = (project, ledger.touched.get(project, 0), *kind, node_min, most, within)
            if no_unit.get(key, -1) >= bound:
                continue
        unit = order.next_unit(
            ledger, project, eligible, fits=node_min, most=most, within=within, largest=bound
        )
        if unit is None:
            if key is not None:
                no_unit[key] = max(bound, no_unit.get(key, -1))
            continue
        why = f"{reason}: {standing(ledger, project)}{minruntime.overridden(ledger.young, unit.key, claim.project)}"
        ledger.release(unit.key, list(unit.replicas), why, cause, claim.key)
        taken.append(unit)
        if over(project) > 0:
            heapq.heappush(heap, (-over(project), project))
    return fill_back(ledger, taken, done)


def fill_back(ledger: Ledger, taken: list[Unit], done: Callable[[], bool]) -> list[Unit]:
    """R6: give back every victim the claimant turns out not to need, least preferred victims first."""
    kept: list[Unit] = []
    for unit in reversed(taken):
        if not unit.whole and (not ledger.active[unit.key] or not _gives_back_allowed(ledger, unit)):
            kept.append(unit)  # evicted whole (a worker never stays without its master), or R16's sizes
            continue
        mark = ledger.checkpoint()
        ledger.unrelease(unit.key, list(unit.replicas))
        if not done():
            ledger.rollback(mark)
            kept.append(unit)
    kept.reverse()
    return kept


def _gives_back_allowed(ledger: Ledger, unit: Unit) -> bool:
    """R16: giving this extra back (R6 fill-back) leaves its job at a count it may run at."""
    job = ledger.jobs[unit.key]
    return not job.allowed_replicas or sizes.allowed(job, len(ledger.active[unit.key]) + len(unit.replicas))


def _most_taken(alloc: int, share: int, guarantee: int, floor: Floor) -> int:
    """R7: the most GPUs one unit of a victim holding ``alloc`` may take from it: it stays at or above its
    fair share, unless R2 needs an indivisible unit of a project above its share: then down to its guarantee
    (``Floor.GUARANTEE``), or below it (``Floor.ANY``: any unit)."""
    if floor == Floor.SHARE or alloc <= share:
        return alloc - share
    if floor == Floor.ANY:
        return UNLIMITED
    return alloc - min(share, guarantee)


def _top_share(ledger: Ledger, project: str) -> int:
    return ledger.shares.top(ledger.projects[project])[1]


def standing(ledger: Ledger, project: str) -> str:
    """``project b holds 5 GPUs, at its fair share of 5``: what it holds and is promised this cycle, and the
    word that compares it with its fair share (R13: never "above" for equal)."""
    promised = ledger.reserved.get(project, 0)
    more = f" and is promised {promised} this cycle" if promised else ""
    share = ledger.shares.project[project]
    claimed = ledger.alloc[project] + promised
    word = "above" if claimed > share else "at" if claimed == share else "below"
    return f"project {project} holds {counted(ledger.alloc[project], 'GPU')}{more}, {word} its fair share of {share}"


def enforce_limits(ledger: Ledger, order: VictimOrder) -> None:
    """R11: a project above its limit (say, the limit was just lowered) gives back preemptible GPUs."""
    for name in sorted(ledger.projects):
        p = ledger.projects[name]
        cap = p.limit_gpus
        if not p.allow_over_quota or not ledger.config.borrowing:
            cap = p.deserved_gpus if cap is None else min(cap, p.deserved_gpus)
        while cap is not None and ledger.alloc[name] > cap:
            unit = order.next_unit(ledger, name, lambda j: True)
            if unit is None:
                break
            why = f"project {name} holds {counted(ledger.alloc[name], 'GPU')}, above its limit of {cap}"
            ledger.release(unit.key, list(unit.replicas), why, Cause.LIMIT, None)
