"""The service's logs: plain text for people or one JSON object per line for collectors, with request ids.

Contract: ``configure_logging(level, fmt)`` sets up the root logger (``fmt`` is ``text`` or ``json``; anything
else is a ``ValueError`` naming the choices); uvicorn's loggers propagate to it, so its access lines come out
in the same format. A JSON line holds ``time`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``,
``message``, ``request_id`` while a request is being handled (``REQUEST_ID``, set by ``api.server.observe``) and
``exception`` with the traceback when there is one. ``request_id_from(header)`` keeps a client's
``X-Request-ID`` when it is sane (1-128 characters of ``A-Za-z0-9._:-``), else makes a new one, so a
client cannot inject text into log lines.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime

FORMATS = ("text", "json")
REQUEST_ID: ContextVar[str | None] = ContextVar("tide_request_id", default=None)
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def request_id_from(header: str | None) -> str:
    if header is not None and _SANE_ID.match(header):
        return header
    return uuid.uuid4().hex


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = REQUEST_ID.get()
        if request_id is not None:
            line["request_id"] = request_id
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class _RequestIdText(logging.Formatter):
    """The text format, ending in ``[request ID]`` while a request is handled."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        request_id = REQUEST_ID.get()
        return text if request_id is None else f"{text} [request {request_id}]"


def formatter(fmt: str) -> logging.Formatter:
    if fmt == "json":
        return JsonFormatter()
    if fmt == "text":
        return _RequestIdText(TEXT_FORMAT)
    raise ValueError(f"unknown log format {fmt!r}: use {' or '.join(FORMATS)}")


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes each record to ``sys.stderr`` as it is at that moment, not as it was when logging was set up
    (a CLI runner or a test that swapped ``sys.stderr`` and closed its stream must not break later logging)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure_logging(level: str, fmt: str) -> None:
    """Route every log line (Tide's and uvicorn's) through one root handler in ``fmt``."""
    handler = _StderrHandler()
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
