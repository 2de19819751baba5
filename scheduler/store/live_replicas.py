"""The live replicas' statuses kept across cycles: the engine's ``observe`` reads again only what changed.

Contract: ``LiveReplicas(db, snapshot)`` keeps, for every live replica (launched: a pid, and not seen
exiting), its status and its job. ``read(session)``, inside the write transaction that records the executor's
observations (it holds the write lock), returns ``{replica id: status}`` equal to reading every live replica
from the database in that transaction. It reads again only the replicas of the jobs that changed since the
last read:

* this process's committed writes, told by the ``Database`` (``subscribe``, ``scheduler.store.changes``):
  the jobs they touched, a job's replicas included;
* the other processes' (an API process, another replica, the CLI), heard through the scheduling snapshot's
  change signals (``LiveSnapshot.hear``, ``watch``) first thing in the read: with the write lock held, every
  writer that held it before has been heard;
* the jobs of replicas still ``starting``: the write that marks them ``running`` (``lifecycle.mark_running``)
  tells nobody, as nothing the scheduling snapshot reads changed;
* everything at the first read, after ``invalidate()`` (the engine took the lead), and when a change says
  "everything" (a statement that could have touched any row, SQLite's other connections).

Every ``check_every`` seconds (0: every read) the read is followed, in the same transaction, by a full one:
what differs is drift, logged and counted (``drift``; the engine's ``tide_state_drift_total``), and the full
read is kept.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.statuses import ReplicaStatus
from scheduler.store.changes import Changes
from scheduler.store.db import Database
from scheduler.store.live import CHECK_EVERY, LiveSnapshot
from scheduler.store.mapper import IDS_A_QUERY
from scheduler.store.models import ReplicaRow
from scheduler.store.queries import LIVE

log = logging.getLogger(__name__)
# more changed jobs than this share of the jobs with live replicas (and than ``FEW``): everything, in one pass
WHOLE_SHARE = 0.25
FEW = 64

Row = tuple[int, str]  # a live replica's job id and status


class LiveReplicas:
    """Each live replica's job and status, kept between cycles (see the module)."""

    def __init__(
        self,
        db: Database,
        snapshot: LiveSnapshot,
        *,
        check_every: float = CHECK_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.db = db
        self.snapshot = snapshot
        self.check_every = check_every
        self.clock = clock
        self.checks = 0
        self.drift = 0  # replicas a check found different, all checks together
        self.full_reads = 0
        self._lock = threading.Lock()
        self._everything = True
        self._dirty: set[int] = set()  # jobs whose live replicas are read again
        self._rows: dict[int, Row] = {}  # replica id -> (job id, status)
        self._by_job: dict[int, set[int]] = {}
        self._status: dict[int, str] = {}  # what ``read`` returns, kept in step with ``_rows``
        self._starting: set[int] = set()  # replicas whose status is ``starting``
        self._checked_at = -math.inf
        db.subscribe(self._changed)
        snapshot.watch(self._changed)

    def _changed(self, changes: Changes) -> None:
        with self._lock:
            if changes.everything:
                self._everything, self._dirty = True, set()
            elif not self._everything:  # all is read again anyway (a standby gathers nothing meanwhile)
                self._dirty |= changes.jobs

    def invalidate(self) -> None:
        """Read every live replica next time (the engine took the lead: another leader may have written)."""
        with self._lock:
            self._everything = True

    def detach(self) -> None:
        """Stop following this process's writes (the engine is closed)."""
        self.db.unsubscribe(self._changed)

    def read(self, session: Session) -> Mapping[int, str]:
        """Every live replica's status, by id (the caller must not change it; see the module)."""
        session.flush()  # what the session holds counts, as in the ORM's own queries
        self.snapshot.hear()
        with self._lock:
            everything, dirty = self._everything, self._dirty
            self._everything, self._dirty = False, set()
        try:
            dirty |= {self._rows[r][0] for r in self._starting}
            if everything or len(dirty) > max(FEW, WHOLE_SHARE * len(self._by_job)):
                self._full(session)
                if everything:  # nothing kept to compare: as good as a check
                    self._checked_at = self.clock()
            elif dirty:
                self._again(session, dirty)
            if self.check_every <= 0 or self.clock() - self._checked_at >= self.check_every:
                self._check(session)
        except Exception:
            self.invalidate()  # half read: read everything next time
            raise
        return self._status

    def _full(self, session: Session) -> None:
        self.full_reads += 1
        self._rows, self._by_job, self._status, self._starting = {}, {}, {}, set()
        self._put(_live_rows(session, None))

    def _again(self, session: Session, jobs: set[int]) -> None:
        for job_id in jobs:
            for replica_id in self._by_job.pop(job_id, ()):
                del self._rows[replica_id], self._status[replica_id]
                self._starting.discard(replica_id)
        ordered = sorted(jobs)
        for at in range(0, len(ordered), IDS_A_QUERY):
            self._put(_live_rows(session, ordered[at : at + IDS_A_QUERY]))

    def _put(self, rows: Iterable[tuple[int, int, str]]) -> None:
        for replica_id, job_id, status in rows:
            self._rows[replica_id] = (job_id, status)
            self._status[replica_id] = status
            self._by_job.setdefault(job_id, set()).add(replica_id)
            if status == ReplicaStatus.STARTING:
                self._starting.add(replica_id)

    def _check(self, session: Session) -> None:
        """Read every live replica (same transaction, the write lock held); count and log what differed."""
        kept = self._rows
        self._full(session)
        self._checked_at = self.clock()
        self.checks += 1
        found = sorted(r for r in kept.keys() | self._rows.keys() if kept.get(r) != self._rows.get(r))
        if found:
            self.drift += len(found)
            log.warning(
                "the live replicas kept in memory differed from the database in %d place(s): replicas %s",
                len(found),
                ", ".join(map(str, found[:10])),
            )


def _live_rows(session: Session, jobs: list[int] | None) -> list[tuple[int, int, str]]:
    """(id, job id, status) of the live replicas, of ``jobs`` only if given: read on the session's connection,
    past the ORM's result processing (thousands of rows at scale)."""
    query = select(ReplicaRow.id, ReplicaRow.job_id, ReplicaRow.status).where(*LIVE)
    if jobs is not None:
        query = query.where(ReplicaRow.job_id.in_(jobs))
    return [(i, j, s) for i, j, s in session.connection().execute(query).all()]
