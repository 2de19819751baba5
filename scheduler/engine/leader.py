"""Leader election: exactly one ``tide serve`` per database schedules; the others stand by.

Contract: ``holds()`` returns True while this process is the leader, trying to become it when nobody is.
PostgreSQL: a session-level advisory lock held on a dedicated connection, keyed by the schema, so the lock
goes with the connection when the leader dies and a standby's next ``holds()`` takes over. If that
connection breaks, ``holds()`` turns False at once (the lock may already be someone else's). SQLite: an
exclusive ``flock`` on a file beside the database, released by the kernel when the process dies.
"""

from __future__ import annotations

import fcntl
import logging
import os
from contextlib import suppress
from pathlib import Path
from typing import Protocol

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from scheduler.store.db import Database

log = logging.getLogger(__name__)

LOCK_SQL = "SELECT pg_try_advisory_lock(hashtext('tide-leader:' || current_schema()))"


class Leadership(Protocol):
    def holds(self) -> bool: ...

    def release(self) -> None: ...


class FileLeadership:
    """Leader while holding ``flock`` on ``path`` (SQLite: one scheduler per database file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def holds(self) -> bool:
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class AdvisoryLockLeadership:
    """Leader while holding a PostgreSQL advisory lock on a connection of our own."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._conn: Connection | None = None

    def holds(self) -> bool:
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT 1"))
                return True
            except DBAPIError:
                log.warning("lost the leader connection to the database; standing by")
                self._drop()
                return False
        try:
            conn = self.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            if conn.execute(text(LOCK_SQL)).scalar():
                self._conn = conn
                return True
            conn.close()
        except DBAPIError as error:
            log.warning("cannot reach the database to elect a leader: %s", error)
        return False

    def release(self) -> None:
        self._drop()

    def _drop(self) -> None:
        if self._conn is not None:
            with suppress(DBAPIError):
                self._conn.invalidate()  # really close it: a pooled connection would keep the lock
                self._conn.close()
            self._conn = None


def leadership_for(db: Database) -> Leadership:
    path = db.sqlite_path
    if path is not None:
        return FileLeadership(path.with_name(path.name + ".leader"))
    return AdvisoryLockLeadership(db)
