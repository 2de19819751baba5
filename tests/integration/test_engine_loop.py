"""The control loop driven cycle by cycle on a real SQLite database with the in-memory executor.

What the engine promises beyond the core: reclaimed GPUs reach the claimant as soon as they are released,
and a placement onto GPUs still held by a live process waits for them (never over-allocates);
the master is signalled only after the job's other replicas exited; exits finish jobs (a failure fails it,
the master's success completes it); a process the store does not want is stopped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest
from rowkit import pending_job
from sqlalchemy import select

from scheduler.core import Config, Node
from scheduler.core.carry import Carry, Patch, T
from scheduler.core.cycle import plan_cycle
from scheduler.engine.loop import Engine, EngineSettings
from scheduler.engine.persist import persist_notes, persist_plan
from scheduler.executors.base import LaunchDeferred, LaunchSpec, Observation
from scheduler.executors.fake import FakeExecutor
from scheduler.store import lifecycle
from scheduler.store.db import Database
from scheduler.store.mapper import load_snapshot
from scheduler.store.migrate import upgrade
from scheduler.store.models import EventRow, JobRow, NodeRow, ProjectRow, ReplicaRow
from scheduler.store.queries import job_by_name

NODES = (Node("node-0", 4),)


class Harness:
    def __init__(self, tmp_path: Path, stop_delay: int = 0, url: str | None = None) -> None:
        self.db = Database(url or f"sqlite+pysqlite:///{tmp_path / 'tide.db'}")
        upgrade(self.db)
        self.executor = FakeExecutor(NODES, stop_delay=stop_delay)
        self.clock = 1000.0
        settings = EngineSettings(grace_period=5, core=Config(settle_seconds=0), check_invariants=True)
        self.engine = Engine(self.db, self.executor, settings, clock=lambda: self.clock)

    def project(self, name: str, deserved: int) -> None:
        with self.db.write() as session:
            session.add(ProjectRow(name=name, deserved_gpus=deserved, created_at=0.0, fair_share_gpus=0))

    def submit(self, project: str, name: str, low: int, high: int) -> None:
        self.clock += 1
        with self.db.write() as session:
            owner = session.scalars(select(ProjectRow).where(ProjectRow.name == project)).one()
            session.add(pending_job(owner.id, name, self.clock, low=low, high=high))

    def cycle(self, times: int = 1) -> None:
        for _ in range(times):
            self.clock += 0.1
            self.engine.tick()
        assert self.executor.refused == [] and self.engine.violations == []

    def job(self, project: str, name: str) -> JobRow:
        with self.db.read() as session:
            job = job_by_name(session, project, name)
            assert job is not None
            return job

    def live(self, job: str) -> list[LaunchSpec]:
        return sorted((s for s in self.executor.live() if s.job == job), key=lambda s: s.index)

    def stopping(self, job: str) -> list[int]:
        records = self.executor.records.values()
        return sorted(r.spec.index for r in records if r.spec.job == job and r.observation.stopping)

    def events(self) -> list[tuple[str, str]]:
        with self.db.read() as session:
            return [(e.kind, e.job) for e in session.scalars(select(EventRow).order_by(EventRow.id))]


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    built = Harness(tmp_path, stop_delay=2)
    yield built
    built.engine.close()
    built.db.dispose()


def test_reclaimed_gpus_go_to_the_claimant_once_released(harness: Harness) -> None:
    harness.project("a", 2)
    harness.project("b", 2)
    harness.submit("a", "elastic", 2, 4)
    harness.cycle()
    assert [s.index for s in harness.live("elastic")] == [0, 1, 2, 3]
    harness.submit("b", "one", 2, 2)
    harness.cycle()
    assert harness.stopping("elastic") == [2, 3]  # shrink: the two highest-index workers
    assert "being reclaimed" in (harness.job("b", "one").pending_reason or "")
    harness.cycle(2)
    assert harness.live("one") == []  # the stopping replicas still hold the GPUs
    harness.cycle()
    assert [s.index for s in harness.live("elastic")] == [0, 1]
    assert [s.index for s in harness.live("one")] == [0, 1]  # in the cycle that saw them exit
    assert {g for s in harness.executor.live() for g in s.gpu_ids} == {0, 1, 2, 3}


def test_release_turns_start_the_claimant_as_its_victims_exit_without_planning_again(
    any_db_harness: Harness,
) -> None:
    """Between cycles, while replicas stop, a release turn records what exited (no plan: a cycle at 81,920
    GPUs takes seconds) and starts the job the last plan held the released GPUs for, on them, at once."""
    harness = any_db_harness
    _reclaim_for_a_claimant(harness)
    cycles = harness.engine.cycles
    assert harness.engine.release() and harness.engine.release()
    assert harness.engine.stopping == 2  # two looks before they exit
    assert harness.live("one") == []  # its GPUs are still held
    assert harness.engine.release()
    assert harness.engine.stopping == 0 and harness.engine.cycles == cycles
    assert sorted(r.index for r in harness.job("a", "elastic").replicas) == [0, 1]  # the exits recorded
    assert [(s.index, s.gpu_ids) for s in harness.live("one")] == [(0, (2,)), (1, (3,))]  # the freed GPUs
    claimant = harness.job("b", "one")
    assert claimant.status == "running" and claimant.pending_reason is None
    with harness.db.read() as session:
        start = session.scalars(select(EventRow).where(EventRow.job == "one")).one()
    assert start.kind == "start" and start.reason.startswith(
        "started 2 replicas on the GPUs held for it as soon as they were free; it was waiting for 2 GPUs"
    )
    assert "being reclaimed: 2 GPUs from project a" in start.reason
    applied = harness.engine.metrics.registry.get_sample_value
    assert applied("tide_decisions_total", {"kind": "start", "cause": "fair-share"}) == 2  # elastic's, one's
    harness.cycle()  # the next plan finds it running: nothing to decide, every invariant kept
    assert harness.events()[-1] == ("start", "one") and len(harness.live("one")) == 2


def _reclaim_for_a_claimant(harness: Harness) -> None:
    """a's elastic job runs on all 4 GPUs; b submits a gang of 2: the cycle shrinks a and holds 2 GPUs for it."""
    harness.project("a", 2)
    harness.project("b", 2)
    harness.submit("a", "elastic", 2, 4)
    harness.cycle()
    harness.submit("b", "one", 2, 2)
    harness.cycle()
    assert harness.stopping("elastic") == [2, 3]
    assert "being reclaimed" in (harness.job("b", "one").pending_reason or "")


def test_the_other_jobs_places_in_line_are_written_once_the_claimant_started(harness: Harness) -> None:
    """A reclaim moves every waiting job's place in line (thousands at 81,920 GPUs): those rows are written
    after the release turn that gives the freed GPUs to the claimant, not on its way."""
    harness.project("a", 2)
    harness.project("b", 2)
    harness.project("c", 0)
    harness.submit("a", "elastic", 2, 4)
    harness.cycle()
    harness.submit("c", "behind", 1, 1)  # c's fair share is 1 while b asks for nothing: a GPU of a's for it
    harness.cycle()
    before = harness.job("c", "behind").pending_reason
    harness.submit("b", "one", 2, 2)
    harness.cycle()  # the reclaim for b's guarantee: c's fair share drops to 0, its job's reason changes
    assert "being reclaimed" in (harness.job("b", "one").pending_reason or "")  # with the decisions
    assert harness.job("c", "behind").pending_reason == before  # not yet: a's workers are still stopping
    for _ in range(3):
        harness.engine.release()
    assert len(harness.live("one")) == 2
    assert harness.job("c", "behind").pending_reason != before  # written by the turn that started it
    harness.cycle()


def test_a_claimant_starts_in_the_reclaiming_cycle_when_its_gpus_come_free_at_once(harness: Harness) -> None:
    """Victims whose processes never started (their launch waits) are gone as soon as they are stopped: the
    job held their GPUs starts in the same cycle, not in the next one."""
    start = harness.executor.start

    def deferring(spec: LaunchSpec) -> Observation:
        if spec.job == "elastic" and spec.index >= 2:
            raise LaunchDeferred("pulling its image")
        return start(spec)

    harness.executor.start = deferring  # type: ignore[method-assign]
    harness.project("a", 2)
    harness.project("b", 2)
    harness.submit("a", "elastic", 2, 4)
    harness.cycle()
    assert [s.index for s in harness.live("elastic")] == [0, 1]  # 2 and 3 wait for their launch
    harness.submit("b", "one", 2, 2)
    harness.cycle()  # shrinks a's two waiting workers: deleted at once, their GPUs free
    assert [(s.index, s.gpu_ids) for s in harness.live("one")] == [(0, (2,)), (1, (3,))]
    assert harness.job("b", "one").status == "running"


def test_a_claimant_deleted_while_its_gpus_are_released_is_not_started(harness: Harness) -> None:
    _reclaim_for_a_claimant(harness)
    with harness.db.write() as session:
        job = job_by_name(session, "b", "one", lock=True)
        assert job is not None
        lifecycle.cancel_job(session, job, now=harness.clock, reason="deleted by its owner")
    for _ in range(3):
        harness.engine.release()
    assert harness.engine.stopping == 0 and harness.live("one") == []
    assert harness.job("b", "one").status == "cancelled" and harness.job("b", "one").replicas == []


def test_a_claimant_whose_node_was_cordoned_meanwhile_waits_for_the_next_plan(harness: Harness) -> None:
    _reclaim_for_a_claimant(harness)
    with harness.db.write() as session:
        node = session.get(NodeRow, "node-0")
        assert node is not None
        node.state = "cordoned"
    for _ in range(3):
        harness.engine.release()
    assert harness.engine.stopping == 0 and harness.live("one") == []
    assert harness.job("b", "one").status == "pending"


def test_release_turns_stop_the_master_once_its_workers_are_gone(harness: Harness) -> None:
    _delete_a_running_gang(harness)
    for _ in range(3):
        harness.engine.release()
    assert harness.stopping("train") == [0]  # R5: the master last, signalled by a release turn
    for _ in range(3):
        harness.engine.release()
    assert harness.live("train") == [] and harness.engine.stopping == 0


def _delete_a_running_gang(harness: Harness) -> None:
    """A gang of three runs, then an admin deletes it: the cycle signals its workers first."""
    harness.project("a", 4)
    harness.submit("a", "train", 3, 3)
    harness.cycle()
    with harness.db.write() as session:
        job = job_by_name(session, "a", "train", lock=True)
        assert job is not None
        lifecycle.cancel_job(session, job, now=harness.clock, reason="deleted by an admin")
    harness.cycle()
    assert harness.stopping("train") == [1, 2]  # workers first


def test_a_standby_runs_no_release_turn(harness: Harness) -> None:
    assert not harness.engine.release()  # it never led: nothing observed, nothing launched
    assert harness.engine.cycles == 0


def test_the_loop_launches_reclaimed_gpus_long_before_its_next_period(tmp_path: Path) -> None:
    """``run``: with a 60 s period, a claimant whose GPUs a reclaim frees starts within a second: release
    turns look for the exits (the replicas take two looks), and the cycle that starts it comes at once."""
    harness = Harness(tmp_path, stop_delay=2)
    harness.engine.settings = dataclasses.replace(harness.engine.settings, cycle_period=60.0)
    launched_in: list[tuple[str, int]] = []
    start = harness.executor.start

    def counting_start(spec: LaunchSpec) -> Observation:
        launched_in.append((spec.job, harness.engine.cycles))
        return start(spec)

    harness.executor.start = counting_start  # type: ignore[method-assign]
    try:
        harness.project("a", 2)
        harness.project("b", 2)
        harness.submit("a", "elastic", 2, 4)
        harness.cycle()
        harness.submit("b", "one", 2, 2)
        asyncio.run(_run_until(harness, lambda: len(harness.live("one")) == 2, timeout=10.0))
        reclaim_cycle = 2
        assert [cycle for job, cycle in launched_in if job == "one"] == [
            reclaim_cycle
        ] * 2  # the one after it
        turns = harness.engine.metrics.registry.get_sample_value("tide_release_turn_seconds_count")
        assert (turns or 0) >= 3  # the turns that looked for the exits
    finally:
        harness.engine.close()
        harness.db.dispose()


async def _run_until(harness: Harness, done: Callable[[], bool], timeout: float) -> None:
    task = asyncio.create_task(harness.engine.run())
    started = time.monotonic()
    try:
        while not done():
            assert time.monotonic() - started < timeout, "the claimant did not start"
            await asyncio.sleep(0.02)
        assert time.monotonic() - started < 5.0  # far less than the 60 s period
    finally:
        harness.engine.stop()
        await task


def test_a_wanted_replica_waits_while_its_gpus_are_held(harness: Harness) -> None:
    harness.project("a", 4)
    harness.submit("a", "train", 4, 4)
    harness.cycle()
    with harness.db.write() as session:  # a placement onto busy GPUs, as a plan may make during a release
        job = job_by_name(session, "a", "train", lock=True)
        assert job is not None
        job.replicas.append(ReplicaRow(index=4, node="node-0", gpus=1, desired="run", created_at=0.0))
    harness.engine.tick()
    assert [s.index for s in harness.live("train")] == [0, 1, 2, 3]
    assert harness.executor.refused == []


def test_the_master_is_stopped_last(harness: Harness) -> None:
    _delete_a_running_gang(harness)
    harness.cycle(3)
    assert harness.stopping("train") == [0]  # the master once the workers are gone
    harness.cycle(3)
    assert harness.live("train") == []
    assert {r.status for r in harness.job("a", "train").replicas} == {"stopped"}  # by Tide


def test_a_failing_worker_fails_the_job(harness: Harness) -> None:
    harness.project("a", 4)
    harness.submit("a", "train", 3, 3)
    harness.cycle()
    harness.executor.finish("a", "train", 2, exit_code=1)
    harness.cycle()
    job = harness.job("a", "train")
    assert job.status == "failed" and job.message == "replica 2 exited with code 1"
    assert ("fail", "train") in harness.events()
    harness.cycle(6)
    assert harness.live("train") == []


def test_the_master_succeeding_completes_the_job(harness: Harness) -> None:
    harness.project("a", 4)
    harness.submit("a", "train", 2, 2)
    harness.cycle()
    harness.executor.finish("a", "train", 0, exit_code=0)
    harness.cycle(4)
    job = harness.job("a", "train")
    assert job.status == "succeeded" and ("finish", "train") in harness.events()
    assert harness.live("train") == []


def test_a_worker_that_finished_before_its_master_is_not_started_again(harness: Harness) -> None:
    """A job's replicas end their work one after the other (a worker notices first): the job is ending, so
    the finished worker is neither restored to the gang nor grown back; the master's success completes it."""
    harness.project("a", 4)
    harness.submit("a", "train", 2, 2)
    harness.cycle()
    harness.executor.finish("a", "train", 1, exit_code=0)
    harness.cycle(3)
    assert [s.index for s in harness.live("train")] == [0]
    assert [kind for kind, job in harness.events() if job == "train"] == ["start"]
    harness.executor.finish("a", "train", 0, exit_code=0)
    harness.cycle(2)
    assert harness.job("a", "train").status == "succeeded"


def test_an_unwanted_process_is_stopped(harness: Harness) -> None:
    harness.project("a", 4)
    harness.executor.start(LaunchSpec(999, "a", "ghost", 0, "node-0", (3,), ("sleep", "1")))
    harness.cycle()
    assert harness.stopping("ghost") == [0]
    harness.cycle(3)
    assert 999 not in harness.executor.records  # stopped, then forgotten


def test_caches_are_invalidated_only_by_cycles_that_changed_something(tmp_path: Path, db_url: str) -> None:
    """``changes`` (what the API's view cache keys on, ``api.server.cache``, and what wakes the agents'
    long-polls) moves after a cycle that wrote, and stays put through cycles with nothing to do: pollers of a
    settled cluster are answered from memory, on both databases (on PostgreSQL a write's change signal is no
    write of its own)."""
    harness = Harness(tmp_path, stop_delay=2, url=db_url)
    try:
        _settled_cycles_change_nothing(harness)
    finally:
        harness.engine.close()
        harness.db.dispose()


def _settled_cycles_change_nothing(harness: Harness) -> None:
    harness.project("a", 2)
    harness.submit("a", "train", 2, 2)
    harness.cycle(4)
    assert len(harness.live("train")) == 2
    settled = harness.engine.changes
    harness.cycle(5)
    assert harness.engine.changes == settled
    harness.submit("a", "next", 1, 1)
    harness.cycle()
    assert harness.engine.changes > settled


def test_a_job_cancelled_while_the_cycle_planned_gets_no_replicas(harness: Harness) -> None:
    """The plan is made outside the write lock: a delete that lands meanwhile wins, the other starts go on."""
    harness.project("a", 4)
    harness.cycle()  # the nodes are known
    harness.submit("a", "kept", 1, 1)
    harness.submit("a", "deleted", 1, 1)
    with harness.db.read() as session:
        snapshot = load_snapshot(session)
    plan = plan_cycle(snapshot.state, Config(settle_seconds=0), now=harness.clock)
    assert sorted(d.job for d in plan.decisions) == ["deleted", "kept"]
    with harness.db.write() as session:
        job = job_by_name(session, "a", "deleted")
        assert job is not None
        job.status = "cancelled"
    with harness.db.write() as session:
        applied = persist_plan(session, plan, now=harness.clock, notes=snapshot.notes)
    assert [d.job for d in applied] == ["kept"]
    assert harness.job("a", "deleted").replicas == [] and len(harness.job("a", "kept").replicas) == 1
    assert harness.events() == [("start", "kept")]


@pytest.fixture
def any_db_harness(tmp_path: Path, db_url: str) -> Iterator[Harness]:
    """A harness on SQLite, and one on PostgreSQL (whose notes and starts are written in one statement a
    table)."""
    built = Harness(tmp_path, stop_delay=2, url=db_url)
    yield built
    built.engine.close()
    built.db.dispose()


def test_notes_are_written_from_the_snapshot_and_never_to_a_job_cancelled_meanwhile(
    any_db_harness: Harness,
) -> None:
    """R13 notes are compared with what the snapshot read and only changed ones written: a waiting job gets
    its reason and place in line, and a job cancelled after the snapshot keeps the note the delete left."""
    harness = any_db_harness
    harness.project("a", 4)
    harness.cycle()
    harness.submit("a", "runs", 4, 4)
    harness.submit("a", "first", 2, 2)
    harness.submit("a", "second", 2, 2)
    with harness.db.read() as session:
        snapshot = load_snapshot(session)
    assert snapshot.notes.stored[snapshot.notes.ids[("a", "first")]] == (None, None)
    plan = plan_cycle(snapshot.state, Config(settle_seconds=0), now=harness.clock)
    waiting = {n.job: n.queue_position for n in plan.notes if n.queue_position is not None}
    assert waiting == {"first": 1, "second": 2}
    with harness.db.write() as session:
        job = job_by_name(session, "a", "second")
        assert job is not None
        job.status = "cancelled"
    with harness.db.write() as session:
        persist_plan(session, plan, now=harness.clock, notes=snapshot.notes)
    first, second = harness.job("a", "first"), harness.job("a", "second")
    assert first.queue_position == 1 and first.pending_reason and "waiting" in first.pending_reason
    assert (second.pending_reason, second.queue_position) == (None, None)
    # a job the next plan has no note for (it would run at its wanted size) has its note cleared
    with harness.db.read() as session:
        snapshot = load_snapshot(session)
    later = dataclasses.replace(
        plan, decisions=(), reservations=(), notes=tuple(n for n in plan.notes if n.job != "first")
    )
    with harness.db.write() as session:
        persist_notes(session, later, notes=snapshot.notes)
    assert (harness.job("a", "first").pending_reason, harness.job("a", "first").queue_position) == (
        None,
        None,
    )


def test_placements_move_only_with_what_nodes_show(tmp_path: Path, db_url: str) -> None:
    """``placements`` (what ``GET /cluster``'s nodes are kept by, ``api.server.cache.StateVersion.nodes``)
    moves after a cycle that placed or released replicas, not after one that only wrote a waiting job's note."""
    harness = Harness(tmp_path, url=db_url)
    try:
        harness.project("a", 4)
        harness.submit("a", "fill", 4, 4)
        harness.cycle(4)
        assert len(harness.live("fill")) == 4
        placed, node_rows = harness.engine.placements, harness.engine.node_rows
        harness.submit("a", "waiter", 1, 1)  # no room: the cycle writes its note, places nothing
        harness.cycle()
        assert harness.job("a", "waiter").pending_reason
        assert harness.engine.placements == placed
        with harness.db.write() as session:
            job = job_by_name(session, "a", "fill", lock=True)
            assert job is not None
            lifecycle.cancel_job(session, job, now=harness.clock, reason="test")
        harness.cycle(3)
        assert harness.engine.placements > placed
        assert harness.engine.node_rows == node_rows  # replicas moved, no node changed
        assert len(harness.live("waiter")) == 1
    finally:
        harness.engine.close()
        harness.db.dispose()


class _StaleDemand(Carry):
    """A carry that keeps the first demand it computed whatever changes after: what a carry reusing
    something it should not would do."""

    def reuse(
        self,
        slot: str,
        inputs: tuple[object, ...],
        compute: Callable[[], T],
        patch: Patch[T] | None = None,
    ) -> T:
        kept = self._kept.get(slot)
        if slot == "demand" and kept is not None:
            return cast(T, kept[1])
        return super().reuse(slot, inputs, compute, patch)


def test_a_plan_made_with_what_the_last_cycles_kept_is_checked_against_one_made_from_scratch(
    tmp_path: Path,
) -> None:
    """Every ``state_check_every`` seconds (0 here: every cycle) the engine plans again without its carry: a
    carry that reused what it should not (here a stale demand, which leaves b's claim with no fair share)
    is found, counted, dropped, and the plan from scratch is the one carried out (b reclaims its quota)."""
    harness = Harness(tmp_path)
    try:
        engine = harness.engine
        engine.settings = dataclasses.replace(engine.settings, state_check_every=0)
        engine._carry = _StaleDemand()
        harness.project("a", 2)
        harness.project("b", 2)
        harness.submit("a", "elastic", 2, 4)
        harness.cycle()
        assert len(harness.live("elastic")) == 4
        sample = engine.metrics.registry.get_sample_value
        assert sample("tide_plan_checks_total") == 1 and sample("tide_plan_drift_total") == 0
        harness.submit("b", "one", 2, 2)
        harness.cycle()
        assert sample("tide_plan_drift_total") == 1
        assert type(engine._carry) is Carry  # dropped: the next cycles start from scratch
        assert ("shrink", "elastic") in harness.events()
        harness.cycle(3)
        assert len(harness.live("one")) == 2 and sample("tide_plan_drift_total") == 1
    finally:
        harness.engine.close()
        harness.db.dispose()


def test_a_due_plan_check_waits_for_a_cycle_with_nothing_new_to_plan_ten_seconds_at_most(
    tmp_path: Path,
) -> None:
    """The plan from scratch that checks the carry's (a second at 81,920 GPUs) is not made in a cycle whose
    read brought something to plan (a claim): that cycle carries out its plan at once and the check comes
    in the next cycle with nothing new, or ten seconds late at most while changes keep coming."""
    harness = Harness(tmp_path)
    try:
        engine = harness.engine
        engine.settings = dataclasses.replace(engine.settings, state_check_every=60.0)
        sample = engine.metrics.registry.get_sample_value
        harness.project("a", 4)
        harness.submit("a", "first", 1, 1)
        harness.cycle(2)
        assert not sample("tide_plan_checks_total")  # none due yet
        engine._plan_checked_at = time.monotonic() - 61  # due
        harness.submit("a", "claim", 1, 1)
        harness.cycle()
        assert len(harness.live("claim")) == 1 and not sample("tide_plan_checks_total")
        counts = []
        for _ in range(3):  # the next read brings the claim's start (the engine's own write), then nothing
            harness.cycle()
            counts.append(sample("tide_plan_checks_total"))
        assert counts == [0, 1, 1]
        engine._plan_checked_at = time.monotonic() - 71  # due ten seconds ago
        harness.submit("a", "late", 1, 1)
        harness.cycle()
        assert sample("tide_plan_checks_total") == 2 and sample("tide_plan_drift_total") == 0
    finally:
        harness.engine.close()
        harness.db.dispose()


def test_a_settled_cycle_writes_the_notes_its_plan_changed_though_no_job_changed(
    any_db_harness: Harness,
) -> None:
    """A cycle that decides nothing skips writing the notes when its plan's notes are the last settled
    cycle's and no job was read again; a note the plan changed without any job changing (here a limit set on
    the waiting job's project, which its reason names) is written all the same."""
    harness = any_db_harness
    harness.project("a", 4)
    harness.submit("a", "runs", 4, 4)
    harness.submit("a", "first", 2, 2)
    harness.cycle(3)
    before = harness.job("a", "first").pending_reason
    assert before and harness.job("a", "first").queue_position == 1
    with harness.db.write() as session:
        session.scalars(select(ProjectRow).where(ProjectRow.name == "a")).one().limit_gpus = 4
    harness.cycle()
    with harness.db.read() as session:
        snapshot = load_snapshot(session)
    plan = plan_cycle(snapshot.state, Config(settle_seconds=0), now=harness.clock)
    wanted = next(n.reason for n in plan.notes if n.job == "first")
    assert wanted != before and harness.job("a", "first").pending_reason == wanted
    # a job written meanwhile (here its note wiped, as a former leader's late write could) is read again:
    # its stored note is compared with the plan's though the plan's notes are the last cycle's
    harness.cycle()
    with harness.db.write() as session:
        job = job_by_name(session, "a", "first")
        assert job is not None
        job.pending_reason, job.queue_position = None, None
    harness.cycle()
    assert harness.job("a", "first").pending_reason == wanted
    assert harness.job("a", "first").queue_position == 1
