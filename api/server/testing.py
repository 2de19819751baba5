"""In-process access to the real app for synchronous clients (the CLI's tests): no socket, no server.

Contract: ``ASGIBridge(app)`` is an ``httpx.BaseTransport`` that runs the app, *with its lifespan* (so the
scheduling loop runs), on a private event loop in a background thread, and forwards each request through
``httpx.ASGITransport``. ``local_client(app, token)`` wraps it in a ``TideClient``. Close the bridge (or use
it as a context manager) to shut the app down. Starlette's ``TestClient`` does the same but is deprecated
with the httpx that Tide uses.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
from fastapi import FastAPI

from api.client.rest import TideClient

BASE_URL = "http://tide.local"


class ASGIBridge(httpx.BaseTransport):
    def __init__(self, app: FastAPI, *, timeout: float = 60) -> None:
        self.timeout = timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="asgi-bridge", daemon=True)
        self._thread.start()
        self._transport = httpx.ASGITransport(app=app)
        self._lifespan: AbstractAsyncContextManager[Any] = app.router.lifespan_context(app)
        self._run(self._lifespan.__aenter__())
        self._open = True

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(self.timeout)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()

        async def forward() -> httpx.Response:
            inner = httpx.Request(request.method, request.url, headers=request.headers, content=body)
            response = await self._transport.handle_async_request(inner)
            content = await response.aread()
            await response.aclose()
            return httpx.Response(response.status_code, headers=response.headers, content=content)

        response: httpx.Response = self._run(forward())
        return response

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        try:
            self._run(self._lifespan.__aexit__(None, None, None))
            self._run(self._transport.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(self.timeout)
            self._loop.close()


def local_client(bridge: ASGIBridge, token: str | None) -> TideClient:
    """A ``TideClient`` that talks to the bridged app."""
    return TideClient(token=token, http=httpx.Client(transport=bridge, base_url=BASE_URL))
