"""Error handling: every bad request gets a 4xx with a message that says what to fix, never a 500.

Contract: validation errors become 422 ``{"detail": "field: what is wrong; ...", "errors": [...]}``;
a unique-constraint race becomes 409; a database that cannot be reached becomes 503 (retry later).
``BodyLimit`` refuses request bodies above a size (413) before they are read whole, whether the client
sent ``Content-Length`` or streamed them (chunked).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def _where(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


def _summary(errors: list[dict[str, Any]]) -> str:
    messages = []
    for error in errors[:10]:
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        messages.append(f"{_where(tuple(error.get('loc', ())))}: {message}")
    return "; ".join(messages)


async def _validation(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
        for e in exc.errors()
    ]
    return JSONResponse(
        {"detail": _summary(list(exc.errors())), "errors": errors}, status.HTTP_422_UNPROCESSABLE_CONTENT
    )


async def _integrity(_request: Request, _exc: Exception) -> JSONResponse:
    return JSONResponse(
        {"detail": "this conflicts with something that already exists (a name in use?); read it and retry"},
        status.HTTP_409_CONFLICT,
    )


async def _unavailable(_request: Request, _exc: Exception) -> JSONResponse:
    return JSONResponse(
        {"detail": "the database is unavailable; retry in a few seconds"},
        status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": "2"},
    )


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(IntegrityError, _integrity)
    app.add_exception_handler(OperationalError, _unavailable)  # down, restarting, connection lost
    app.add_exception_handler(InterfaceError, _unavailable)  # a connection closed under a request


class BodyLimit:
    """ASGI middleware: 413 for request bodies larger than ``limit`` bytes."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._refuse(send)
            return
        received = 0
        refused = False

        async def limited_receive() -> Message:
            nonlocal received, refused
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit and not refused:
                refused = True
                await self._refuse(send)
                return {"type": "http.disconnect"}  # the app stops reading; what it answers is dropped
            return message

        async def guarded_send(message: Message) -> None:
            if not refused:
                await send(message)

        await self.app(scope, limited_receive, guarded_send)

    async def _refuse(self, send: Send) -> None:
        response = JSONResponse(
            {"detail": f"request body too large: at most {self.limit} bytes"},
            status.HTTP_413_CONTENT_TOO_LARGE,
        )
        await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}
