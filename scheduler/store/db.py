"""Engines and sessions for SQLite (embedded default) and PostgreSQL, created on demand, never at import.

Contract: ``Database(url, pool=N)`` opens a pool of at most N PostgreSQL connections (``POOL_CONNECTIONS``); ``read()`` and ``write()`` are session context managers; a write
commits on success and rolls back on error. Write transactions run one at a time, so a scheduling cycle
never interleaves with an API change: on SQLite they begin with ``BEGIN IMMEDIATE`` on their own engine (WAL
mode lets readers run beside them), on PostgreSQL they take a transaction-level advisory lock first (keyed
by schema); reads never wait for writers and see one snapshot (a SQLite read transaction; REPEATABLE READ
on PostgreSQL). ``insert()`` is a write transaction that only adds rows: on PostgreSQL it does not wait for
the writers' lock (a submit never queues behind a scheduling cycle's write), so it must never update or delete
a row; what it could race (the same name inserted twice, a row it references deleted) is refused by the
database's constraints as an ``IntegrityError``, and the caller retries under the lock. On SQLite it is
``write()``. PostgreSQL connections idle ``PING_AFTER_IDLE_S`` or longer are checked before use (one broken
by a database restart is replaced) and give up connecting after ``CONNECT_TIMEOUT_S``.
``autocommit()`` (PostgreSQL) is a connection whose statements commit one by one, for a write
that is one statement and signals its own changes (a submit's insert: ``scheduler.store.submit``).
``sqlite_url(data_dir)`` names the default database. ``WriteWatch(session)`` tells whether a session wrote.

Every write and insert tells what it changed of the scheduling snapshot (``scheduler.store.changes``): once
it committed, to the functions given to ``subscribe`` in this process, and on PostgreSQL, with the commit,
to every process listening (``NOTIFY``, as ``writer``, a name of this ``Database``). On SQLite the writes of
one ``Database`` go through one connection, so ``data_version()`` (read on it) moves only when another
process or ``Database`` committed a write to the file.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from uuid import uuid4

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import ORMExecuteState, Session, sessionmaker

from scheduler.store.changes import CHANNEL, Changes, Tracker, track_sessions, watch_statements

SQLITE_BUSY_TIMEOUT_MS = 30_000
CONNECT_TIMEOUT_S = 5
# PostgreSQL connections a Database opens at most (its pool). ``tide serve`` runs two processes, each with a
# Database, so a pod opens at most twice this: 2 pods, 40, inside PostgreSQL's default max_connections (100).
POOL_CONNECTIONS = 10
# A pooled PostgreSQL connection idle this long is checked (a round trip) before it is used again; one used
# more recently is not: under load every request would otherwise pay a round trip for the check.
PING_AFTER_IDLE_S = 1.0
# Writers are serialised on PostgreSQL as SQLite does it, so a cycle never races an API write.
WRITE_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('tide-write:' || current_schema()))"


def sqlite_url(data_dir: Path) -> str:
    """The embedded database in ``data_dir`` (created if missing)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    return f"sqlite+pysqlite:///{(data_dir / 'tide.db').resolve()}"


def normalize_url(url: str) -> URL:
    """Accept ``postgresql://`` and ``postgres://`` as psycopg 3 URLs; leave others as given."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url.removeprefix("postgres://")
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _set_wal(cursor: Any) -> None:
    """``PRAGMA journal_mode=WAL``, retried while another connection holds the file: switching the journal
    mode of a new database answers "database is locked" at once, without SQLite's busy wait, when several
    processes (the API's and the engine's, or services starting together) open it at the same moment."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _sqlite_engine(url: URL, *, immediate: bool) -> Engine:
    # The writers' engine keeps one connection: writes run one at a time anyway (BEGIN IMMEDIATE), and
    # ``PRAGMA data_version`` on it then moves only for other processes' writes.
    pool = (
        {"pool_size": 1, "max_overflow": 0, "pool_timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
        if immediate
        else {}
    )
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **pool)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (pysqlite's own is broken)
        cursor = dbapi_conn.cursor()
        _set_wal(cursor)
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _ping_when_idle(engine: Engine) -> None:
    """Check a pooled connection before use when it sat idle ``PING_AFTER_IDLE_S`` or longer (SQLAlchemy's
    ``pool_pre_ping`` checks every time): one a database restart broke is replaced, not used. A restart
    takes longer than that, so a connection used since is one the restart did not break; a use that fails
    anyway is a disconnect, and SQLAlchemy replaces the pool's connections."""

    def _idle_from_now(dbapi_connection: Any, record: Any) -> None:  # made, or given back to the pool
        record.info["tide_idle_since"] = time.monotonic()

    event.listen(engine, "connect", _idle_from_now)
    event.listen(engine, "checkin", _idle_from_now)

    @event.listens_for(engine, "checkout")
    def _taken(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        if time.monotonic() - record.info.get("tide_idle_since", -math.inf) < PING_AFTER_IDLE_S:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as error:
            raise DisconnectionError(f"the pooled connection is broken: {error}") from error
        if not alive:
            raise DisconnectionError("the pooled connection is broken")


class Database:
    """A database reached by URL; cheap to keep, ``dispose()`` closes its pools."""

    def __init__(self, url: str, *, pool: int = POOL_CONNECTIONS) -> None:
        self.url = normalize_url(url)
        if self.is_sqlite:
            self.engine = _sqlite_engine(self.url, immediate=False)
            self.write_engine = _sqlite_engine(self.url, immediate=True)
        else:
            # a database that cannot be reached fails a connection within seconds (then 503), never hangs
            timeout = {} if "connect_timeout" in self.url.query else {"connect_timeout": CONNECT_TIMEOUT_S}
            self.engine = create_engine(self.url, pool_size=pool, max_overflow=0, connect_args=timeout)
            _ping_when_idle(self.engine)
            self.write_engine = self.engine
        self._autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        watch_statements(self.write_engine)
        self.writer = uuid4().hex[:12]  # this Database's name in its change signals
        self._subscribers: list[Callable[[Changes], None]] = []
        # A read is one snapshot: a cycle's commit never shows half in a read of several statements (a
        # project's fair share from before it, its GPUs from after). Read-only, so it never fails to serialise.
        reader = (
            self.engine
            if self.is_sqlite
            else self.engine.execution_options(isolation_level="REPEATABLE READ")
        )
        self._read = sessionmaker(reader, expire_on_commit=False)
        self._write = sessionmaker(self.write_engine, expire_on_commit=False)
        track_sessions(self._write)

    @property
    def is_sqlite(self) -> bool:
        return self.url.get_backend_name() == "sqlite"

    @property
    def sqlite_path(self) -> Path | None:
        return Path(self.url.database) if self.is_sqlite and self.url.database else None

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reads; closed (its transaction ended, objects kept loaded) at the end."""
        with self._read() as session:
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session that commits when the block succeeds; one writer at a time, on both backends."""
        with self._tracked(lock=not self.is_sqlite) as session:
            yield session

    @contextmanager
    def insert(self) -> Iterator[Session]:
        """A write transaction that only inserts rows, beside the writers on PostgreSQL (see the module)."""
        with self._tracked(lock=False) as session:  # SQLite: BEGIN IMMEDIATE makes it a write()
            yield session

    @contextmanager
    def _tracked(self, *, lock: bool) -> Iterator[Session]:
        """A write transaction whose changes are told once it committed (see the module)."""
        with self._write() as session:
            tracker = Tracker(session)
            try:
                with session.begin():
                    if lock:
                        session.execute(text(WRITE_LOCK_SQL))
                    yield session
                    if not self.is_sqlite:
                        session.flush()  # the payload must name what the commit's own flush writes
                        self._signal(session, tracker.changes)
            finally:
                tracker.release(session)
            if tracker.changes:
                self.told(tracker.changes)

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """PostgreSQL: a connection on which each statement commits on its own (no BEGIN, no COMMIT round
        trip). What such a statement changes of the snapshot is the caller's to signal and tell (``told``):
        no ``Tracker`` watches it (``scheduler.store.submit``)."""
        if self.is_sqlite:
            raise RuntimeError("autocommit statements are for PostgreSQL; SQLite writes go through write()")
        with self._autocommit.connect() as connection:
            yield connection

    def told(self, changes: Changes) -> None:
        """Tell this process's subscribers what a committed write changed."""
        for subscriber in list(self._subscribers):
            subscriber(changes)

    def _signal(self, session: Session, changes: Changes) -> None:
        """``NOTIFY`` the other processes of what this transaction changed, and only when it changed something
        they keep. Sent on the session's connection, not through the session: the signal is no write, and
        ``WriteWatch`` (which sees the session's statements) must not take it for one, or every transaction,
        even one that changed nothing, would count as a write."""
        if changes.foreign:
            session.connection().execute(
                text("SELECT pg_notify(:channel, current_schema() || ' ' || :payload)"),
                {"channel": CHANNEL, "payload": changes.encode(self.writer)},
            )

    def subscribe(self, subscriber: Callable[[Changes], None]) -> None:
        """Call ``subscriber`` with what each committed write of this ``Database`` changed (in its thread)."""
        self._subscribers.append(subscriber)

    def unsubscribe(self, subscriber: Callable[[Changes], None]) -> None:
        with suppress(ValueError):
            self._subscribers.remove(subscriber)

    def data_version(self) -> int:
        """SQLite: a number that moves when another connection (process, ``Database``) committed a write."""
        connection = self.write_engine.raw_connection()
        try:
            cursor = connection.cursor()
            cursor.execute("PRAGMA data_version")
            row: Any = cursor.fetchone()
            cursor.close()
            return int(row[0])
        finally:
            connection.close()

    def dispose(self) -> None:
        self.engine.dispose()
        if self.write_engine is not self.engine:
            self.write_engine.dispose()


class WriteWatch:
    """Whether a session wrote anything since ``WriteWatch(session)``: a flush, or an ORM DML statement.

    A transaction that wrote nothing leaves readers' caches valid (``scheduler.engine.loop``)."""

    def __init__(self, session: Session) -> None:
        self.wrote = False
        event.listen(session, "after_flush", self._flushed)
        event.listen(session, "do_orm_execute", self._executed)

    def _flushed(self, _session: Session, _context: Any) -> None:
        self.wrote = True

    def _executed(self, state: ORMExecuteState) -> None:
        if not state.is_select:
            self.wrote = True
