"""What a write transaction changed of the scheduling snapshot, told to whoever keeps that snapshot in memory.

Contract: ``Database.write()`` and ``insert()`` attach a ``Tracker`` to their session. It records what each
write touched of the five tables the snapshot is read from (``scheduler.store.mapper``):

* a job, or a replica of it (ORM objects added, changed or deleted; an ORM bulk UPDATE by primary key of
  jobs): that job's id;
* a project or a department added or changed: ``projects`` (both small tables are read again); one deleted:
  ``everything``;
* a node: ``nodes``;
* jobs' stored notes written by the engine (``accounted(session, notes=...)``): the notes themselves, told in
  process only (the engine that writes them keeps the snapshot), so nobody reads those jobs again;
* anything else written to those tables (an UPDATE or DELETE with a WHERE clause, a statement outside the
  ORM, a textual statement that is not a SELECT): ``everything``, so nothing written can go unseen.

When the transaction commits, its ``Changes`` go to the ``Database``'s subscribers in this process (the
engine's ``scheduler.store.live.LiveSnapshot``), and on PostgreSQL a ``NOTIFY`` on ``CHANNEL`` carries them,
delivered with the commit (never for a rollback), to the other processes: an API process, a second
``tide serve`` replica, the CLI. Its payload is ``"<schema> <writer> <flags> <ids>"``; a listener skips its
own writer's (it saw them in process) and other schemas'. A payload that would be too long says
``everything``; one with notes only is not sent. Other tables (events, tokens, agent reports) never signal
anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Delete, Insert, TextClause, Update, event
from sqlalchemy.engine import Connection
from sqlalchemy.orm import ORMExecuteState, Session

from scheduler.store.models import DepartmentRow, JobRow, NodeRow, ProjectRow, ReplicaRow

CHANNEL = "tide_changes"
MAX_PAYLOAD = 7000  # PostgreSQL refuses a NOTIFY payload of 8,000 bytes or more
SNAPSHOT_TABLES = frozenset(t.__tablename__ for t in (JobRow, ReplicaRow, ProjectRow, DepartmentRow, NodeRow))
_TRACKER_KEY = "tide_change_tracker"


@dataclass(slots=True)
class Changes:
    """What changed since the snapshot was read: jobs by id, the project tables, the nodes, or anything; and
    ``notes``, jobs whose stored note (reason, place in line) and nothing else was written, with the note
    (told in process only: the engine that writes them is the one that keeps the snapshot)."""

    jobs: set[int] = field(default_factory=set)
    projects: bool = False
    nodes: bool = False
    everything: bool = False
    notes: dict[int, tuple[str | None, int | None]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.jobs) or self.projects or self.nodes or self.everything or bool(self.notes)

    @property
    def foreign(self) -> bool:
        """Whether other processes must hear of it: it changed more than the notes (which only the engine
        that wrote them keeps)."""
        return bool(self.jobs) or self.projects or self.nodes or self.everything

    def add(self, other: Changes) -> None:
        self.jobs |= other.jobs
        self.projects |= other.projects
        self.nodes |= other.nodes
        self.everything |= other.everything
        self.notes |= other.notes

    def take(self) -> Changes:
        """A copy of what was gathered; this one starts empty again."""
        taken = Changes(self.jobs, self.projects, self.nodes, self.everything, self.notes)
        self.jobs, self.projects, self.nodes, self.everything, self.notes = set(), False, False, False, {}
        return taken

    def encode(self, writer: str) -> str:
        """``"<writer> <flags> <ids>"``: a ``NOTIFY`` payload once the schema is put in front."""
        flags = "".join(
            f for f, on in (("*", self.everything), ("p", self.projects), ("n", self.nodes)) if on
        )
        text = f"{writer} {flags or '-'} {','.join(map(str, sorted(self.jobs)))}"
        return text if len(text.encode()) <= MAX_PAYLOAD else f"{writer} * "

    @staticmethod
    def decode(payload: str) -> tuple[str, str, Changes]:
        """``(schema, writer, changes)`` of a payload; one that cannot be read means ``everything``."""
        parts = payload.split(" ")
        if len(parts) != 4:
            return "", "", Changes(everything=True)
        schema, writer, flags, ids = parts
        try:
            jobs = {int(i) for i in ids.split(",") if i}
        except ValueError:
            return schema, writer, Changes(everything=True)
        return schema, writer, Changes(jobs, "p" in flags, "n" in flags, "*" in flags)


def job_signal_prefix(writer: str) -> str:
    """The payload (``Changes.encode``) of a signal that one job changed, but the job's id at its end."""
    return f"{writer} - "


def _touched(objects: Iterable[Any], changes: Changes, *, deleted: bool) -> None:
    for obj in objects:
        if isinstance(obj, JobRow):
            changes.jobs.add(obj.id)  # set by the flush, for a new row too
        elif isinstance(obj, ReplicaRow):
            changes.jobs.add(obj.job_id)
        elif isinstance(obj, ProjectRow | DepartmentRow):
            changes.projects = True
            changes.everything |= deleted  # their jobs went with them
        elif isinstance(obj, NodeRow):
            changes.nodes = True


class Tracker:
    """Gathers what one session's transaction changed (see the module); ``changes`` once it committed."""

    def __init__(self, session: Session) -> None:
        self.changes = Changes()
        self.accounted = 0  # > 0 inside ``accounted``: what its statements change was told
        self._flushing = 0  # > 0 during a flush, whose objects ``_after_flush`` records
        self._infos: list[dict[Any, Any]] = []  # the ``info`` of each connection it is attached to
        session.info[_TRACKER_KEY] = (
            self  # the session factory's listeners find it there (``track_sessions``)
        )

    def _begun(self, _session: Session, _transaction: Any, connection: Connection) -> None:
        connection.info[_TRACKER_KEY] = self
        self._infos.append(connection.info)

    def release(self, session: Session) -> None:
        """Stop tracking: the session's connection goes back to its pool (and to other sessions)."""
        if session.info.get(_TRACKER_KEY) is self:
            del session.info[_TRACKER_KEY]
        for info in self._infos:
            if info.get(_TRACKER_KEY) is self:
                del info[_TRACKER_KEY]
        self._infos.clear()

    def _before_flush(self, _session: Session, _context: Any, _instances: Any) -> None:
        self._flushing += 1

    def _rolled_back(self, _session: Session, _transaction: Any) -> None:
        self._flushing = 0  # a flush that failed never reached ``_after_flush``

    def _after_flush(self, session: Session, _context: Any) -> None:
        self._flushing = max(0, self._flushing - 1)
        _touched(session.new, self.changes, deleted=False)
        _touched(session.dirty, self.changes, deleted=False)
        _touched(session.deleted, self.changes, deleted=True)

    def _orm_execute(self, state: ORMExecuteState) -> None:
        """An ORM INSERT, UPDATE or DELETE statement (its SQL then runs annotated with the ORM entity)."""
        statement = state.statement
        if self.accounted or state.is_select or not isinstance(statement, Insert | Update | Delete):
            return
        table = getattr(statement.table, "name", None)
        if table not in SNAPSHOT_TABLES:
            return
        rows = state.parameters if isinstance(state.parameters, list) else None
        if table == JobRow.__tablename__ and isinstance(statement, Update) and rows:
            ids = [row.get("id") for row in rows]
            if all(isinstance(i, int) for i in ids):  # an ORM bulk UPDATE by primary key
                self.changes.jobs.update(i for i in ids if isinstance(i, int))
            else:
                self.changes.everything = True
        elif table in (ProjectRow.__tablename__, DepartmentRow.__tablename__) and not isinstance(
            statement, Delete
        ):
            self.changes.projects = True
        elif table == NodeRow.__tablename__:
            self.changes.nodes = True
        else:
            self.changes.everything = True

    def statement(self, clause: Any) -> None:
        """A statement about to run in this transaction: one not accounted for that may write a snapshot
        table means ``everything``."""
        if self.accounted or self._flushing or getattr(clause, "_annotations", None):  # recorded already
            return
        if isinstance(clause, TextClause):
            self.raw(clause.text)
        elif (
            isinstance(clause, Insert | Update | Delete)
            and getattr(clause.table, "name", None) in SNAPSHOT_TABLES
        ):
            self.changes.everything = True

    def raw(self, sql: str) -> None:
        """SQL text run as it is: anything but a read or a transaction's control means ``everything``."""
        if self.accounted or self._flushing:
            return
        words = sql.lstrip().split(None, 1)
        if words and words[0].upper() not in _READS:
            self.changes.everything = True


_READS = frozenset({"SELECT", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "PRAGMA", "SHOW", "SET"})


@contextmanager
def accounted(
    session: Session,
    *,
    jobs: Iterable[int] = (),
    notes: dict[int, tuple[str | None, int | None]] | None = None,
) -> Iterator[None]:
    """Statements run in this block change exactly these jobs (no others, nothing else the snapshot reads;
    none: only columns it does not read), or, for ``notes``, only these jobs' stored notes, to these values
    (where the job is still active)."""
    tracker = _tracker_of(session)
    if tracker is None:
        yield
        return
    tracker.changes.jobs.update(jobs)
    tracker.changes.notes.update(notes or {})
    tracker.accounted += 1
    try:
        yield
    finally:
        tracker.accounted -= 1


def changes_of(session: Session) -> Changes | None:
    """What the write transaction of ``session`` (``Database.write``/``insert``) changed so far, and once it
    ended, all it changed (the same object, still filled after the commit); None for another session."""
    tracker = session.info.get(_TRACKER_KEY)
    return tracker.changes if isinstance(tracker, Tracker) else None


def _tracker_of(session: Session) -> Tracker | None:
    tracker = session.connection().info.get(_TRACKER_KEY)
    return tracker if isinstance(tracker, Tracker) else None


def track_sessions(factory: Any) -> None:
    """Have the sessions ``factory`` makes tell their ``Tracker`` (if one is attached) what they do."""

    def tracker(session: Session) -> Tracker | None:
        found = session.info.get(_TRACKER_KEY)
        return found if isinstance(found, Tracker) else None

    @event.listens_for(factory, "before_flush")
    def _before_flush(session: Session, context: Any, instances: Any) -> None:
        if (t := tracker(session)) is not None:
            t._before_flush(session, context, instances)

    @event.listens_for(factory, "after_flush")
    def _after_flush(session: Session, context: Any) -> None:
        if (t := tracker(session)) is not None:
            t._after_flush(session, context)

    @event.listens_for(factory, "do_orm_execute")
    def _orm_execute(state: ORMExecuteState) -> None:
        if (t := tracker(state.session)) is not None:
            t._orm_execute(state)

    @event.listens_for(factory, "after_begin")
    def _begun(session: Session, transaction: Any, connection: Connection) -> None:
        if (t := tracker(session)) is not None:
            t._begun(session, transaction, connection)

    @event.listens_for(factory, "after_soft_rollback")
    def _rolled_back(session: Session, transaction: Any) -> None:
        if (t := tracker(session)) is not None:
            t._rolled_back(session, transaction)


def watch_statements(engine: Any) -> None:
    """Show every statement run on ``engine``'s connections to the tracker of the transaction running it."""

    @event.listens_for(engine, "before_execute")
    def _before(conn: Connection, clause: Any, _multiparams: Any, _params: Any, _options: Any) -> None:
        tracker = conn.info.get(_TRACKER_KEY)
        if tracker is not None:
            tracker.statement(clause)

    @event.listens_for(engine, "before_cursor_execute")
    def _raw(conn: Connection, _cursor: Any, sql: str, _parameters: Any, context: Any, _many: bool) -> None:
        tracker = conn.info.get(_TRACKER_KEY)
        if tracker is not None and getattr(context, "compiled", None) is None:
            tracker.raw(sql)  # exec_driver_sql: never seen by before_execute
