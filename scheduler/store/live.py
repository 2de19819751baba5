"""The scheduling snapshot kept in memory across cycles: each cycle reads again only what changed.

Contract: ``LiveSnapshot(db)`` keeps what ``scheduler.store.mapper.load_snapshot`` reads. ``read_snapshot(live,
session)`` (``session`` a read that has not run a statement yet) first gathers what changed since the last
read, then reads again only that, and returns a ``Snapshot`` equal to a full ``load_snapshot`` of the same
database state:

* this process's committed writes come from the ``Database`` itself (``subscribe``, ``scheduler.store.changes``);
* other processes' (an API process, another replica's API, the CLI): on PostgreSQL the ``NOTIFY`` of each
  commit, received on a connection of its own that ``LISTEN``s while the snapshot is kept; a round trip on it
  before the read collects every signal of a commit that ended before, so the read sees those commits and
  knows them; on SQLite ``Database.data_version()``: when another connection wrote, everything is read
  again;
* jobs changed: those jobs are read again (one dropped when it is no longer pending or running; more than a
  quarter of them: all jobs, in one pass); notes the engine wrote: taken as written; projects
  or departments: both tables; nodes: the nodes; anything else, a lost or new listening connection, the
  first read and one after ``invalidate()`` (the engine calls it when it takes the lead): everything.

``hear()`` collects the other processes' signals ahead of a read (the next read applies them) and
``watch(watcher)`` hands each batch heard to a watcher too (``scheduler.store.live_replicas``, which keeps
the live replicas from the same signals).

A commit that ends after the round trip may show in rows read again for another reason; its signal comes
next cycle and the rows are read again then. Every ``check_every`` seconds (or, where a full read is slow,
after ``CHECK_SPACING`` times what the last one took, so checks take at most about 2 % of the loop: at 81,920
GPUs a full read takes seconds; a due check waits for a read that brought nothing to plan, ``CHECK_YIELD``
seconds at most, so that a claim's cycle is not the one that pays for it) the read is followed, in the same
database snapshot, by a full one: what differs (jobs, notes, projects, departments, nodes), leaving aside
what changed meanwhile, is drift; it is logged and counted in ``drift`` (the engine's
``tide_state_drift_total``), and the full read is kept where it differs; where it equals what was kept, the
kept objects stay (the core knows an unchanged snapshot by its objects, ``scheduler.core.carry``: a check that
found nothing changed does not make the next cycle plan again). ``check_seconds`` is what the last check took
(the engine times it apart from the read). ``close()`` stops listening (a standby keeps
nothing); the next read reads everything.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from scheduler.core.model import ClusterState, Department, Job, Node, Project
from scheduler.store.changes import CHANNEL, Changes
from scheduler.store.db import CONNECT_TIMEOUT_S, Database
from scheduler.store.mapper import (
    IDS_A_QUERY,
    JobKey,
    Note,
    Notes,
    Snapshot,
    load_departments,
    load_jobs,
    load_nodes,
    load_projects,
)

log = logging.getLogger(__name__)
CHECK_EVERY = 60.0  # seconds between two full reads that check the kept snapshot
CHECK_SPACING = 50.0  # and at least this many times what the last check took
CHECK_YIELD = 10.0  # seconds at most a due check waits for a read that brought nothing to plan


def check_due(since: float, every: float, *, changed: bool) -> bool:
    """Whether a periodic check, last made ``since`` seconds ago, is due: ``every`` seconds have passed (0 or
    less: always), or, where the cycle's read brought ``changed`` things to plan (a claim), ``CHECK_YIELD``
    seconds more, so the cycle that plans them does not wait for the check (the engine's plan check too)."""
    return every <= 0 or since >= every + (CHECK_YIELD if changed else 0.0)


class _Listener:
    """A PostgreSQL connection of its own that ``LISTEN``s to the change signals of its schema (through
    SQLAlchemy, so that its failures are ``DBAPIError``s like any other database error)."""

    def __init__(self, db: Database) -> None:
        timeout = {} if "connect_timeout" in db.url.query else {"connect_timeout": CONNECT_TIMEOUT_S}
        self._engine = create_engine(db.url, poolclass=NullPool, connect_args=timeout)
        self._writer = db.writer
        self._heard: list[str] = []
        try:
            self._conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            driver: Any = self._conn.connection.driver_connection
            driver.add_notify_handler(lambda note: self._heard.append(note.payload))
            self.schema = str(self._conn.exec_driver_sql("SELECT current_schema()").scalar())
            self._conn.exec_driver_sql(f"LISTEN {CHANNEL}")
        except Exception:
            self._engine.dispose()
            raise

    def poll(self) -> Changes:
        """What other writers' commits that ended before this call changed (a round trip collects them)."""
        self._conn.exec_driver_sql("SELECT 1")
        heard, self._heard = self._heard, []
        changes = Changes()
        for payload in heard:
            schema, writer, told = Changes.decode(payload)
            if schema == self.schema and writer != self._writer:
                changes.add(told)
        return changes

    def close(self) -> None:
        try:
            self._conn.close()
        finally:
            self._engine.dispose()


class LiveSnapshot:
    """The snapshot the engine plans from, kept between cycles (see the module)."""

    def __init__(
        self,
        db: Database,
        *,
        check_every: float = CHECK_EVERY,
        clock: Callable[[], float] = time.monotonic,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.db = db
        self.check_every = check_every
        self.clock = clock
        self.timer = timer  # measures what a check took
        self.drift = 0  # items a check found different, all checks together
        self.checks = 0
        self.full_reads = 0
        self.last_drift: list[str] = []
        self._lock = threading.Lock()
        self._pending = Changes(everything=True)
        self._listener: _Listener | None = None
        self._version: int | None = None
        self._checked_at = -math.inf
        self.check_seconds = 0.0  # what the last check took: its full read and the comparison
        self.changed = True  # whether the last read brought changes to plan (jobs, projects, nodes)
        self._jobs: dict[int, tuple[Job, Note]] = {}
        self._ids: dict[JobKey, int] = {}
        self._stored: dict[int, Note] = {}
        self._nodes: tuple[Node, ...] = ()
        self._projects: tuple[Project, ...] = ()
        self._departments: tuple[Department, ...] = ()
        self._job_tuple: tuple[Job, ...] | None = None
        self._watchers: list[Callable[[Changes], None]] = []
        db.subscribe(self._changed)

    def _changed(self, changes: Changes) -> None:
        with self._lock:
            if not self._pending.everything:
                self._pending.add(changes)

    def invalidate(self) -> None:
        """Read everything next time (the engine took the lead: another leader may have written)."""
        with self._lock:
            self._pending.everything = True

    def close(self) -> None:
        """Stop listening and keep nothing; the next read reads everything."""
        self.invalidate()
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.close()
            except Exception as error:  # a broken connection closes as it can
                log.debug("closing the change listener: %s", error)

    def detach(self) -> None:
        """``close()`` and stop following this process's writes (the engine is closed)."""
        self.close()
        self.db.unsubscribe(self._changed)

    def watch(self, watcher: Callable[[Changes], None]) -> None:
        """Tell ``watcher`` what the other processes changed, each time it is heard (``hear``, each read)."""
        self._watchers.append(watcher)

    def hear(self) -> None:
        """Collect the other processes' changes now: the next read applies them, and watchers are told. Run
        inside a transaction holding the write lock, it hears every writer that held the lock before."""
        foreign = self._foreign()
        with self._lock:
            self._pending.add(foreign)

    def _gather(self) -> Changes:
        """Take what changed since the last read, this process's writes and the other processes'."""
        foreign = self._foreign()
        with self._lock:
            taken = self._pending.take()
        taken.add(foreign)
        return taken

    def _foreign(self) -> Changes:
        """What the other processes changed since the last time this was asked (told to the watchers)."""
        foreign = Changes()
        try:
            if self.db.is_sqlite:
                version = self.db.data_version()
                foreign.everything = version != self._version
                self._version = version
            elif self._listener is None:
                self._listener = _Listener(self.db)
                foreign.everything = True  # what was written before it listened is unknown
            else:
                foreign = self._listener.poll()
        except Exception:
            self.close()
            raise
        if foreign:
            for watcher in list(self._watchers):
                watcher(foreign)
        return foreign

    def read(self, session: Session) -> Snapshot:
        changes = self._gather()
        self.changed = changes.foreign
        try:
            self._apply(session, changes)
            if self._check_due():
                self._check(session)
        except Exception:
            self.invalidate()  # half applied: read everything next time
            raise
        return self.snapshot()

    def _check_due(self) -> bool:
        """``check_every`` seconds since the last check, and 50 times what it took (0: at every read); a read
        that brought changes to plan (a claim) leaves a due check to a later one, ``CHECK_YIELD`` seconds at
        most, so the cycle that plans them does not wait for it (seconds at 81,920 GPUs)."""
        every = self.check_every
        spacing = every if every <= 0 else max(every, CHECK_SPACING * self.check_seconds)
        return check_due(self.clock() - self._checked_at, spacing, changed=self.changed)

    def _apply(self, session: Session, changes: Changes) -> None:
        if changes.everything:
            self._full(session)
            return
        if changes.nodes:
            self._nodes = load_nodes(session)
        if changes.projects:
            self._projects = load_projects(session)
            self._departments = load_departments(session)
        for job_id, note in changes.notes.items():  # the engine wrote them: nothing to read
            kept = self._jobs.get(job_id)
            if kept is not None and job_id not in changes.jobs:
                self._jobs[job_id] = (kept[0], note)
                self._stored[job_id] = note
        if len(changes.jobs) > max(IDS_A_QUERY, len(self._jobs) // 4):
            self._update_jobs(changes.jobs | self._jobs.keys(), load_jobs(session))  # cheaper in one pass
        elif changes.jobs:
            self._update_jobs(changes.jobs, load_jobs(session, changes.jobs))

    def _full(self, session: Session) -> None:
        self._nodes = load_nodes(session)
        self._projects = load_projects(session)
        self._departments = load_departments(session)
        self._jobs = {}
        self._ids = {}
        self._stored = {}
        self._update_jobs(set(), load_jobs(session))
        self.full_reads += 1

    def _update_jobs(self, changed: set[int], fresh: dict[int, tuple[Job, Note]]) -> None:
        jobs = self._jobs
        for job_id in changed - fresh.keys():
            gone = jobs.pop(job_id, None)
            if gone is not None:
                self._ids.pop((gone[0].project, gone[0].name), None)
                self._stored.pop(job_id, None)
        last = next(reversed(jobs), -1) if jobs else -1
        in_order = True
        for job_id, (job, note) in fresh.items():
            if job_id not in jobs and job_id < last:
                in_order = False  # a job id committed after a higher one (PostgreSQL's sequence)
            jobs[job_id] = (job, note)
            self._ids[(job.project, job.name)] = job_id
            self._stored[job_id] = note
            last = max(last, job_id)
        if not in_order:
            self._jobs = dict(sorted(jobs.items()))
        self._job_tuple = None

    def _jobs_now(self) -> tuple[Job, ...]:
        """The kept jobs as the snapshot's tuple (made again only after the jobs changed)."""
        if self._job_tuple is None:
            self._job_tuple = tuple(job for job, _ in self._jobs.values())
        return self._job_tuple

    def snapshot(self) -> Snapshot:
        state = ClusterState(
            nodes=self._nodes, projects=self._projects, jobs=self._jobs_now(), departments=self._departments
        )
        return Snapshot(state, Notes(self._ids, self._stored))

    def _check(self, session: Session) -> None:
        """Read everything in the same database snapshot; count and log what the kept one had different.

        Where the full read equals what was kept, the kept objects stay: the core knows an unchanged snapshot
        by its objects (``scheduler.core.carry``), so a check that found nothing changed makes the next cycle
        plan nothing again."""
        kept = (self._nodes, self._projects, self._departments, dict(self._jobs))
        kept_tuple = self._jobs_now()
        began = self.timer()
        self._full(session)
        self.checks += 1
        late = self._gather()  # changes that ended meanwhile may differ without being drift
        with self._lock:
            self._pending.add(late)
        if not late.everything:
            found = self._reconcile(kept, kept_tuple, late)
            self.last_drift = found
            if found:
                self.drift += len(found)
                log.warning(
                    "the snapshot kept in memory differed from the database in %d place(s): %s",
                    len(found),
                    ", ".join(found[:10]),
                )
        self.check_seconds = self.timer() - began
        self._checked_at = self.clock()

    def _reconcile(self, kept: Parts, kept_tuple: tuple[Job, ...], late: Changes) -> list[str]:
        """Keep the kept objects where the full read equals them; what differs, leaving aside what changed
        meanwhile (``late``), is drift: its places."""
        found: list[str] = []
        if self._nodes == kept[0]:
            self._nodes = kept[0]
        elif not late.nodes:
            found.append("nodes")
        if self._projects == kept[1]:
            self._projects = kept[1]
        elif not late.projects:
            found.append("projects")
        if self._departments == kept[2]:
            self._departments = kept[2]
        elif not late.projects:
            found.append("departments")
        jobs, before = self._jobs, kept[3]
        differ = set(before.keys() - jobs.keys())
        for job_id, entry in jobs.items():
            was = before.get(job_id)
            if was is not None and was == entry:
                jobs[job_id] = was
                self._stored[job_id] = was[1]
            else:
                differ.add(job_id)
        if not differ and list(jobs) == list(before):
            self._job_tuple = kept_tuple
        found.extend(f"job {job_id}" for job_id in sorted(differ - late.jobs))
        return found


Parts = tuple[tuple[Node, ...], tuple[Project, ...], tuple[Department, ...], dict[int, tuple[Job, Note]]]


def read_snapshot(live: LiveSnapshot, session: Session) -> Snapshot:
    """The snapshot to plan from, read again only where it changed (see the module)."""
    return live.read(session)
