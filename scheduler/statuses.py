"""The words for where a job or a replica stands, defined once for the service, the API and the CLI.

Contract: standard library only (the CLI's quick path imports it; an import-linter contract holds it to
that). Each set of words is a ``StrEnum``: a member equals its string and is written as it, so the
database's string columns, the API's JSON and the events hold the same words as before they were typed.
Only ``scheduler.store.lifecycle`` moves a job or a replica from one of these to another; creating a row
names its first one.

- ``JobStatus``: ``pending`` (waiting for its gang to fit, or evicted back to wait), ``running`` (it holds
  replicas), then ``succeeded``, ``failed`` or ``cancelled`` for good. ``ACTIVE``: the two the scheduler
  still plans for.
- ``ReplicaDesired``: what the engine wants of a replica: ``run``, ``stop`` (a shrink, an eviction, a
  finished job or a taken node: signal it, forget the row once it exited unless its job finished) or
  ``done`` (it exited on its own; kept for its job's history).
- ``ReplicaStatus``: what its process is doing: ``starting`` (placed or launched, not seen running yet),
  ``running``, ``terminating`` (told to end: stopped for good, or for its job's next launch while still
  wanted), then, once it exited: ``stopped`` (Tide told it to end: a shrink, an eviction, a delete, its
  job's end; whatever its exit code), else ``succeeded`` or ``failed`` (it ended on its own).
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE = (JobStatus.PENDING, JobStatus.RUNNING)


class ReplicaDesired(StrEnum):
    RUN = "run"
    STOP = "stop"
    DONE = "done"


class ReplicaStatus(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    TERMINATING = "terminating"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
