"""The live control loop: observe the executor, load a snapshot, plan, persist, apply, reconcile.

Contract: ``Engine.run()`` (an asyncio task in the service's lifespan) runs a cycle every ``cycle_period``
seconds and at once after ``trigger()`` (called on submit and delete; thread-safe). Only the leader runs
cycles (``scheduler.engine.leader``); on becoming leader it adopts what the executor already runs and
records the executor's nodes (again whenever they change: Kubernetes nodes come, go, are cordoned).
One cycle (``run_cycle``), each step its own transaction:

1. record what the executor observed (exits finish replicas and jobs, orphans are stopped), compared with
   the live replicas the engine keeps (``scheduler.store.live_replicas``: read again only where a write
   touched them), then release what is still wanted on nodes an admin drained or lost
   (``scheduler.engine.nodes``);
2. read the snapshot (a read of only what changed since the last cycle: the engine keeps it in memory,
   ``scheduler.store.live``, read whole on taking the lead and checked against a full read every
   ``state_check_every`` seconds, timed apart as the phase ``state_check``; a due check waits, ten seconds at
   most, for a cycle whose read brought nothing to plan, so a claim's cycle does not pay for it),
   ``plan_cycle`` (holding no lock), persist its decisions with their events, the decided jobs' notes, the
   fair shares and the usage (one write transaction; none when it decided nothing).
   ``plan_cycle`` is given what the last cycles computed (``scheduler.core.carry``) and reuses it where its
   inputs did not change; every ``state_check_every`` seconds the plan is made again from scratch and
   compared (``tide_plan_drift_total``; the one from scratch is carried out if they differ). Planning on a
   snapshot is safe because the leader is the only writer of placements: a job deleted meanwhile has its
   decisions skipped (``persist``), and a launch never takes a GPU that a live process holds
   (``reconcile``);
3. signal the replicas to stop (master last) and launch wanted replicas whose GPUs are free; then write the
   other jobs' reasons and places in line (nothing a launch reads), in a transaction of their own when the
   plan decided something, so a reclaim's stops and a claimant's launch do not wait for them: while replicas
   stop, after the release turn that starts what the plan held GPUs for (or, at the latest, first thing in
   the next cycle). A plan that decided nothing has its fair shares, usage and notes written in the apply's
   transaction (the notes compared with the stored ones only where they differ from the last settled
   cycle's or a job was read again since).

With ``finished_retention`` set, a finished job that ended longer ago than that is removed with its events
(``scheduler.store.lifecycle.forget_finished``), checked at most once every ``EXPIRE_EVERY`` seconds.

While replicas are stopping, a release turn every ``RELEASE_POLL_SECONDS`` between cycles (``release``: the
executor observed, what exited recorded, due signals sent, what the stored plan already wants launched where
GPUs came free; no plan) looks for their exits. A job the last plan held GPUs for (a reclaim's claimant, R2)
starts in the turn that finds them all free, on them (``scheduler.core.handoff``, ``persist_starts``), not
in the next cycle; that cycle comes at once when none is left stopping, however long a cycle takes.

Every time comes from ``clock`` (the shell's, never the core's). ``leading_since`` is when it took the lead
(None while it does not hold it) and ``last_cycle_at`` when its last cycle completed: ``/healthz`` compares
them with the clock. Errors in a cycle are logged and kept in
``last_error`` and counted (``scheduler.engine.metrics``, as are cycle durations and applied decisions);
the loop goes on. ``on_change`` (a no-op unless given) is called after each bump of ``changes`` and after
each turn of ``run``: ``tide serve`` runs the engine in a process of its own and tells the API process
(``api.server.engine.host``). With ``check_invariants`` (debug, tests) every plan is checked against
``scheduler.core.invariants`` and violations are logged and kept in ``violations``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.core import ClusterState, Config, Decision, Job, Node, Plan, apply_plan, collector, plan_cycle
from scheduler.core.carry import Carry
from scheduler.core.forecast import waiting
from scheduler.core.handoff import HeldStart, due_starts, held_starts
from scheduler.core.invariants import check_invariants
from scheduler.core.usage import over_quota
from scheduler.elastic import notice
from scheduler.elastic.environment import EnvBuilder
from scheduler.engine.announce import Announcer
from scheduler.engine.eta_store import gather, store
from scheduler.engine.eta_worker import EtaWorker
from scheduler.engine.leader import Leadership, leadership_for
from scheduler.engine.metrics import EngineMetrics
from scheduler.engine.nodes import release_taken_nodes
from scheduler.engine.persist import NoteFields, note_fields, persist_decisions, persist_notes, persist_starts
from scheduler.engine.reconcile import Knobs, launch_waiting, record_observations, stop_unwanted
from scheduler.executors.base import Executor
from scheduler.store import lifecycle
from scheduler.store.changes import Changes, changes_of
from scheduler.store.db import Database, WriteWatch
from scheduler.store.live import LiveSnapshot, check_due, read_snapshot
from scheduler.store.live_replicas import LiveReplicas
from scheduler.store.mapper import Notes, Snapshot
from scheduler.store.models import NodeRow, ReplicaRow
from scheduler.store.queries import free_gpus

log = logging.getLogger(__name__)
RELEASE_POLL_SECONDS = 0.1
EXPIRE_EVERY = 60.0  # seconds between two removals of finished jobs kept past their retention
KeptNotes = tuple[tuple[Job, ...], list[NoteFields]]  # a settled cycle's jobs and the notes it wrote


@dataclass(frozen=True, slots=True)
class EngineSettings:
    cycle_period: float = 1.0
    grace_period: float = 30.0
    core: Config = field(default_factory=Config)
    env_builder: EnvBuilder | None = None
    check_invariants: bool = False  # debug: check every plan against the core's invariants
    eta_every: float = 0.0  # seconds between start-time forecasts (0: none)
    finished_retention: float = 0.0  # seconds a finished job's record is kept (0: until deleted)
    state_check_every: float = 60.0  # seconds between two full reads checking the snapshot kept in memory


def sync_nodes(session: Session, nodes: tuple[Node, ...]) -> None:
    """Make the node table match the executor; a vanished node stays (unschedulable) while replicas use it."""
    rows = {n.name: n for n in session.scalars(select(NodeRow)).all()}
    for node in nodes:
        row = rows.pop(node.name, None)
        if row is None:
            session.add(
                NodeRow(name=node.name, gpus=node.gpus, schedulable=node.schedulable, domain=node.domain)
            )
        else:
            row.gpus = node.gpus
            row.domain = node.domain  # R17: a relabelled node moves to its new domain
            row.schedulable = node.schedulable  # cordoned, tainted, NotReady (Kubernetes) or back again
    for name, row in rows.items():
        used = session.scalars(select(ReplicaRow.id).where(ReplicaRow.node == name).limit(1)).first()
        if used is None:
            session.delete(row)
        else:
            row.schedulable = False


class Engine:
    """Schedules while it leads; stands by otherwise."""

    def __init__(
        self,
        db: Database,
        executor: Executor,
        settings: EngineSettings,
        *,
        leadership: Leadership | None = None,
        clock: Callable[[], float] = time.time,
        metrics: EngineMetrics | None = None,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.db = db
        self.executor = executor
        self.settings = settings
        self.leadership = leadership or leadership_for(db)
        self.clock = clock
        self.metrics = metrics if metrics is not None else EngineMetrics()
        self.on_change = (
            on_change  # after each change of role, counters or ``last_error`` (api.server.engine.host)
        )
        self.knobs = Knobs(
            grace_period=settings.grace_period,
            env_builder=settings.env_builder,
            on_executor_error=self.metrics.executor_error,
        )
        self.role = "starting"
        self.cycles = 0
        self.changes = (
            0  # bumped after each write that changed something: caches key on it (api.server.cache)
        )
        self.placements = 0  # bumped after each write that may have changed what nodes show (``_write``)
        self.node_rows = 0  # bumped after each write that may have changed the nodes themselves (``_write``)
        self.last_cycle_at: float | None = None
        self.leading_since: float | None = None  # when it last took the lead (None: it does not hold it)
        self.last_cycle_seconds: float | None = None
        self.last_error: str | None = None
        self.violations: list[str] = []
        self.stopping = 0
        # the starts the last plan holds GPUs for (``scheduler.core.handoff``), read from it on first need
        self._held: tuple[HeldStart, ...] | None = ()
        self._held_in: tuple[ClusterState, Plan] | None = None
        # the other jobs' notes of the last plan that decided something, until written (``_write_notes_due``)
        self._notes_due: tuple[Plan, Notes] | None = None
        # the notes a settled cycle wrote, as ``note_fields``, with the jobs it read (``_settled_notes``)
        self._notes_kept: KeptNotes | None = None
        self.eta = EtaWorker(settings.eta_every) if settings.eta_every > 0 else None
        self._synced_nodes: tuple[Node, ...] | None = None
        self.live = LiveSnapshot(db, check_every=settings.state_check_every)
        self.replicas = LiveReplicas(db, self.live, check_every=settings.state_check_every)
        self.announcer = Announcer(executor)  # decisions shown where jobs run (Kubernetes Events)
        self._expired_at = -math.inf  # the last removal of expired finished jobs
        self._lock = threading.Lock()
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self._carry = Carry()  # what plan_cycle keeps between cycles (scheduler.core.carry)
        self._plan_checked_at = time.monotonic()  # the carry is empty: nothing to check before a period

    @property
    def is_leader(self) -> bool:
        return self.role == "leader"

    def tick(self) -> Plan | None:
        """Run one cycle if this process leads (becoming leader if nobody does)."""
        with self._lock:
            if not self.leadership.holds():
                if self.role == "leader":
                    self.live.close()  # a standby keeps nothing: the leader writes
                    self._carry = Carry()
                    self.replicas.invalidate()
                    self._hold(None)
                    self._notes_due = None
                    self._notes_kept = None
                self.role = "standby"
                self.leading_since = None
                return None
            if self.leading_since is None:
                self.leading_since = self.clock()
            if self.role != "leader":
                self._take_over()
            return self._cycle()

    def run_cycle(self) -> Plan | None:
        """Alias of ``tick`` for tests and tools that drive the engine by hand."""
        return self.tick()

    def _take_over(self) -> None:
        log.info("this service is now the leader: adopting running replicas")
        self.executor.adopt()
        if self.announcer.active:
            with self.db.read() as session:
                self.announcer.start(session)
        self._synced_nodes = None
        self.live.invalidate()  # another leader wrote meanwhile: read everything again
        self.replicas.invalidate()
        self._hold(None)
        self._sync_nodes()
        self.role = "leader"
        self.changes += 1  # /cluster shows who leads
        self.placements += 1
        self.node_rows += 1

    def _sync_nodes(self) -> None:
        """Record the executor's nodes when they changed (Kubernetes nodes come, go, cordon, taint)."""
        nodes = self.executor.nodes()
        if nodes != self._synced_nodes:
            with self._write() as session:
                sync_nodes(session, nodes)
            self._synced_nodes = nodes

    @contextmanager
    def _write(self) -> Iterator[Session]:
        """A write transaction; ``changes`` moves once it ended, if it wrote anything, ``placements`` if
        what it wrote may change what a node shows: a node, a job or a replica (``scheduler.store.changes``:
        jobs' notes, projects' fair shares and usage, forecasts and a replica seen running leave it), and
        ``node_rows`` if it may have written a node (its size, whether it is schedulable).

        A view read before the bump is stale after it, whether it saw the commit or not; one read after it
        sees the commit. A cycle that changed nothing (the steady state) leaves readers' caches valid.
        """
        watch: WriteWatch | None = None
        changed: Changes | None = None
        try:
            with self.db.write() as session:
                watch = WriteWatch(session)
                changed = changes_of(session)
                yield session
        finally:
            if changed is None or changed.nodes or changed.everything or changed.jobs:
                self.placements += 1  # who holds which GPU may have changed (not only notes, shares, usage)
            if changed is None or changed.nodes or changed.everything:
                self.node_rows += 1
            if watch is None or watch.wrote:
                self.changes += 1
                self.on_change()

    def _cycle(self) -> Plan:
        # With the collector on, the objects a cycle allocates (rows, the plan, the ORM's) trigger collections
        # that walk all of them while they are still alive (80 ms each at 10,240 GPUs); paused, what the cycle
        # frees by reference counting never counts and the collector has nothing left to do after it.
        with collector.paused():
            return self._cycle_paused()

    def _cycle_paused(self) -> Plan:
        started = time.perf_counter()
        written_before = self._write_notes_due()  # the last plan's, before this cycle reads the notes
        phase = time.perf_counter()
        self._sync_nodes()
        lingering = self._observe()
        self.metrics.phase_done("observe", time.perf_counter() - phase)
        checks, drift = self.live.checks, self.live.drift
        phase = time.perf_counter()
        with self.db.read() as session:
            snapshot = read_snapshot(self.live, session)
        checked = self.live.check_seconds if self.live.checks > checks else None
        self.metrics.phase_done("read", time.perf_counter() - phase - (checked or 0.0))
        self.metrics.state_read(self.live.checks - checks, self.live.drift - drift, checked)
        state = snapshot.state
        now = self.clock()
        phase = time.perf_counter()
        # outside any write lock (API writes go on); what the last cycles computed is reused where unchanged
        kept = self._carry.plans_kept
        plan = plan_cycle(state, self.settings.core, now=now, carry=self._carry)
        self.metrics.phase_done("plan", time.perf_counter() - phase)
        if self._carry.plans_kept > kept:  # nothing changed: the last plan holds (``scheduler.core.carry``)
            self.metrics.plan_kept()
        plan = self._check_plan(state, plan, now)
        if self.settings.check_invariants:
            self._check(state, plan, now)
        self._hold((state, plan))
        applied = self._write_and_apply(plan, snapshot, lingering, now, written_before)
        if self.announcer.active:
            with self.db.read() as session:
                self.announcer.after_cycle(session)
        self.cycles += 1
        self.last_cycle_at = self.clock()
        self.last_cycle_seconds = time.perf_counter() - started
        self.metrics.cycle_done(self.last_cycle_seconds, applied)
        return plan

    def _check_plan(self, state: ClusterState, plan: Plan, now: float) -> Plan:
        """Every ``state_check_every`` seconds (0: every cycle), plan again without the carry and compare, as
        the kept snapshot is checked against a full read: a plan that differs is counted
        (``tide_plan_drift_total``) and logged, the carry is dropped, and the plan from scratch is the one
        carried out. Like the snapshot's check, a due one waits for a cycle whose read brought nothing to plan,
        ``CHECK_YIELD`` seconds at most: a claim's plan is carried out without waiting for a second plan (a
        second at 81,920 GPUs). The plan to carry out."""
        since = time.monotonic() - self._plan_checked_at
        if not check_due(since, self.settings.state_check_every, changed=self.live.changed):
            return plan
        started = time.perf_counter()
        full = plan_cycle(state, self.settings.core, now=now)
        self._plan_checked_at = time.monotonic()
        drifted = full != plan
        self.metrics.plan_checked(time.perf_counter() - started, drifted=drifted)
        if not drifted:
            return plan
        log.warning(
            "the plan made with what the last cycles kept differed from a plan made from scratch "
            "(%d vs %d decisions, %d vs %d notes); carrying out the one from scratch and keeping nothing",
            len(plan.decisions),
            len(full.decisions),
            len(plan.notes),
            len(full.notes),
        )
        self._carry = Carry()
        return full

    def _write_and_apply(
        self, plan: Plan, snapshot: Snapshot, lingering: Collection[int], now: float, written_before: float
    ) -> list[Decision]:
        """Persist ``plan``'s decisions (with the shares and usage), stop and launch what they say, then write
        the other jobs' notes, then store or start a start-time forecast and remove expired finished jobs
        (a forecast's hand-off takes tens of milliseconds: the stops and launches do not wait for it); the
        decisions applied. A plan that decided nothing is written in the apply's
        transaction (a settled cycle: two write transactions in all, with the observation's)."""
        half_life = self.settings.core.usage_half_life
        over = over_quota(snapshot.state) if half_life > 0 else None

        def write_plan(session: Session) -> list[Decision]:
            return persist_decisions(
                session,
                plan,
                now=now,
                usage_half_life=half_life,
                notes=snapshot.notes,
                over_quota=over,
                reaches=lambda job: notice.reaches(self.executor, job),
                grace_period=self.settings.grace_period,
            )

        phase = time.perf_counter()
        applied: list[Decision] = []
        if plan.decisions:  # written before the stops and launches that carry them out
            with self._write() as session:
                applied = write_plan(session)
        persisting = time.perf_counter() - phase
        phase = time.perf_counter()
        last, self._notes_kept = self._notes_kept, None  # kept again only once this transaction ended
        kept = None
        with self._write() as session:
            applied += self._apply_in(session, lingering)  # a job held GPUs that are free already starts
            since = time.perf_counter()
            if not plan.decisions:  # a settled cycle: shares, usage and notes in this transaction
                write_plan(session)
                kept = self._settled_notes(session, plan, snapshot, last)
            rest = time.perf_counter() - since
        self._notes_kept = kept  # written, or None: the next cycle compares them all
        self.metrics.phase_done("apply", time.perf_counter() - phase - rest)
        if plan.decisions:  # the other jobs' notes once what was decided is stopped and launched ...
            self._notes_due = (plan, snapshot.notes)
            # ... and, while replicas stop, once the release turns gave their GPUs away
            rest = 0.0 if self.stopping else self._write_notes_due()
        self.metrics.phase_done("persist", written_before + persisting + rest)
        phase = time.perf_counter()
        self._forecast(snapshot.state, plan, now)  # after the stops and launches: none of them waits on it
        self._expire(now)
        self.metrics.phase_done("forecast", time.perf_counter() - phase)
        return applied

    def _settled_notes(
        self, session: Session, plan: Plan, snapshot: Snapshot, last: KeptNotes | None
    ) -> KeptNotes:
        """Write the notes of a plan that decided nothing, unless they are the ones the last settled cycle
        wrote and no job was read again since (the kept snapshot hands the same tuple of jobs while no job
        changed: nothing but this engine wrote a note meanwhile): comparing the plan's notes with the last
        one's costs a fraction of comparing every active job's stored note (50 ms at 81,920 GPUs). What to
        keep for the next cycle once the transaction ended (``last``: what the last settled cycle kept)."""
        fields = note_fields(plan)
        if last is None or last[0] is not snapshot.state.jobs or last[1] != fields:
            persist_notes(session, plan, notes=snapshot.notes)
        return snapshot.state.jobs, fields

    def _write_notes_due(self) -> float:
        """Write the other jobs' notes of the last plan that decided something, if not written yet (a release
        turn does once nothing it holds GPUs for is left to start, else the next cycle first); the seconds."""
        if self._notes_due is None:
            return 0.0
        started = time.perf_counter()
        plan, notes = self._notes_due
        self._notes_due = None
        self._notes_kept = None  # a failed write is not retried: the next plan writes every note that changed
        with self._write() as session:
            persist_notes(session, plan, notes=notes)
        return time.perf_counter() - started

    def _observe(self) -> Collection[int]:
        """Record what the executor observed (exits, starts, orphans) against the live replicas kept in
        memory, and release what is still wanted on nodes taken away; the replicas whose unrecorded process
        is still being killed."""
        seen = self.executor.observe()
        checks, drift = self.replicas.checks, self.replicas.drift
        with self._write() as session:
            live = self.replicas.read(session)  # the live replicas, read again only where they changed
            lingering = record_observations(
                session, self.executor, seen, now=self.clock(), knobs=self.knobs, live=live
            )
            release_taken_nodes(session, self.executor, now=self.clock(), knobs=self.knobs)
        self.metrics.state_read(self.replicas.checks - checks, self.replicas.drift - drift)
        return lingering

    def _apply_in(self, session: Session, lingering: Collection[int]) -> list[Decision]:
        """Signal what the stored plan stops (master last), start what the last plan held GPUs for that are
        all free now, and launch what is wanted where the GPUs are free; the starts made."""
        self.stopping = stop_unwanted(session, self.executor, now=self.clock(), knobs=self.knobs)
        started = self._start_held(session)
        launch_waiting(session, self.executor, now=self.clock(), knobs=self.knobs, lingering=lingering)
        return started

    def release(self) -> bool:
        """Between cycles, while replicas are stopping: record what exited, signal what is due (a master once
        its workers are gone, a SIGTERM once a notice ran) and launch what the stored plan already wants where
        GPUs came free (a shrunk job's restart), without planning again (a cycle at 81,920 GPUs takes
        seconds; this, an observation and a transaction). False, doing nothing, where this process does not
        lead."""
        with self._lock:
            if not self.is_leader or not self.leadership.holds():
                return False
            started = time.perf_counter()
            lingering = self._observe()
            with self._write() as session:
                applied = self._apply_in(session, lingering)
            if not self._held or not self.stopping:
                self._write_notes_due()
            self.metrics.release_done(time.perf_counter() - started, applied)
            return True

    def _hold(self, planned: tuple[ClusterState, Plan] | None) -> None:
        """Keep what the plan just made holds GPUs for (read from it only if a release turn needs it)."""
        self._held = None if planned is not None and planned[1].reservations else ()
        self._held_in = planned if self._held is None else None

    def _start_held(self, session: Session) -> list[Decision]:
        """Start each job the last plan held GPUs for once those GPUs are all free (``scheduler.core.handoff``:
        a reclaim's claimant as its victims exit, not in the next cycle); the starts applied."""
        if self._held is None:
            assert self._held_in is not None
            self._held, self._held_in = held_starts(*self._held_in), None
        if not self._held:
            return []
        nodes = {node for held in self._held for node in held.gpus_by_node}
        due = due_starts(self._held, free_gpus(session, nodes))
        if not due:
            return []
        keys = {(d.project, d.job) for d in due}
        self._held = tuple(held for held in self._held if held.job.key not in keys)
        return persist_starts(session, due, now=self.clock())

    def _forecast(self, before: ClusterState, plan: Plan, now: float) -> None:
        """Store a start-time forecast that finished, and start the next one when due (in the worker: the
        cycle never waits on it). A failed forecast is logged and counted; the ETAs stored before stay."""
        if self.eta is None:
            return
        try:
            done = self.eta.poll()
        except Exception as error:  # a forecast must never fail the cycle
            self.metrics.eta_failed()
            log.warning("start-time forecast failed: %s: %s", type(error).__name__, error)
            done = None
        if done is not None:
            self.metrics.eta_done(done[1])
            with self._write() as session:
                store(session, done[0])
        if not self.eta.due(now):
            return
        state = apply_plan(before, plan, now=now, instant=False)  # what this cycle left
        if not any(waiting(job) for job in state.jobs):
            self.eta.last_start = now
            with self._write() as session:
                store(session, {})  # nobody waits: clear what is left of the last forecast
            return
        with self.db.read() as session:
            task = gather(session, state, self.settings.core, now=now)
        self.eta.start(task)

    def _expire(self, now: float) -> None:
        """Remove the finished jobs kept longer than the retention, at most once every ``EXPIRE_EVERY``."""
        retention = self.settings.finished_retention
        if retention <= 0 or now - self._expired_at < EXPIRE_EVERY:
            return
        self._expired_at = now
        with self._write() as session:
            gone = lifecycle.forget_finished(session, before=now - retention)
        if gone:
            log.info("removed %d finished job(s) kept longer than %g s", gone, retention)

    def _check(self, state: ClusterState, plan: Plan, now: float) -> None:
        broken = check_invariants(state, plan, self.settings.core, now=now)
        for sentence in broken:
            log.error("invariant violated: %s", sentence)
        if broken:
            log.debug("state: %r\nplan: %r", state, plan)
        self.violations.extend(broken)

    async def turn(self) -> None:
        """One ``tick`` in a worker thread; a failure is logged, counted and kept in ``last_error``, never
        raised (the services run one before serving, so the nodes are known; ``run`` retries)."""
        try:
            await asyncio.to_thread(self.tick)
            self.last_error = None
        except Exception as error:  # the loop must survive a bad cycle (database down, ...)
            self._failed(error, "scheduling cycle")

    def _failed(self, error: Exception, what: str) -> None:
        """A cycle or a release turn raised: kept in ``last_error``, counted and logged; the next cycle retries."""
        self.last_error = f"{type(error).__name__}: {error}"
        self.metrics.cycle_failed(error)
        log.exception("%s failed", what)

    async def run(self) -> None:
        """Cycle until ``stop()``; a failing cycle is logged and retried next period."""
        self._loop = asyncio.get_running_loop()
        self._wake = wake = asyncio.Event()
        while not self._stopping:
            await self.turn()
            self.on_change()
            await self._until_next_cycle(wake)

    async def _until_next_cycle(self, wake: asyncio.Event) -> None:
        """Wait a period, or less on a wake. While replicas are stopping, a release turn every
        ``RELEASE_POLL_SECONDS`` looks for their exits; once none is left stopping, the next cycle comes at
        once and gives their GPUs to the claimant (R2: as soon as the processes are gone, not up to a whole
        cycle later)."""
        due = time.monotonic() + self.settings.cycle_period
        while not self._stopping:
            polling = self.stopping > 0 and self.is_leader
            left = due - time.monotonic()
            with suppress(TimeoutError):
                await asyncio.wait_for(
                    wake.wait(), timeout=min(left, RELEASE_POLL_SECONDS) if polling else left
                )
            if wake.is_set() or not polling or time.monotonic() >= due:
                break
            try:
                if not await asyncio.to_thread(self.release):
                    break
            except Exception as error:  # as a failed cycle
                self._failed(error, "release turn")
                break
            self.on_change()
            if not self.stopping:
                break
        wake.clear()

    def trigger(self) -> None:
        """Ask for a cycle now (from any thread)."""
        if self._loop is not None and self._wake is not None and not self._loop.is_closed():
            with suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._wake.set)

    def stop(self) -> None:
        """End ``run`` after the current cycle; replicas keep running (they are adopted on restart)."""
        self._stopping = True
        self.trigger()

    def close(self) -> None:
        if self.eta is not None:
            self.eta.close()
        self.live.detach()
        self.replicas.detach()
        self.leadership.release()
        self.role = "stopped"
