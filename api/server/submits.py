"""Submits that arrive together go to PostgreSQL together: one statement, one commit, one signal, one wake.

Contract: ``SubmitBatcher(db, on_inserted).insert(project, values)`` (awaited on the API's event loop)
inserts one job row as ``scheduler.store.submit.insert_job`` would and returns its id, or None when it was
not written because its project does not exist or its name is taken (the caller decides under the writers'
lock, as after that function). While one statement runs in a worker thread, the submits that come meanwhile
wait, and the next statement takes all of them (at most ``MAX_ROWS``; rows that give other columns go in a
statement of their own): a group commit. Each submit is answered once its own row is committed, never
sooner. A statement that fails on a taken name or a project deleted meanwhile writes none of its rows, so
each of them is tried again alone; any other error (the database unreachable) is each of its submits' error.
``on_inserted`` (the engine's wake) is called once per statement that wrote something, after it committed.
One submit at a time, this is the same statement and round trip as before, plus a hop back to the event loop.

Why: at hundreds of submits a second each statement's round trip, the thread hand-off around it, its commit
and its signal were most of what a submit cost besides HTTP; shared, they cost a fraction each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import IntegrityError

from scheduler.store import submit
from scheduler.store.db import Database

MAX_ROWS = 100  # the most rows one statement inserts

Row = tuple[str, Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class _Waiting:
    """A submit waiting for its statement: its row, the columns it gives, and where its answer goes."""

    row: Row
    columns: tuple[str, ...]
    done: asyncio.Future[int | None]


class SubmitBatcher:
    def __init__(self, db: Database, on_inserted: Callable[[], None]) -> None:
        self.db = db
        self.on_inserted = on_inserted
        self._waiting: list[_Waiting] = []
        self._drainer: asyncio.Task[None] | None = None
        self.statements = 0  # statements run so far (the tests count them)

    async def insert(self, project: str, values: Mapping[str, Any]) -> int | None:
        """Insert the job once the statement before it is done (see the module); its id, or None."""
        done: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting((project, values), submit.given_columns(values), done))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain(), name="tide-submits")
        return await done

    async def _drain(self) -> None:
        while self._waiting:
            columns = self._waiting[0].columns
            batch: list[_Waiting] = []
            later: list[_Waiting] = []
            for waiting in self._waiting:
                (batch if waiting.columns == columns and len(batch) < MAX_ROWS else later).append(waiting)
            self._waiting = later
            try:
                ids = await asyncio.to_thread(self._write, [w.row for w in batch])
            except Exception as error:  # each submit answers with it (a 503 for an outage)
                ids = [error] * len(batch)
            for waiting, outcome in zip(batch, ids, strict=True):
                done = waiting.done
                if done.done():  # its request was cancelled (the client went away)
                    continue
                if isinstance(outcome, Exception):
                    done.set_exception(outcome)
                else:
                    done.set_result(outcome)

    def _write(self, rows: Sequence[Row]) -> list[int | Exception | None]:
        """The rows in one statement; where it fails on a name or a project, each alone, each with its own
        outcome (worker thread)."""
        ids: list[int | Exception | None]
        try:
            self.statements += 1
            ids = list(submit.insert_jobs(self.db, rows))
        except IntegrityError:
            if len(rows) == 1:
                return [None]
            ids = []
            for row in rows:
                try:
                    self.statements += 1
                    ids.append(submit.insert_job(self.db, *row))
                except IntegrityError:
                    ids.append(None)
                except Exception as error:  # the database went away meanwhile: this one's error
                    ids.append(error)
        if any(isinstance(i, int) for i in ids):
            self.on_inserted()
        return ids
