"""Per-request observation: a request id for the logs and the response, and the request's latency.

Contract: ASGI middleware, outermost. Each HTTP request gets an id (the client's ``X-Request-ID`` when sane,
else a new one: ``api.server.logs.request_id_from``), set in ``api.server.logs.REQUEST_ID`` while it is handled (so every
log line made meanwhile carries it, in threads too: Starlette copies the context into its thread pool) and
echoed in the ``X-Request-ID`` response header. Its latency goes to the ``tide_http_request_duration_seconds``
histogram labelled with the matched route's template (``/api/v1/projects/{project}``, never the raw path, so
the labels stay bounded; ``unmatched`` when no route matched), the method and the status code.
"""

from __future__ import annotations

import re
import time

from prometheus_client import Histogram
from starlette.datastructures import Headers, MutableHeaders
from starlette.routing import BaseRoute, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.server.logs import REQUEST_ID, request_id_from

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def route_template(scope: Scope, prefixes: tuple[str, ...]) -> str:
    """The matched route's template with the prefix it was included under (FastAPI keeps routes relative)."""
    route = scope.get("route")
    if not isinstance(route, BaseRoute):
        return "unmatched"
    if isinstance(route, Mount):
        return route.path + "/{path}"
    template, pattern = getattr(route, "path_format", None), getattr(route, "path_regex", None)
    if not isinstance(template, str) or not isinstance(pattern, re.Pattern):
        return "unmatched"
    path = scope["path"]
    for prefix in ("", *prefixes):
        if path.startswith(prefix) and pattern.match(path[len(prefix) :]):
            return prefix + template
    return template


class ObserveMiddleware:
    def __init__(self, app: ASGIApp, histogram: Histogram, prefixes: tuple[str, ...] = ()) -> None:
        self.app = app
        self.histogram = histogram
        self.prefixes = prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_from(Headers(scope=scope).get("x-request-id"))
        token = REQUEST_ID.set(request_id)
        started = time.perf_counter()
        status = 500  # what the client gets when the app raises before answering

        async def tagged(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message)["X-Request-ID"] = request_id
            await send(message)

        try:
            await self.app(scope, receive, tagged)
        finally:
            method = scope["method"] if scope["method"] in METHODS else "other"
            self.histogram.labels(
                route=route_template(scope, self.prefixes), method=method, status=str(status)
            ).observe(time.perf_counter() - started)
            REQUEST_ID.reset(token)
