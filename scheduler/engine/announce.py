"""Tide's decisions passed on to an executor that shows them where jobs run (Kubernetes Events).

Contract: ``Announcer(executor)`` does nothing unless the executor declares ``announcements``. ``start(session)``
marks the event log's end when the engine takes the lead (history is not replayed); ``after_cycle(session)``
gives the executor each event written since, oldest first, at most ``limit`` per cycle (the rest the next
cycle), and moves the mark. It runs after the cycle's launches, so a start's pods exist to carry it.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from scheduler.executors.base import Announcement, Executor
from scheduler.store.models import EventRow


class Announcer:
    def __init__(self, executor: Executor, limit: int = 200) -> None:
        self.executor = executor
        self.limit = limit
        self.mark: int | None = None

    @property
    def active(self) -> bool:
        return self.executor.capabilities.announcements

    def start(self, session: Session) -> None:
        if self.active:
            self.mark = int(session.scalar(select(func.max(EventRow.id))) or 0)

    def after_cycle(self, session: Session) -> None:
        if not self.active or self.mark is None:
            return
        rows = session.scalars(
            select(EventRow).where(EventRow.id > self.mark).order_by(EventRow.id).limit(self.limit)
        ).all()
        for row in rows:
            self.executor.announce(
                Announcement(row.kind, row.project, row.job, tuple(row.replicas or ()), row.reason, row.cause)
            )
            self.mark = row.id
