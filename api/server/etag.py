"""Conditional GETs: an unchanged answer costs a 304, not a body (the dashboard polls every 2 s).

Contract: ASGI middleware. Every ``GET`` under the API prefix that answers 200 gets an ``ETag`` (a hash of
the body, unless the route set one: ``api.server.cache`` keeps its views' tags) and ``Cache-Control: no-cache`` (revalidate every time); when the request's ``If-None-Match``
names that tag, the answer is ``304 Not Modified`` without a body. Other requests pass untouched.
"""

from __future__ import annotations

import hashlib

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class ETagMiddleware:
    def __init__(self, app: ASGIApp, prefix: str) -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def buffer(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                await self._finish(scope, start, b"".join(chunks), send)

        await self.app(scope, receive, buffer)

    async def _finish(self, scope: Scope, start: Message, body: bytes, send: Send) -> None:
        if start["status"] != 200:
            await send(start)
            await send({"type": "http.response.body", "body": body})
            return
        headers = MutableHeaders(raw=list(start["headers"]))
        tag = headers.get("etag") or f'W/"{hashlib.blake2b(body, digest_size=16).hexdigest()}"'
        headers["ETag"] = tag
        headers["Cache-Control"] = "no-cache"
        wanted = Headers(scope=scope).get("if-none-match", "")
        if tag in (t.strip() for t in wanted.split(",")):
            del headers["content-length"]
            del headers["content-type"]
            await send({"type": "http.response.start", "status": 304, "headers": headers.raw})
            await send({"type": "http.response.body", "body": b""})
            return
        await send({**start, "headers": headers.raw})
        await send({"type": "http.response.body", "body": body})
