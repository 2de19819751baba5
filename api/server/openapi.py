"""The OpenAPI document says what the API really answers, and unsupported methods get an honest 405.

Contract: ``install(app, prefix)`` replaces ``app.openapi`` with a version that documents, on top of
FastAPI's: the bearer token (a security scheme, required by every operation but health and docs); Tide's
error bodies (``schemas.Problem``, and ``schemas.ValidationProblem`` for 422, on every operation since an
unknown query parameter is one, which FastAPI would describe
with its own list-shaped ``detail``); and the statuses each operation can answer: 401 and 403 (token), 404
(a path parameter, or the ``project`` filter, names nothing), 409 (a conflicting write), 400 and 413 (a body that is not JSON, or over the limit), 304 (a GET under
``prefix`` with a matching ``If-None-Match``, see ``api.server.etag``) and 503 (the database is unavailable). The
schemathesis test (tests/integration/test_fuzz_api.py) holds every answer to this document.

``MethodGuard`` (ASGI middleware) answers 405 with an ``Allow`` header listing the documented methods of a
path, for a method the path does not support (the dashboard's catch-all mount would otherwise answer for
every path with ``Allow: GET, HEAD``), and 422 for a query parameter the operation does not document (a
typo is an error, not a silently ignored filter).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI, status
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from api.server import schemas

BEARER = "bearer"
PUBLIC_TAGS = {"health"}
WRITES = {"post", "patch", "put", "delete"}
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
PROBLEMS = {
    400: "The body is not JSON (or not UTF-8).",
    401: "Missing or invalid token (send 'Authorization: Bearer TOKEN').",
    403: "The token may not do this (another project's job, or an admin's task).",
    404: "Nothing of that name (the message says where to look).",
    409: "It conflicts with what exists (a name in use, a project with active jobs).",
    413: "The request body is over the size limit.",
    503: "The database is unavailable; retry after a few seconds.",
}


def _ref(name: str) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}


def _document_operation(path: str, method: str, operation: dict[str, Any], prefix: str) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    responses["422"] = {"description": "Invalid input: what to fix", **_ref("ValidationProblem")}
    if PUBLIC_TAGS & set(operation.get("tags", [])):
        return
    operation["security"] = [{BEARER: []}]
    wanted = [401, 403, 503]
    by_name = {p.get("name") for p in operation.get("parameters", [])}
    wanted += [404] if "{" in path or "project" in by_name else []
    wanted += [409, 413] if method in WRITES else []
    wanted += [400] if "requestBody" in operation else []
    for code in wanted:
        responses.setdefault(str(code), {"description": PROBLEMS[code], **_ref("Problem")})
    if method == "get" and path.startswith(prefix):
        responses.setdefault("304", {"description": "Not modified: the If-None-Match tag is current."})


def build(app: FastAPI, prefix: str) -> dict[str, Any]:
    document = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    components = document.setdefault("components", {})
    components.setdefault("securitySchemes", {})[BEARER] = {"type": "http", "scheme": "bearer"}
    found = components.setdefault("schemas", {})
    for model in (schemas.Problem, schemas.ValidationProblem, schemas.FieldError):
        found[model.__name__] = model.model_json_schema(ref_template="#/components/schemas/{model}")
    found.pop("HTTPValidationError", None)
    found.pop("ValidationError", None)
    for path, item in document.get("paths", {}).items():
        for method, operation in item.items():
            if method in METHODS:
                _document_operation(path, method, operation, prefix)
    return document


def install(app: FastAPI, prefix: str) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app, prefix)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^}]+\})", template)
    return re.compile("^" + "".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts) + "$")


SEEN_PATHS = 1024
Route = tuple[re.Pattern[str], dict[str, frozenset[str]]]  # a path, and per method its query parameters


class MethodGuard:
    def __init__(self, app: ASGIApp, api: FastAPI) -> None:
        self.app = app
        self.api = api
        self._paths: list[Route] | None = None
        self._seen: dict[str, dict[str, frozenset[str]] | None] = {}  # polled paths repeat

    def _route(self, path: str) -> dict[str, frozenset[str]] | None:
        if self._paths is None:
            self._paths = [
                (
                    _pattern(template),
                    {
                        method.upper(): frozenset(
                            p["name"] for p in operation.get("parameters", []) if p.get("in") == "query"
                        )
                        for method, operation in item.items()
                        if method in METHODS
                    },
                )
                for template, item in self.api.openapi().get("paths", {}).items()
            ]
        if path in self._seen:
            return self._seen[path]
        found = next((methods for pattern, methods in self._paths if pattern.match(path)), None)
        if len(self._seen) >= SEEN_PATHS:
            self._seen.clear()  # clients varying paths cannot grow it
        self._seen[path] = found
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self._refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> JSONResponse | None:
        methods = self._route(scope["path"])
        if methods is None:
            return None
        method = "GET" if scope["method"] == "HEAD" else scope["method"]
        if method not in methods:
            allowed = ", ".join(sorted(methods))
            return JSONResponse(
                {"detail": f"{scope['method']} is not supported here; use {allowed}"},
                status.HTTP_405_METHOD_NOT_ALLOWED,
                headers={"Allow": allowed},
            )
        unknown = sorted(
            {k for k, _ in parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)}
            - methods[method]
        )
        if unknown:
            known = ", ".join(sorted(methods[method])) or "none"
            return JSONResponse(
                {"detail": f"unknown query parameter {unknown[0]!r} (a typo?): this accepts {known}"},
                status.HTTP_422_UNPROCESSABLE_CONTENT,
            )
        return None
