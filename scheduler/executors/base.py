"""What the engine needs from something that runs replicas: the ``Executor`` protocol.

Contract: an executor runs one process (or pod) per replica, known by the store's replica id. It never
decides anything: ``start`` runs exactly the given argv with the given environment, ``stop`` asks a replica
to stop (SIGTERM now, a forced kill once ``grace`` seconds have passed, enforced by later ``observe`` calls),
``notify`` gives a replica its preemption notice (SIGUSR1 to its training processes, nothing else: the
engine's ``scheduler.elastic.notice`` sends the SIGTERM once the notice ran; an executor that cannot deliver
one, ``preemption_notices`` false, does nothing), ``observe`` reports every replica it knows (running or
exited, with the exit code), ``forget`` drops an exited one. ``adopt`` reloads what an earlier run of the
service started, so a restarted service neither orphans nor duplicates a replica. ``close`` releases what
the executor holds (watches, idle launchers; replicas keep running). Exit codes: ``>= 0`` as the process
returned, ``-N`` killed by signal N, ``LOST_EXIT_CODE`` when the process vanished without a trace.

What an executor can do beyond that is declared, never probed: ``capabilities`` (a ``Capabilities``) says
which of the engine's restart strategies and notices it supports; ``put_agent_token`` does nothing on an
executor without ``inplace_restarts``, ``announce`` nothing on one without ``announcements``. ``start`` raises ``ExecutorError`` for a replica that cannot start
(its job fails with the message) and ``LaunchDeferred`` for one that cannot start yet (it waits).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from scheduler.core.model import Node
from scheduler.elastic.agent.progress import Progress

LOST_EXIT_CODE = -1000


class ExecutorError(RuntimeError):
    """A replica could not be started or signalled; the message says why."""


class LaunchDeferred(ExecutorError):
    """A replica cannot start yet, for a reason that may pass (a quota full, a namespace being made); the
    message says why. The engine leaves it waiting, shows the reason on its job and tries again later (the
    executor decides when: until then ``start`` raises this again without trying)."""


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """Everything needed to start one replica. ``env`` is added to the executor's own environment."""

    replica_id: int
    project: str
    job: str
    index: int
    node: str
    gpu_ids: tuple[int, ...]
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    image: str | None = None
    grace: float | None = None  # the job's grace period (None: the service's); pods carry it
    # the job's pod template merged over its project's and department's defaults (Kubernetes pods only)
    pod_template: Mapping[str, Any] | None = None
    # R20: a fractional replica's share of its one GPU ("0.5"): ``gpu_ids`` names a device it shares with the
    # other fractional replicas there (never with a whole-GPU replica); None: its GPUs are its own
    gpu_share: str | None = None


@dataclass(frozen=True, slots=True)
class Announcement:
    """One of Tide's decisions about a job, for an executor that shows them where it runs (Kubernetes
    Events on the job's pods): an event's ``kind`` (start, grow, shrink, evict, restart, failed, ...), the
    job, the replica indexes it concerns (none: the whole job), its reason text and its cause, if any."""

    kind: str
    project: str
    job: str
    replicas: tuple[int, ...]
    reason: str
    cause: str | None = None


@dataclass(frozen=True, slots=True)
class Observation:
    """One replica as the executor sees it now. ``exit_code`` is None while it runs."""

    replica_id: int
    pid: int | None
    running: bool
    exit_code: int | None = None
    stopping: bool = False
    detail: str | None = None  # why it ended, when the executor knows more than the code
    ready: bool | None = None  # torchrun: its workers started (the rendezvous formed); None: not known
    # alive, but its process has not started yet (a pod whose container is not running): why, for a person
    # (an image that cannot be pulled, a volume not bound), or "" when nothing is wrong (it is being created)
    waiting: str | None = None
    # the job's last complete checkpoint, as it reported it (master only)
    checkpointed_at: float | None = None
    # its training speed, as it reported it (master only; R19)
    progress: Progress | None = None


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What an executor supports beyond running, stopping and observing replicas.

    ``coordinated_restarts``: a replica id may be started again once its process was observed to exit and
    was forgotten, so the engine restarts a torchrun job as a series of launches (``scheduler.elastic.restarts``).
    ``inplace_restarts``: a torchrun job's replicas run Tide's agent, which relaunches training in place on a
    resize (``scheduler.elastic.inplace``); the job's agent token goes through ``put_agent_token``.
    ``preemption_notices``: ``notify`` delivers a preemption notice to any replica.
    ``announcements``: ``announce`` shows Tide's decisions where the replicas run (Kubernetes Events); the
    engine passes each new event of its log to it after the cycle's launches.
    """

    coordinated_restarts: bool = False
    inplace_restarts: bool = False
    preemption_notices: bool = False
    announcements: bool = False


class Executor(Protocol):
    """Runs replicas. Implementations: ``local`` (processes), ``kubernetes`` (pods), ``fake`` (memory)."""

    @property
    def real_gpus(self) -> bool:
        """True when ``gpu_ids`` name real devices (the local executor then sets CUDA_VISIBLE_DEVICES)."""
        ...

    @property
    def capabilities(self) -> Capabilities: ...

    def nodes(self) -> tuple[Node, ...]: ...

    def adopt(self) -> None: ...

    def observe(self) -> dict[int, Observation]: ...

    def start(self, spec: LaunchSpec) -> Observation: ...

    def notify(self, replica_id: int) -> None: ...

    def stop(self, replica_id: int, grace: float) -> None: ...

    def forget(self, replica_id: int) -> None: ...

    def read_log(self, project: str, job: str, index: int, tail: int | None = None) -> str | None: ...

    def put_agent_token(self, project: str, job: str, token: str) -> None:
        """Give ``project/job``'s agents their token (``inplace_restarts``; a no-op elsewhere)."""
        ...

    def announce(self, announcement: Announcement) -> None:
        """Show one of Tide's decisions where the job runs (``announcements``; a no-op elsewhere). Never
        raises: a decision stands whether or not it could be shown."""
        ...

    def close(self) -> None: ...
