"""The snapshot the engine keeps in memory is always the one a full read would give, on both databases.

Writes come from this process's ``Database`` (the engine's, the API's in one process) and from another one
on the same database (another process: ``tide serve``'s API process, a second replica, the CLI): submits,
cancels, records removed, quota edits, departments, node states, progress reports, bulk statements and the engine's
own cycles. After each one, what ``LiveSnapshot`` read again (only what changed) equals ``load_snapshot``
of the same database state, and ``plan_cycle`` on it decides what it decides on the full read; the engine's
own periodic checks find no drift, and each cycle it plans from what a full read would give. A write nobody
signals is found by the check, counted as drift, and mended.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rowkit import pending_job
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from scheduler.core import Cause, Config, Node, Placement
from scheduler.core.carry import Carry
from scheduler.core.cycle import plan_cycle
from scheduler.engine.loop import Engine, EngineSettings
from scheduler.executors.fake import FakeExecutor
from scheduler.store import lifecycle
from scheduler.store.changes import Changes, accounted
from scheduler.store.db import Database
from scheduler.store.live import LiveSnapshot
from scheduler.store.live_replicas import LiveReplicas
from scheduler.store.mapper import Snapshot, load_snapshot
from scheduler.store.migrate import upgrade
from scheduler.store.models import DepartmentRow, JobRow, NodeRow, ProjectRow, ReplicaRow
from scheduler.store.queries import LIVE

NODES = tuple(Node(f"node-{i}", 4) for i in range(4))
PROJECTS = ("a", "b", "c")
CORE = Config(settle_seconds=0)


def same_as_a_full_read(session: Session, kept: Snapshot, now: float) -> None:
    """``kept`` (read again only where it changed) is what a full read of ``session`` gives, and so is the
    plan made from it."""
    full = load_snapshot(session)
    assert kept.state == full.state
    assert kept.notes.ids == full.notes.ids
    assert kept.notes.stored == full.notes.stored
    assert plan_cycle(kept.state, CORE, now=now) == plan_cycle(full.state, CORE, now=now)


@dataclass
class World:
    here: Database  # the engine's process
    there: Database  # another process on the same database
    engine: Engine
    watcher: LiveSnapshot
    clock: float = 1000.0
    submitted: int = 0

    def db(self, via: str) -> Database:
        return self.here if via == "here" else self.there

    def agrees(self) -> None:
        """What the watcher keeps equals a full read of the same database state, and plans the same."""
        with self.here.read() as session:
            same_as_a_full_read(session, self.watcher.read(session), self.clock)


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    yield from _world(db_url, check_every=0.0)


@pytest.fixture
def unchecked_world(db_url: str) -> Iterator[World]:
    """The engine never checks its kept snapshot against a full read: each cycle plans from it alone."""
    yield from _world(db_url, check_every=math.inf)


def _world(db_url: str, *, check_every: float) -> Iterator[World]:
    here = Database(db_url)
    upgrade(here)
    there = Database(db_url)
    with here.write() as session:
        for name in PROJECTS:
            session.add(ProjectRow(name=name, deserved_gpus=4, created_at=0.0, fair_share_gpus=0))
    executor = FakeExecutor(NODES, stop_delay=1)
    world = World(here, there, engine=None, watcher=LiveSnapshot(here, check_every=math.inf))  # type: ignore[arg-type]
    settings_ = EngineSettings(
        grace_period=0, core=CORE, check_invariants=True, state_check_every=check_every
    )
    world.engine = Engine(here, executor, settings_, clock=lambda: world.clock)
    yield world
    world.engine.close()
    world.watcher.detach()
    here.dispose()
    there.dispose()


def _active_ids(db: Database) -> list[int]:
    with db.read() as session:
        return list(session.scalars(select(JobRow.id).where(JobRow.status.in_(("pending", "running")))))


def submit(world: World, via: str, project: int, *, low: int, high: int, gpus: int) -> None:
    world.clock += 1
    world.submitted += 1
    with world.db(via).insert() as session:
        owner = session.scalars(select(ProjectRow).where(ProjectRow.name == PROJECTS[project])).one()
        session.add(pending_job(owner.id, f"j{world.submitted}", world.clock, low=low, high=high, gpus=gpus))


def forget_one(world: World, via: str, pick: int) -> None:
    """Remove a finished job's record, as a second delete does once its processes exited."""
    with world.db(via).write() as session:
        done = session.scalars(
            select(JobRow).where(JobRow.status.not_in(("pending", "running"))).order_by(JobRow.id)
        ).all()
        gone = [job for job in done if not lifecycle.stopping(job)]
        if gone:
            lifecycle.forget_job(session, gone[pick % len(gone)])


def touch_job(world: World, via: str, pick: int, what: str) -> None:
    if what == "forget":
        forget_one(world, via, pick)
        return
    ids = _active_ids(world.here)
    if not ids:
        return
    job_id = ids[pick % len(ids)]
    with world.db(via).write() as session:
        if what == "bulk":  # a statement with a WHERE clause: nobody can tell which rows it wrote
            session.execute(update(JobRow).where(JobRow.id == job_id).values(priority=pick % 7))
            return
        job = session.get(JobRow, job_id)
        assert job is not None
        if what == "cancel":
            lifecycle.cancel_job(session, job, now=world.clock, reason="deleted by a test")
        elif what == "progress":
            job.progress_rates = {"1": 10.0 + pick, "2": 18.0 + pick}
        elif what == "checkpoint":
            job.checkpointed_at = world.clock


def edit_project(world: World, via: str, project: int, deserved: int, department: bool) -> None:
    with world.db(via).write() as session:
        row = session.scalars(select(ProjectRow).where(ProjectRow.name == PROJECTS[project])).one()
        row.deserved_gpus = deserved
        if department and row.department_id is None:
            dept = DepartmentRow(name=f"d-{PROJECTS[project]}", deserved_gpus=8, created_at=0.0)
            session.add(dept)
            session.flush()
            row.department_id = dept.id


def node_state(world: World, via: str, node: int, state: str) -> None:
    with world.db(via).write() as session:
        row = session.get(NodeRow, NODES[node].name)
        if row is not None:
            row.state = state


def cycle(world: World) -> None:
    world.clock += 0.5
    world.engine.tick()


VIA = st.sampled_from(("here", "there"))
STEP = st.one_of(
    st.tuples(
        st.just("submit"),
        VIA,
        st.integers(0, 2),
        st.integers(1, 2),
        st.integers(1, 3),
        st.sampled_from((1, 2, 4)),
    ),
    st.tuples(
        st.just("job"),
        VIA,
        st.integers(0, 50),
        st.sampled_from(("cancel", "forget", "progress", "checkpoint", "bulk")),
    ),
    st.tuples(st.just("project"), VIA, st.integers(0, 2), st.integers(0, 12), st.booleans()),
    st.tuples(st.just("node"), VIA, st.integers(0, 3), st.sampled_from(("ready", "cordoned", "drained"))),
    st.tuples(st.just("cycle")),
)


def run(world: World, step: tuple[object, ...]) -> None:
    kind, *args = step
    if kind == "submit":
        via, project, low, extra, gpus = args
        low_ = int(low)  # type: ignore[call-overload]
        high = low_ + int(extra) - 1  # type: ignore[call-overload]
        submit(world, str(via), int(project), low=low_, high=high, gpus=int(gpus))  # type: ignore[call-overload]
    elif kind == "job":
        touch_job(world, str(args[0]), int(args[1]), str(args[2]))  # type: ignore[call-overload]
    elif kind == "project":
        edit_project(world, str(args[0]), int(args[1]), int(args[2]), bool(args[3]))  # type: ignore[call-overload]
    elif kind == "node":
        node_state(world, str(args[0]), int(args[1]), str(args[2]))  # type: ignore[call-overload]
    else:
        cycle(world)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=1, max_size=14))
def test_the_kept_snapshot_equals_a_full_read_after_any_writes(
    world: World, steps: list[tuple[object, ...]]
) -> None:
    cycle(world)  # the engine leads and knows the nodes
    for step in steps:
        run(world, step)
        world.agrees()
    cycle(world)
    world.agrees()
    assert world.engine.live.checks > 0
    assert world.engine.live.drift == 0, world.engine.live.last_drift
    assert world.engine.replicas.checks > 0 and world.engine.replicas.drift == 0
    assert world.engine.violations == []


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=1, max_size=14))
def test_each_cycle_plans_what_a_full_read_would_have_planned(
    unchecked_world: World, steps: list[tuple[object, ...]]
) -> None:
    """Incremental against full, inside the engine: in every cycle, the snapshot it read again only where it
    changed, and the plan made from it, are those of a full read in the same database snapshot."""
    world = unchecked_world
    live = world.engine.live
    compared: list[int] = []

    def read(session: Session) -> Snapshot:
        kept = LiveSnapshot.read(live, session)
        same_as_a_full_read(session, kept, world.clock)
        compared.append(len(kept.state.jobs))
        return kept

    live.read = read  # type: ignore[method-assign]
    replicas = world.engine.replicas
    observed: list[int] = []

    def read_replicas(session: Session) -> Mapping[int, str]:
        kept = LiveReplicas.read(replicas, session)
        assert dict(kept) == every_live_replica(session)
        observed.append(len(kept))
        return kept

    replicas.read = read_replicas  # type: ignore[method-assign]
    cycle(world)
    for step in steps:
        run(world, step)
    cycle(world)
    assert (
        len(compared) >= 2 and live.checks == 1
    )  # only the first read was checked: none replaced what it kept
    assert len(observed) >= 2 and replicas.checks == 0  # none replaced what it kept
    assert world.engine.violations == []


def every_live_replica(session: Session) -> dict[int, str]:
    """What ``record_observations`` read itself before the engine kept it: every live replica's status."""
    return dict(session.execute(select(ReplicaRow.id, ReplicaRow.status).where(*LIVE)).all())


def test_a_settled_cluster_s_cycles_read_no_replica_again(unchecked_world: World) -> None:
    """Once nothing changes, a cycle reads no replica row: the live replicas it compares with what the
    executor sees are the ones it kept (read once, at the start)."""
    world = unchecked_world
    for project in range(3):
        submit(world, "here", project, low=1, high=2, gpus=2)
    for _ in range(4):
        cycle(world)
    replicas = world.engine.replicas
    with world.here.read() as session:
        assert dict(replicas._status) == every_live_replica(session) and len(replicas._status) >= 3
    again: list[set[int]] = []
    read_again = replicas._again

    def spy(session: Session, jobs: set[int]) -> None:
        again.append(set(jobs))
        read_again(session, jobs)

    replicas._again = spy  # type: ignore[method-assign]
    full_reads = replicas.full_reads
    for _ in range(3):
        cycle(world)
    assert again == [] and replicas.full_reads == full_reads
    submit(world, "here", 0, low=1, high=1, gpus=1)
    cycle(world)  # it starts: the next look reads that job's replicas again, and only those
    cycle(world)
    assert again and all(jobs == again[0] for jobs in again) and len(again[0]) == 1
    assert replicas.full_reads == full_reads


def run_a_job(world: World, *, replicas: int) -> None:
    """Submit a job of ``replicas`` one-GPU replicas in project a and launch them all, running."""
    submit(world, "here", 0, low=replicas, high=replicas, gpus=1)
    with world.here.write() as session:
        job = session.scalars(select(JobRow)).one()
        placements = tuple(Placement(i, f"node-{i}", 1) for i in range(replicas))
        lifecycle.start(
            session, job, placements, grow=False, now=1.0, cause=Cause.FAIR_SHARE, reason="a test starts it"
        )
    with world.here.write() as session:
        for replica in session.scalars(select(ReplicaRow)):
            lifecycle.launched(replica, pid=100 + replica.index, gpu_ids=[0], now=1.0, running=True)


@pytest.fixture
def kept_replicas(pg_url: str) -> Iterator[tuple[World, LiveReplicas]]:
    """Project a on PostgreSQL, the live replicas kept as the engine keeps them, and a second process."""
    here, there = Database(pg_url), Database(pg_url)
    upgrade(here)
    with here.write() as session:
        session.add(ProjectRow(name="a", deserved_gpus=4, created_at=0.0, fair_share_gpus=0))
    snapshot = LiveSnapshot(here, check_every=math.inf)
    kept = LiveReplicas(here, snapshot, check_every=math.inf)
    yield World(here, there, engine=None, watcher=snapshot), kept  # type: ignore[arg-type]
    kept.detach()
    snapshot.detach()
    here.dispose()
    there.dispose()


@pytest.mark.postgres
def test_another_process_s_change_to_a_replica_is_heard_before_the_executor_is_compared(
    kept_replicas: tuple[World, LiveReplicas],
) -> None:
    """A replica another process changed (here: a cancel, which marks the job's replicas to stop) is read
    again at the next look, within the transaction that records what the executor saw, not a cycle later."""
    world, kept = kept_replicas
    run_a_job(world, replicas=2)
    with world.here.write() as session:
        assert set(kept.read(session).values()) == {"running"}
    reads = kept.full_reads
    touch_job(world, "there", 0, "cancel")
    with world.here.write() as session:
        assert dict(kept.read(session)) == every_live_replica(session)
        assert set(kept.read(session).values()) == {"terminating"}
    assert kept.full_reads == reads  # that job's replicas only


@pytest.mark.postgres
def test_a_replica_changed_behind_the_service_s_back_is_found_as_drift_and_mended(
    kept_replicas: tuple[World, LiveReplicas], pg_url: str
) -> None:
    """A replica's row changed straight in PostgreSQL (no signal) is kept as it was until the periodic check,
    which counts the drift and keeps the full read."""
    world, kept = kept_replicas
    run_a_job(world, replicas=1)
    with world.here.write() as session:
        assert len(kept.read(session)) == 1
    conninfo = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("UPDATE replicas SET exit_code = 0")
    with world.here.write() as session:
        assert len(kept.read(session)) == 1  # nobody said so
    kept.check_every = 0.0
    with world.here.write() as session:
        assert len(kept.read(session)) == 0
    assert kept.checks == 1 and kept.drift == 1


def test_this_process_s_writes_are_read_again_job_by_job(world: World) -> None:
    """A submit and a cycle in the engine's own process re-read only their jobs, never everything."""
    world.agrees()
    reads = world.watcher.full_reads
    submit(world, "here", 0, low=1, high=2, gpus=1)
    world.agrees()
    cycle(world)
    world.agrees()
    touch_job(world, "here", 0, "progress")
    world.agrees()
    assert world.watcher.full_reads == reads


def test_a_check_that_finds_nothing_changed_hands_back_the_same_objects_and_the_plan_is_kept(
    world: World,
) -> None:
    """The core knows an unchanged snapshot by its objects (``scheduler.core.carry``): a check whose full read
    equals what was kept hands back those very objects, so the cycle after it plans nothing again."""
    submit(world, "here", 0, low=1, high=2, gpus=1)
    submit(world, "there", 1, low=1, high=1, gpus=2)
    cycle(world)
    with world.here.read() as session:
        before = world.watcher.read(session).state
    carry = Carry()
    plan = plan_cycle(before, CORE, now=world.clock, carry=carry)
    checks = world.watcher.checks
    world.watcher.check_every = 0.0
    with world.here.read() as session:
        after = world.watcher.read(session).state
    assert world.watcher.checks == checks + 1 and world.watcher.drift == 0
    assert after.jobs is before.jobs and after.nodes is before.nodes and after.projects is before.projects
    assert after.departments is before.departments
    assert plan_cycle(after, CORE, now=world.clock, carry=carry) is plan and carry.plans_kept == 1


@pytest.mark.postgres
def test_a_check_replaces_only_the_job_changed_behind_its_back(pg_url: str) -> None:
    """A job changed straight in PostgreSQL (no signal) is drift: the check replaces that job and keeps every
    other object it found equal."""
    db = Database(pg_url)
    upgrade(db)
    with db.write() as session:
        session.add(ProjectRow(name="a", deserved_gpus=4, created_at=0.0, fair_share_gpus=0))
    world = World(db, db, engine=None, watcher=LiveSnapshot(db, check_every=math.inf))  # type: ignore[arg-type]
    live = world.watcher
    try:
        for _ in range(3):
            submit(world, "here", 0, low=1, high=1, gpus=1)
        with db.read() as session:
            before = live.read(session).state
        conninfo = pg_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("UPDATE jobs SET priority = 5 WHERE name = 'j2'")
        live.check_every = 0.0
        with db.read() as session:
            after = live.read(session).state
        assert live.drift == 1 and len(live.last_drift) == 1 and live.last_drift[0].startswith("job ")
        assert [job.name for job in after.jobs] == ["j1", "j2", "j3"]
        assert after.jobs[1].priority == 5 and after.jobs[1] is not before.jobs[1]
        assert after.jobs[0] is before.jobs[0] and after.jobs[2] is before.jobs[2]
        assert after.projects is before.projects
    finally:
        live.detach()
        db.dispose()


@pytest.mark.postgres
def test_another_process_s_writes_arrive_with_their_commit_on_postgresql(pg_url: str) -> None:
    """On PostgreSQL another process's commit is signalled (NOTIFY) with what it changed: the kept snapshot
    reads those jobs again, not everything."""
    here, there = Database(pg_url), Database(pg_url)
    upgrade(here)
    watcher = LiveSnapshot(here, check_every=math.inf)
    world = World(here, there, engine=None, watcher=watcher)  # type: ignore[arg-type]
    with here.write() as session:
        for name in PROJECTS:
            session.add(ProjectRow(name=name, deserved_gpus=4, created_at=0.0, fair_share_gpus=0))
    try:
        world.agrees()
        reads = watcher.full_reads
        submit(world, "there", 1, low=1, high=1, gpus=2)
        world.agrees()
        touch_job(world, "there", 0, "cancel")
        world.agrees()
        edit_project(world, "there", 2, 9, department=True)
        world.agrees()
        assert watcher.full_reads == reads
        touch_job(world, "there", 0, "bulk")  # none left active: still a full read, and equal
        world.agrees()
    finally:
        watcher.detach()
        here.dispose()
        there.dispose()


@pytest.mark.postgres
def test_a_write_nobody_signals_is_found_as_drift_and_mended(pg_url: str) -> None:
    """A row changed behind the service's back (here: straight in PostgreSQL, no signal) is what the periodic
    check exists for: it counts the drift and keeps the full read."""
    db = Database(pg_url)
    upgrade(db)
    with db.write() as session:
        session.add(ProjectRow(name="a", deserved_gpus=4, created_at=0.0, fair_share_gpus=0))
    live = LiveSnapshot(db, check_every=math.inf)
    try:
        with db.read() as session:
            live.read(session)
        conninfo = pg_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("UPDATE projects SET deserved_gpus = 40")
        with db.read() as session:
            assert live.read(session).state.projects[0].deserved_gpus == 4  # nobody said so
        live.check_every = 0.0
        with db.read() as session:
            assert live.read(session).state.projects[0].deserved_gpus == 40
        assert live.drift == 1 and live.last_drift == ["projects"]
    finally:
        live.detach()
        db.dispose()


def test_a_slow_check_comes_less_often_so_checks_stay_a_small_part_of_the_loop(db_url: str) -> None:
    """Checks come every ``check_every`` seconds while a full read is quick; when one took 2 s (a large
    cluster), the next waits 50 times that (100 s), not the 60 s set."""
    db = Database(db_url)
    upgrade(db)
    now, took, elapsed = [0.0], [0.001], [0.0]

    def timer() -> float:  # a check reads it before and after its full read, which takes ``took[0]``
        elapsed[0] += took[0]
        return elapsed[0]

    live = LiveSnapshot(db, check_every=60.0, clock=lambda: now[0], timer=timer)

    def checks_at(*times: float) -> list[int]:
        counts = []
        for t in times:
            now[0] = t
            with db.read() as session:
                live.read(session)
            counts.append(live.checks)
        return counts

    try:
        assert checks_at(0.0, 30.0, 60.0, 90.0) == [1, 1, 2, 2]  # quick reads: every 60 s
        took[0] = 2.0
        assert checks_at(120.0) == [3]  # this one took 2 s
        assert checks_at(180.0, 219.0) == [3, 3]  # so the next comes 100 s later
        took[0] = 0.001
        assert checks_at(220.0, 250.0, 280.0) == [4, 4, 5]  # quick again: 60 s
    finally:
        live.detach()
        db.dispose()


def test_a_due_check_waits_for_a_read_with_nothing_to_plan_ten_seconds_at_most(db_url: str) -> None:
    """A read that brings a change (a claim) is planned at once: the check due then comes with the next read
    that brings nothing, and while changes keep coming, ten seconds late at most."""
    db = Database(db_url)
    upgrade(db)
    with db.write() as session:
        session.add(ProjectRow(name="a", deserved_gpus=4, created_at=0.0, fair_share_gpus=0))
    now, submitted = [0.0], [0]
    live = LiveSnapshot(db, check_every=60.0, clock=lambda: now[0])

    def checks_at(*times: float, submit: bool) -> list[int]:
        counts = []
        for t in times:
            now[0] = t
            if submit:
                submitted[0] += 1
                with db.insert() as session:
                    owner = session.scalars(select(ProjectRow)).one()
                    session.add(pending_job(owner.id, f"j{submitted[0]}", t, low=1, high=1, gpus=1))
            with db.read() as session:
                live.read(session)
            counts.append(live.checks)
        return counts

    try:
        assert checks_at(0.0, submit=False) == [1]  # the first read checks at once
        assert checks_at(60.0, 61.0, submit=True) == [1, 1]  # due, but each read brought a job to plan
        assert checks_at(62.0, submit=False) == [2]  # the next read with nothing new checks
        assert checks_at(122.0, 125.0, 131.0, 132.0, submit=True) == [2, 2, 2, 3]  # ten seconds late at most
        assert live.drift == 0
    finally:
        live.detach()
        db.dispose()


def test_a_change_signal_that_cannot_be_read_means_everything() -> None:
    assert Changes.decode("garbled")[2].everything
    assert Changes.decode("s w - 1,x")[2].everything
    schema, writer, changes = Changes.decode("s w pn 3,1")
    assert (schema, writer, changes.jobs, changes.projects, changes.nodes) == ("s", "w", {1, 3}, True, True)
    assert Changes(jobs=set(range(5000))).encode("w") == "w * "


def test_on_sqlite_another_process_s_write_means_reading_everything(tmp_path: Path) -> None:
    """SQLite cannot say what another process changed; that the file changed is enough to read all again."""
    url = f"sqlite+pysqlite:///{tmp_path / 'tide.db'}"
    here, there = Database(url), Database(url)
    upgrade(here)
    watcher = LiveSnapshot(here, check_every=math.inf)
    world = World(here, there, engine=None, watcher=watcher)  # type: ignore[arg-type]
    with here.write() as session:
        session.add(ProjectRow(name="a", deserved_gpus=4, created_at=0.0, fair_share_gpus=0))
    try:
        world.agrees()
        reads = watcher.full_reads
        submit(world, "here", 0, low=1, high=1, gpus=1)
        world.agrees()
        assert watcher.full_reads == reads  # its own write: that job only
        submit(world, "there", 0, low=1, high=2, gpus=1)
        world.agrees()
        assert watcher.full_reads == reads + 1
    finally:
        watcher.detach()
        here.dispose()
        there.dispose()


@pytest.mark.postgres
def test_only_writes_that_change_what_others_keep_are_signalled(pg_url: str) -> None:
    """A transaction that changed nothing of the snapshot, or only the notes the engine keeps itself, sends no
    signal: the processes listening are not woken by every cycle of a settled cluster."""
    db = Database(pg_url)
    upgrade(db)
    heard: list[str] = []
    conninfo = pg_url.replace("postgresql+psycopg://", "postgresql://").split("?")[0]
    schema = pg_url.split("search_path%3D")[1]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.add_notify_handler(lambda note: heard.append(note.payload))
        conn.execute("LISTEN tide_changes")
        try:
            with db.write():
                pass
            with db.write() as session, accounted(session, notes={1: ("waiting", 1)}):
                pass
            with db.write() as session:
                session.add(ProjectRow(name="a", deserved_gpus=4, created_at=0.0, fair_share_gpus=0))
            conn.execute("SELECT 1")  # a round trip delivers what was sent before it
        finally:
            db.dispose()
    ours = [payload for payload in heard if payload.startswith(f"{schema} ")]
    assert [payload.split(" ")[2] for payload in ours] == ["p"]
