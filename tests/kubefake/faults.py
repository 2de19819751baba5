"""The fake API server's request log entries and injected faults.

Contract: ``Request`` is one request as received (the body copied before the server touched it);
``Fault`` answers the next ``times`` matching requests with ``code``, or carries them out and answers late.
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
    hits: int = 0

    def matches(self, request: Request) -> bool:
        return (
            self.hits < self.times
            and request.method == self.method
            and re.search(self.path, request.path) is not None
            and (self.watch is None or self.watch == request.watch)
        )
