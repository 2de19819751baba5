"""Opaque page cursors for listings paged on the server (``GET /jobs``).

Contract: ``encode(listing, key)`` turns where a page ended (the sort key of its last row,
``scheduler.store.queries.PageKey``) and what was listed (the order and filters, any JSON-able value) into a
URL-safe string; ``decode(cursor, listing, shape)`` gives the key back (its values of the types ``shape``
names, one each), or raises ``BadCursor`` saying what to fix
when the string is not one this service gave out, or was given out for another listing (other filters or
order: its key would start the page at a place that listing never had). Clients must treat a cursor as
opaque: its form may change between releases (a cursor from an older release is refused with a 422 that
says to start again from the first page).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from scheduler.store.queries import PageKey

VERSION = 1
MAX_LENGTH = 2048


class BadCursor(ValueError):
    """What is wrong with a cursor, in words for the client."""


def encode(listing: Any, key: PageKey) -> str:
    raw = json.dumps([VERSION, listing, list(key)], separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode(cursor: str, listing: Any, shape: tuple[type, ...]) -> PageKey:
    if len(cursor) > MAX_LENGTH:
        raise BadCursor(f"is {len(cursor)} characters long, not a cursor this service gave out")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        version, given, key = json.loads(raw.decode())
    except (binascii.Error, UnicodeDecodeError, ValueError, TypeError):
        raise BadCursor(
            "is not a cursor this service gave out: pass back the X-Next-Cursor of the previous page as it "
            "came, or leave cursor out for the first page"
        ) from None
    if version != VERSION:
        raise BadCursor("comes from another release of the service: leave cursor out to start again")
    if given != json.loads(json.dumps(listing)):
        raise BadCursor(
            "was given out for a listing with other filters or another order: ask for the next page with the "
            "same project, status, waiting and order as the page it came with, or leave cursor out to start again"
        )
    if not isinstance(key, list) or len(key) != len(shape) or not all(map(_fits, key, shape)):
        raise BadCursor("is not a cursor this service gave out: leave cursor out for the first page")
    return tuple(key)


def _fits(value: object, kind: type) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int | float) if kind is float else isinstance(value, kind)
