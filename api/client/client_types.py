"""What the API answers, as the client reads it: plain frozen dataclasses, no pydantic.

Contract: one class per ``api.server.schemas`` answer model, same name, same fields of the same types and
defaults (``make lint`` checks them: ``api.server.mirrors``), so code written against
``schemas.JobPublic`` reads a ``client_types.JobPublic`` the same way. ``parse(cls, data)`` builds one from
decoded JSON: timestamps become aware ``datetime``\\ s, nested answers their classes; fields the server
adds later are kept in ``raw`` only (an older CLI still works with a newer server); a missing field or a
value of the wrong shape is a ``ValueError`` (the answer is not Tide's API). ``raw`` is the JSON object
exactly as the server sent it (``tide ... --json`` prints it).

Why not the pydantic models: the CLI imports this on every command, and building the models of
``api.server.schemas`` costs about 0.1 s, as much as the rest of the CLI's start (bench/cli_start.py). Validation
is the server's job; the client trusts its answers' types and checks only their shape. Standard library
only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T")
Raw = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ProjectPublic:
    name: str
    deserved_gpus: int
    over_quota_weight: float
    limit_gpus: int | None
    allow_over_quota: bool
    department: str | None
    fair_share_gpus: int
    allocated_gpus: int
    over_quota_gpus: int
    pending_gpus: int
    running_jobs: int
    pending_jobs: int
    created_at: datetime
    usage_gpu_hours: float
    effective_weight: float
    min_runtime_seconds: float | None
    effective_min_runtime_seconds: float
    preemption_notice_seconds: int | None
    effective_preemption_notice_seconds: int
    pod_defaults: dict[str, Any] | None
    resize_cost_seconds: float | None
    effective_resize_cost_seconds: float | None
    warnings: list[str]
    raw: Raw = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class DepartmentPublic:
    name: str
    deserved_gpus: int
    over_quota_weight: float
    limit_gpus: int | None
    fair_share_gpus: int
    allocated_gpus: int
    pending_gpus: int
    projects: list[str]
    created_at: datetime
    min_runtime_seconds: float
    preemption_notice_seconds: int | None
    pod_defaults: dict[str, Any] | None
    resize_cost_seconds: float | None
    warnings: list[str]
    raw: Raw = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class ReplicaPublic:
    index: int
    role: str
    status: str
    node: str
    gpus: int
    gpu_ids: list[int] | None
    pid: int | None
    started_at: datetime | None
    exit_code: int | None
    share: float | None = None
    shared_gpu: int | None = None
    raw: Raw = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class EtaPublic:
    start_p50: datetime | None
    start_p90: datetime | None
    size: int
    after: str | None
    source: str | None
    computed_at: datetime
    raw: Raw = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class JobPublic:
    project: str
    name: str
    status: str
    workers: int
    min_replicas: int
    max_replicas: int
    gpus_per_replica: int
    replicas_now: int
    allocated_gpus: int
    pending_reason: str | None
    queue_position: int | None
    restarts: int
    interactive: bool
    priority: int
    image: str | None
    command: list[str]
    env_names: list[str]
    message: str | None
    created_at: datetime
    finished_at: datetime | None
    replicas: list[ReplicaPublic]
    checkpointed_at: datetime | None = None
    speeds: dict[str, float] | None = None
    allowed_replicas: list[int] | None = None
    topology: str = "preferred"
    resize_cost_seconds: float | None = None
    resizes_measured: int = 0
    expected_duration: float | None = None
    started_at: datetime | None = None
    eta: EtaPublic | None = None
    grow_at: EtaPublic | None = None
    gpu_fraction: float | None = None
    raw: Raw = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class NodeSlot:
    project: str
    job: str
    index: int
    role: str
    gpu_ids: list[int]
    releasing: bool
    share: float | None = None
    job_status: str | None = None
    raw: Raw = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class WaitingSlot:
    project: str
    job: str
    index: int
    raw: Raw = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class NodePublic:
    name: str
    gpus: int
    allocated_gpus: int
    schedulable: bool
    slots: list[NodeSlot]
    state: str = "ready"
    state_since: datetime | None = None
    domain: str | None = None
    waiting: list[WaitingSlot] = field(default_factory=list)
    raw: Raw = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class ClusterPublic:
    total_gpus: int
    allocated_gpus: int
    free_gpus: int
    nodes: list[NodePublic]
    projects: list[ProjectPublic]
    departments: list[DepartmentPublic]
    leader: bool
    raw: Raw = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class EventPublic:
    id: int
    time: datetime
    kind: str
    project: str
    job: str
    replicas: list[int]
    reason: str
    cause: str | None
    lost_gpu_seconds: float | None = None
    raw: Raw = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class TokenPublic:
    id: int
    project: str
    name: str
    created_at: datetime
    token: str | None = None
    raw: Raw = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Health:
    status: str
    role: str
    version: str
    database: str
    cycles: int
    last_cycle_at: datetime | None
    last_error: str | None
    raw: Raw = field(default_factory=dict, repr=False, compare=False)


def _time(value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"expected an ISO 8601 time, got {value!r}")
    return datetime.fromisoformat(value)


def _nested(cls: type[Any]) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if not isinstance(value, list):
            raise ValueError(f"expected a list of {cls.__name__}, got {type(value).__name__}")
        return [parse(cls, item) for item in value]

    return convert


def _keep(value: Any) -> Any:
    return value


def _optional(cls: type[Any]) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        return None if value is None else parse(cls, value)

    return convert


# How each field's JSON becomes its value, by the annotation's text (the annotations are strings here).
_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "datetime": _time,
    "datetime | None": _time,
    "list[ReplicaPublic]": _nested(ReplicaPublic),
    "EtaPublic | None": _optional(EtaPublic),
    "list[NodeSlot]": _nested(NodeSlot),
    "list[WaitingSlot]": _nested(WaitingSlot),
    "list[NodePublic]": _nested(NodePublic),
    "list[ProjectPublic]": _nested(ProjectPublic),
    "list[DepartmentPublic]": _nested(DepartmentPublic),
}
_PLAN: dict[type[Any], list[tuple[str, bool, Callable[[Any], Any]]]] = {}


def _plan(cls: type[Any]) -> list[tuple[str, bool, Callable[[Any], Any]]]:
    """(name, required, converter) of each field but ``raw``, worked out once per class."""
    plan = _PLAN.get(cls)
    if plan is None:
        plan = [
            (
                f.name,
                f.default is f.default_factory is dataclasses.MISSING,
                _CONVERTERS.get(str(f.type), _keep),
            )
            for f in dataclasses.fields(cls)
            if f.name != "raw"
        ]
        _PLAN[cls] = plan
    return plan


def parse(cls: type[T], data: Any) -> T:
    """``cls`` from a decoded JSON object; ValueError when it is not one of Tide's answers."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a {cls.__name__} object, got {type(data).__name__}")
    values: dict[str, Any] = {"raw": data}
    for name, required, convert in _plan(cls):
        if name in data:
            values[name] = convert(data[name])
        elif required:
            raise ValueError(f"a {cls.__name__} without {name!r}")
    return cls(**values)


def parse_list(cls: type[T], data: Any) -> list[T]:
    if not isinstance(data, list):
        raise ValueError(f"expected a list of {cls.__name__}, got {type(data).__name__}")
    return [parse(cls, item) for item in data]
