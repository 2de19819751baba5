"""The fake API server's HTTP side: one request in, one JSON (or text) answer or a watch stream out.

Contract: ``handler_for(api)`` is a ``BaseHTTPRequestHandler`` class that parses a request (path, last
value of each query parameter, JSON body), records it and applies an injected fault (``api.fault_for``),
then answers ``api.handle(...)`` with a fixed Content-Length, an ``ApiError`` as its ``Status`` body,
or a ``?watch=true`` request as a chunked stream of ``api.watch_events`` that ends with the final chunk on
the watch's timeout and without one when the test drops the connection.
"""

from __future__ import annotations

import copy
import json
import socket
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from kubefake.faults import Request
from kubefake.store import ApiError, Obj

if TYPE_CHECKING:
    from kubefake.server import FakeKubeApi


def handler_for(api: FakeKubeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _request(self) -> tuple[Request, Obj | None]:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            return Request(self.command, parts.path, query, copy.deepcopy(body)), body

        def _dispatch(self) -> None:
            request, body = self._request()
            fault = api.fault_for(request)
            try:
                if fault is not None and fault.code is not None:
                    time.sleep(fault.delay)
                    raise ApiError(
                        fault.code,
                        fault.reason,
                        fault.text(request),
                        retry_after=fault.retry_after,
                    )
                if request.watch:
                    self._watch(request)
                    return
                code, answer = api.handle(request, body)
                if fault is not None:
                    time.sleep(fault.delay)  # carried out, answered late: the client times out
            except ApiError as error:
                self._send(error.code, error.status(), retry_after=error.retry_after)
                return
            self._send(code, answer)

        do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _dispatch

        def _send(self, code: int, answer: Obj | str, retry_after: int | None = None) -> None:
            text = answer if isinstance(answer, str) else json.dumps(answer)
            data = text.encode()
            try:
                self.send_response(code)
                self.send_header(
                    "Content-Type", "text/plain" if isinstance(answer, str) else "application/json"
                )
                self.send_header("Content-Length", str(len(data)))
                if retry_after is not None:
                    self.send_header("Retry-After", str(retry_after))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                self.close_connection = True

        def _watch(self, request: Request) -> None:
            if api.watches.refusal is not None:
                raise ApiError(api.watches.refusal, "ServiceUnavailable", "watches are refused by the test")
            resource, ns = api.watch_target(request.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def write(event: Obj) -> None:
                line = (json.dumps(event) + "\n").encode()
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()

            self.close_connection = True
            try:
                api.watch_events(resource, ns, request.query, write)
                self.wfile.write(b"0\r\n\r\n")  # the server ends the watch cleanly (its timeout)
            except ConnectionAbortedError:
                self.connection.shutdown(socket.SHUT_RDWR)  # mid-stream, no final chunk: a broken connection
            except OSError:
                pass

    return Handler
