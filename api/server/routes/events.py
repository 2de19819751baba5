"""``/events``: the scheduler's decisions (start, grow, shrink, evict, finish, fail, cancel) with reasons.

Contract: newest last; ``since`` (ISO 8601 or Unix seconds) keeps events strictly after that time,
``after_id`` those after an event id (for followers that must not miss one); ``limit`` keeps the newest N.
Served from ``api.server.cache`` while nothing changed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import TypeAdapter, WithJsonSchema
from sqlalchemy import Select, select

from api.server import convert, schemas
from api.server.cache import cached_response
from api.server.deps import Caller, Services, Svc
from scheduler.store.models import EventRow

router = APIRouter(tags=["events"])
# Times go out with microsecond resolution: an event within half a microsecond of `since` is not after it.
SINCE_RESOLUTION = 5e-7
_EVENT_LIST = TypeAdapter(list[schemas.EventPublic])


@router.get("/events", response_model=list[schemas.EventPublic])
async def list_events(
    *,
    svc: Svc,
    caller: Caller,
    since: Annotated[
        datetime | None,
        WithJsonSchema({"anyOf": [{"type": "string", "format": "date-time"}, {"type": "number"}]}),
    ] = None,
    after_id: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    project: Annotated[str | None, Query(max_length=63)] = None,
    job: Annotated[str | None, Query(max_length=63)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 500,
) -> Response:
    query = select(EventRow).order_by(EventRow.id.desc()).limit(limit)
    if since is not None:
        query = query.where(EventRow.time > since.timestamp() + SINCE_RESOLUTION)
    if after_id is not None:
        query = query.where(EventRow.id > after_id)
    if project is not None:
        query = query.where(EventRow.project == project)
    if job is not None:
        query = query.where(EventRow.job == job)
    key = f"events?since={since}&after_id={after_id}&project={project}&job={job}&limit={limit}"
    return cached_response(await svc.views.get(key, lambda: _events(svc, query)))


def _events(svc: Services, query: Select[EventRow]) -> bytes:
    with svc.db.read() as session:
        rows = session.scalars(query).all()
    return _EVENT_LIST.dump_json([convert.event_public(r) for r in reversed(rows)])
