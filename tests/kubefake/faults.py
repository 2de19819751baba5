"""The fake API server's request log entries and injected faults.

Contract: ``Request`` is one request as received (the body copied before the server touched it);
``Fault`` answers the next ``times`` matching requests with ``code`` (a ``Status`` with ``reason`` and
``message``, as the real API server answers: e.g. 403 ``Forbidden`` with an admission's or a ResourceQuota's
words), or carries them out and answers late. ``named`` limits it to requests whose body's object has a
matching name (one pod among many creates).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kubefake.store import Obj


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Obj | None

    @property
    def watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")


@dataclass
class Fault:
    """The next ``times`` requests matching ``method`` and ``path`` (a regex) get ``code``, or, with
    ``code`` None, are carried out and answered only after ``delay`` seconds (a client timeout)."""

    method: str
    path: str
    code: int | None
    times: int = 1
    delay: float = 0.0
    watch: bool | None = None
    retry_after: int | None = None
    reason: str = "InternalError"
    message: str | None = None  # None: "injected by the test: CODE"
    named: str | None = None  # a regex on the request body's metadata.name
    hits: int = 0

    def matches(self, request: Request) -> bool:
        return (
            self.hits < self.times
            and request.method == self.method
            and re.search(self.path, request.path) is not None
            and (self.watch is None or self.watch == request.watch)
            and (self.named is None or re.search(self.named, _name_of(request.body)) is not None)
        )

    def text(self, request: Request) -> str:
        """The Status message: ``message`` (``{name}`` is the object's name), or the default."""
        if self.message is None:
            return f"injected by the test: {self.code}"
        return self.message.replace("{name}", _name_of(request.body))


def _name_of(body: Obj | None) -> str:
    metadata = (body or {}).get("metadata")
    return str(metadata.get("name") or "") if isinstance(metadata, dict) else ""
