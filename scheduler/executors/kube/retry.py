"""Calling the Kubernetes API through weather: retries with backoff, and errors that say what to fix.

Contract: ``Retrier.call(what, fn)`` runs ``fn`` and retries it, with exponential backoff and jitter
(``Retry-After`` honoured, capped), when the answer is transient: 429, 500, 502, 503, 504, a 409
``Conflict`` (an object changed under us; not ``AlreadyExists``), a timeout or a broken connection. When
the attempts run out it raises ``KubeApiError`` naming the call and the last answer; the engine's cycle
then fails as a whole and is tried again a period later, with nothing half-recorded (launches are safe to
repeat: pod names are deterministic, so a create that did land answers 409 and is adopted). Other answers
(404, 409 ``AlreadyExists``, 403, 422 ...) are raised unchanged for the caller to judge (a refused create:
``kube/refusals.py``).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)
T = TypeVar("T")
TRANSIENT = frozenset({429, 500, 502, 503, 504})


class KubeApiError(RuntimeError):
    """The Kubernetes API could not be used for this call (down, overloaded, an unexpected answer); the cycle
    fails and is tried again next period."""


def status_of(error: ApiException) -> tuple[str, str]:
    """The ``reason`` and ``message`` of the Status the API answered (``AlreadyExists``, ``Invalid`` ...)."""
    try:
        body = json.loads(error.body or "{}")
    except (TypeError, ValueError):
        body = {}
    if not isinstance(body, dict):
        body = {}
    return str(body.get("reason") or error.reason or ""), str(body.get("message") or error.reason or "")


def is_already_exists(error: ApiException) -> bool:
    return error.status == 409 and status_of(error)[0] == "AlreadyExists"


def transient(error: BaseException) -> bool:
    if isinstance(error, ApiException):
        return error.status in TRANSIENT or (error.status == 409 and not is_already_exists(error))
    return isinstance(error, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


def describe(error: BaseException) -> str:
    if isinstance(error, ApiException):
        reason, message = status_of(error)
        return f"the API answered {error.status} {reason}: {message}"
    return f"cannot reach the API: {type(error).__name__}: {error}"


def _retry_after(error: BaseException) -> float | None:
    if isinstance(error, ApiException) and error.headers:
        value = error.headers.get("Retry-After")
        if value is not None and str(value).isdigit():
            return float(value)
    return None


@dataclass
class Retrier:
    """Exponential backoff: ``initial`` seconds, times ``factor`` per attempt, at most ``cap``."""

    attempts: int = 5
    initial: float = 0.1
    factor: float = 2.0
    cap: float = 5.0
    sleep: Callable[[float], None] = time.sleep
    retries: int = field(default=0, init=False)  # how many retries were made, for tests and metrics

    def delay(self, attempt: int, error: BaseException) -> float:
        hinted = _retry_after(error)
        base = hinted if hinted is not None else self.initial * self.factor**attempt
        return min(base, self.cap) * (1 + 0.2 * random.random())

    def call(self, what: str, fn: Callable[[], T]) -> T:
        for attempt in range(self.attempts):
            try:
                return fn()
            except Exception as error:
                if not transient(error):
                    raise
                if attempt == self.attempts - 1:
                    raise KubeApiError(f"{what}: {describe(error)} (tried {self.attempts} times)") from error
                wait = self.delay(attempt, error)
                log.warning("%s: %s; retrying in %.2f s", what, describe(error), wait)
                self.retries += 1
                self.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover
