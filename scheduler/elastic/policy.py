"""When a launch restarts and when its job fails instead: the one restart budget of both strategies.

Contract (docs/elastic-resize.md, "Failures"). Pure: the standard library only; the callers count and
apply. Each rule returns a verdict, ``Restart`` (the launch starts again at the same size, from its
checkpoint, a ``restart`` event with the verdict's cause and reason) or ``Fail`` (the job fails with the
reason):

- ``after_failure``: a member that exited non-zero on its own restarts the launch while the failures
  counted so far (``restart`` events with cause ``failure`` since the job was created) stay below the
  job's ``max_restarts``; past it the job fails. Resizes never count.
- ``after_timeout``: a launch whose workers did not start within the launch timeout is tried once more
  (cause ``timeout``); if the retry since the job's last resize does not start either, the job fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

RESTART = "restart"  # the event kind of a launch's restart
FAILURE = "failure"  # its cause when a member failed
TIMEOUT = "timeout"  # its cause when a launch did not start its workers in time


@dataclass(frozen=True, slots=True)
class Restart:
    """Restart the launch from its checkpoint: the event's ``cause`` and ``reason``."""

    cause: str
    reason: str


@dataclass(frozen=True, slots=True)
class Fail:
    """Fail the job for ``reason``."""

    reason: str


Verdict: TypeAlias = Restart | Fail


def after_failure(what: str, *, failures: int, allowed: int) -> Verdict:
    """A member failed (``what`` says how, for a person) after ``failures`` restarts of ``allowed``."""
    if failures >= allowed:
        return Fail(f"{what} after {failures} restarts (max_restarts {allowed})")
    return Restart(
        FAILURE,
        f"{what}; restarting from the checkpoint (failure {failures + 1} of max_restarts {allowed})",
    )


def after_timeout(size: int, timeout: float, *, retries: int) -> Verdict:
    """A launch at ``size`` replicas did not start its workers within ``timeout`` s, ``retries`` times
    retried since the job's last resize."""
    what = f"the launch at {size} replicas did not start its workers within {timeout:g} s"
    if retries >= 1:
        return Fail(f"{what}, twice: giving up")
    return Restart(TIMEOUT, f"{what}; trying once more")
