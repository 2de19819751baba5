"""Pydantic models of the REST API: the only home of pydantic models in Tide.

Contract: ``*Create``/``*Update`` validate what clients send (unknown fields are refused, so a typo is an
error, not a silent default) with messages that say what to fix; ``*Public`` is what the API returns.
Rows become ``*Public`` only in ``api.server.convert``. Names are DNS-1123 labels (they become process, pod and file
names). Times are ISO 8601 in UTC.
"""

from __future__ import annotations

import re
from datetime import datetime
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    WithJsonSchema,
    model_validator,
)

from api.shared import replica_sizes

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_ENV_VALUE = 32_768


def _dns_label(value: str) -> str:
    if len(value) > 63 or not DNS_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a valid name: use at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (a DNS-1123 label), e.g. 'team-a'"
        )
    return value


def _env(value: dict[str, str]) -> dict[str, str]:
    for key, item in value.items():
        if not ENV_NAME.match(key):
            raise ValueError(f"{key!r} is not a valid environment variable name: use letters, digits and '_'")
        if key.startswith("TIDE_"):
            raise ValueError(f"{key!r}: TIDE_* variables are set by Tide itself; pick another name")
        if len(item) > MAX_ENV_VALUE:
            raise ValueError(f"the value of {key!r} is longer than {MAX_ENV_VALUE} characters")
    return value


def _command(value: list[str]) -> list[str]:
    if any(part == "" or "\x00" in part for part in value):
        raise ValueError("command arguments must be non-empty strings without NUL characters")
    return value


# The checks are the validators (their messages say what to fix); the JSON schema states the same rules.
Name = Annotated[
    str,
    AfterValidator(_dns_label),
    WithJsonSchema({"type": "string", "pattern": DNS_LABEL.pattern, "minLength": 1, "maxLength": 63}),
]
ARGUMENT_SCHEMA = {"type": "string", "minLength": 1, "pattern": "^[^\\u0000]+$"}
ENV_SCHEMA = {
    "type": "object",
    "maxProperties": 256,
    "propertyNames": {"pattern": "^(?!TIDE_)[A-Za-z_][A-Za-z0-9_]*$"},
    "additionalProperties": {"type": "string", "maxLength": MAX_ENV_VALUE},
}
Gpus = Annotated[int, Field(ge=0, le=1_000_000)]
Weight = Annotated[float, Field(ge=0, le=1_000_000)]
# R15: seconds a job is spared by reclaim for other projects after it started or was resized (up to 30 days)
MinRuntime = Annotated[float, Field(ge=0, le=30 * 86_400)]
MIN_RUNTIME_DOC = (
    "Minimum runtime (seconds): a job started or resized less than this ago is not taken by reclaim for "
    "another project unless that project is below its guarantee."
)
# seconds of SIGUSR1 before the SIGTERM of a replica stopped by a reclaim or a preemption (up to a day, the
# longest grace period); it counts inside the grace period
Notice = Annotated[int, Field(ge=0, le=86_400)]
NOTICE_DOC = (
    "Preemption notice (whole seconds, 0 to 86400): a replica stopped because its GPUs are reclaimed or "
    "preempted gets SIGUSR1 this long before its SIGTERM, to checkpoint; it counts inside the grace period "
    "(the SIGKILL comes when it would without it; a notice longer than the grace is cut to the grace). "
    "0: none."
)
# a job's pod template and an admin's pod defaults: JSON objects checked field by field by the services
# (scheduler.executors.kube.podtemplate; docs/kubernetes.md, "Job pods"), whose 422 names each field
POD_TEMPLATE_DOC = (
    "The job's pod template (Kubernetes pods): a Kubeflow replica's template, {metadata: {labels, "
    "annotations}, spec: {containers: [{resources, env, envFrom, volumeMounts, securityContext}], volumes, "
    "tolerations, nodeSelector, affinity, serviceAccountName, imagePullSecrets, priorityClassName, "
    'securityContext, ...}}, plus shm_size (the size of /dev/shm, e.g. "16Gi"). Merged over its project\'s '
    'and department\'s pod defaults; what a job may set is in docs/kubernetes.md ("Job pods").'
)
POD_DEFAULTS_DOC = (
    "Pod defaults of its jobs' pods: {template: a pod template (as a job's pod_template; an admin may also "
    "set what jobs may not), allow: {host_path, privileged, service_accounts, priority_classes}: what its "
    'jobs\' own templates may set beyond the safe set}. docs/kubernetes.md, "Job pods".'
)
JsonObject = Annotated[
    dict[str, Any], Field(max_length=64), WithJsonSchema({"type": "object", "maxProperties": 64})
]
# R18: seconds one resize pauses a job (checkpoint load, rendezvous, warm-up), up to a day
ResizeCost = Annotated[float, Field(ge=0, le=86_400)]
RESIZE_COST_DOC = (
    "Resize cost (seconds, 0 to 86400): how long one resize (a grow or a shrink restarts every replica) "
    "pauses a job that has not been measured yet. Growth happens only when it pays for that pause, and a "
    "resized job is left alone for ten of them (its settle time) except for a guarantee or a higher "
    "priority of its own project."
)
JobStatus = Literal["pending", "running", "succeeded", "failed", "cancelled"]
ReplicaStatus = Literal["starting", "running", "terminating", "succeeded", "failed", "stopped"]


class _In(BaseModel):
    # strict: a number is a number (``false`` is not 0, ``"2"`` is not 2), as the JSON schema says
    model_config = ConfigDict(extra="forbid", strict=True)


def _check_limit(deserved: int | None, limit: int | None) -> None:
    if deserved is not None and limit is not None and limit < deserved:
        raise ValueError(
            f"limit_gpus ({limit}) is below deserved_gpus ({deserved}): raise the limit, lower the quota, "
            "or set limit_gpus to null for no limit"
        )


class ProjectCreate(_In):
    name: Name
    deserved_gpus: Gpus
    over_quota_weight: Weight = 1.0
    limit_gpus: Gpus | None = None
    allow_over_quota: bool = True
    department: Name | None = None
    min_runtime_seconds: MinRuntime | None = Field(
        None, description=MIN_RUNTIME_DOC + " Null: its department's (none without a department)."
    )
    preemption_notice_seconds: Notice | None = Field(
        None, description=NOTICE_DOC + " Null: its department's (none without a department)."
    )
    pod_defaults: JsonObject | None = Field(
        None, description=POD_DEFAULTS_DOC + " Null: its department's only."
    )
    resize_cost_seconds: ResizeCost | None = Field(
        None, description=RESIZE_COST_DOC + " Null: its department's, else the service's default."
    )

    @model_validator(mode="after")
    def _limit(self) -> ProjectCreate:
        _check_limit(self.deserved_gpus, self.limit_gpus)
        return self


class ProjectUpdate(_In):
    deserved_gpus: Gpus | None = None
    over_quota_weight: Weight | None = None
    limit_gpus: Gpus | None = None
    allow_over_quota: bool | None = None
    department: Name | None = None
    min_runtime_seconds: MinRuntime | None = Field(
        None, description=MIN_RUNTIME_DOC + " Null: back to its department's."
    )
    preemption_notice_seconds: Notice | None = Field(
        None, description=NOTICE_DOC + " Null: back to its department's."
    )
    pod_defaults: JsonObject | None = Field(
        None, description=POD_DEFAULTS_DOC + " Replaced whole; null: its department's only."
    )
    resize_cost_seconds: ResizeCost | None = Field(
        None, description=RESIZE_COST_DOC + " Null: back to its department's, else the service's default."
    )

    @model_validator(mode="after")
    def _limit(self) -> ProjectUpdate:
        _check_limit(self.deserved_gpus, self.limit_gpus)
        return self


class ProjectPublic(BaseModel):
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
    usage_gpu_hours: float = Field(
        description="Fair share over time: GPU-hours held above quota, decayed by the usage half-life, "
        "as of the last cycle (0 while the service runs without a half-life)."
    )
    effective_weight: float = Field(
        description="The over-quota weight the last cycle divided idle GPUs by: over_quota_weight, "
        "lowered for usage above quota when a usage half-life is set."
    )
    min_runtime_seconds: float | None = Field(description=MIN_RUNTIME_DOC + " Null: none of its own.")
    effective_min_runtime_seconds: float = Field(
        description="The minimum runtime its jobs get: its own, else its department's, else 0 (off)."
    )
    preemption_notice_seconds: int | None = Field(description=NOTICE_DOC + " Null: none of its own.")
    effective_preemption_notice_seconds: int = Field(
        description="The preemption notice its jobs get: its own, else its department's, else 0 (none)."
    )
    pod_defaults: dict[str, Any] | None = Field(description=POD_DEFAULTS_DOC + " Null: none of its own.")
    resize_cost_seconds: float | None = Field(description=RESIZE_COST_DOC + " Null: none of its own.")
    effective_resize_cost_seconds: float | None = Field(
        description="The resize cost its jobs get until measured: its own, else its department's; null: the "
        "service's default (tide serve --resize-cost)."
    )
    warnings: list[str] = Field(
        description="Quotas that add up to more than they divide, in words: all quotas at the top level "
        "(departments and projects without one) against the schedulable GPUs, then its department's projects' quotas against the department's; fair shares cut them "
        "in proportion. Empty when none."
    )


class DepartmentCreate(_In):
    name: Name
    deserved_gpus: Gpus
    over_quota_weight: Weight = 1.0
    limit_gpus: Gpus | None = None
    min_runtime_seconds: MinRuntime = Field(0.0, description=MIN_RUNTIME_DOC + " Inherited by its projects.")
    preemption_notice_seconds: Notice | None = Field(
        None, description=NOTICE_DOC + " Inherited by its projects without their own. Null: none."
    )
    pod_defaults: JsonObject | None = Field(None, description=POD_DEFAULTS_DOC + " Under its projects'.")
    resize_cost_seconds: ResizeCost | None = Field(
        None,
        description=RESIZE_COST_DOC + " Inherited by its projects without their own. Null: the service's.",
    )

    @model_validator(mode="after")
    def _limit(self) -> DepartmentCreate:
        _check_limit(self.deserved_gpus, self.limit_gpus)
        return self


class DepartmentUpdate(_In):
    deserved_gpus: Gpus | None = None
    over_quota_weight: Weight | None = None
    limit_gpus: Gpus | None = None
    min_runtime_seconds: MinRuntime | None = Field(None, description=MIN_RUNTIME_DOC)
    preemption_notice_seconds: Notice | None = Field(None, description=NOTICE_DOC + " Null: none.")
    pod_defaults: JsonObject | None = Field(
        None, description=POD_DEFAULTS_DOC + " Replaced whole; null: none."
    )
    resize_cost_seconds: ResizeCost | None = Field(
        None, description=RESIZE_COST_DOC + " Null: back to the service's default."
    )

    @model_validator(mode="after")
    def _limit(self) -> DepartmentUpdate:
        _check_limit(self.deserved_gpus, self.limit_gpus)
        return self


class DepartmentPublic(BaseModel):
    name: str
    deserved_gpus: int
    over_quota_weight: float
    limit_gpus: int | None
    fair_share_gpus: int
    allocated_gpus: int
    pending_gpus: int
    projects: list[str]
    created_at: datetime
    min_runtime_seconds: float = Field(description=MIN_RUNTIME_DOC + " Inherited by its projects.")
    preemption_notice_seconds: int | None = Field(
        description=NOTICE_DOC + " Inherited by its projects without their own. Null: none."
    )
    pod_defaults: dict[str, Any] | None = Field(description=POD_DEFAULTS_DOC + " Null: none.")
    resize_cost_seconds: float | None = Field(
        description=RESIZE_COST_DOC + " Inherited by its projects without their own. Null: the service's."
    )
    warnings: list[str] = Field(
        description="Quotas that add up to more than they divide, in words: all quotas at the top level "
        "(departments and projects without one) against the schedulable GPUs, then its projects' quotas against its own; fair shares cut them "
        "in proportion. Empty when none."
    )


def _allowed_form(value: object) -> list[int] | dict[str, int] | str:
    """R16: one of the three forms of ``allowed_replicas`` (``api.shared.replica_sizes``), or one clear message."""
    if value == replica_sizes.POWERS_OF_TWO:
        return replica_sizes.POWERS_OF_TWO
    if isinstance(value, dict) and list(value) == ["step"] and _count(value["step"]):
        return {"step": value["step"]}
    if isinstance(value, list) and 0 < len(value) <= 1024 and all(_count(n) for n in value):
        return list(value)
    raise ValueError(
        "allowed_replicas must be a list of replica counts from 1 to 1024 such as [1, 2, 4, 8], "
        '{"step": N} with N from 1 to 1024, or "powers_of_two"'
    )


def _count(value: object) -> bool:
    return type(value) is int and 1 <= value <= 1024


ALLOWED_REPLICAS_SCHEMA = {
    "oneOf": [
        {
            "type": "array",
            "minItems": 1,
            "maxItems": 1024,
            "items": {"type": "integer", "minimum": 1, "maximum": 1024},
        },
        {
            "type": "object",
            "properties": {"step": {"type": "integer", "minimum": 1, "maximum": 1024}},
            "required": ["step"],
            "additionalProperties": False,
        },
        {"const": "powers_of_two"},
    ]
}
AllowedReplicas = Annotated[object, PlainValidator(_allowed_form), WithJsonSchema(ALLOWED_REPLICAS_SCHEMA)]


YEAR_SECONDS = 365 * 86_400


def _expected_duration(value: float) -> float:
    if not 0 < value <= YEAR_SECONDS:  # also refuses NaN and infinity
        raise ValueError(
            f"give the seconds the job is expected to run, more than 0 and at most {YEAR_SECONDS} (a year); "
            f"got {value}"
        )
    return value


MIN_FRACTION, MAX_FRACTION = 0.05, 0.95


def _gpu_fraction(value: float) -> float:
    """R20: a share of one GPU, 0.05 to 0.95 (whole GPUs are asked with gpus_per_replica)."""
    if not MIN_FRACTION <= value <= MAX_FRACTION:  # also refuses NaN and infinity
        raise ValueError(
            f"gpu_fraction is a share of one GPU from {MIN_FRACTION} to {MAX_FRACTION}; got {value} "
            "(for one or more whole GPUs give gpus_per_replica instead)"
        )
    return value


def exact_fraction(value: float) -> Fraction:
    """The share as an exact fraction (0.5 -> 1/2, 0.333 -> 333/1000, 1/3 as a float -> 1/3)."""
    return Fraction(repr(value)).limit_denominator(1000)


class JobCreate(_In):
    """A job of 1 master + ``workers`` workers; elastic when ``min_replicas < max_replicas``."""

    name: Name
    workers: Annotated[int, Field(ge=0, le=1023)] = 0
    min_replicas: Annotated[int, Field(ge=1, le=1024)] | None = None
    max_replicas: Annotated[int, Field(ge=1, le=1024)] | None = None
    gpus_per_replica: Annotated[int, Field(ge=1, le=1024)] = 1
    image: Annotated[str, Field(min_length=1, max_length=512)] | None = None
    command: Annotated[
        list[str],
        Field(min_length=1, max_length=1024),
        AfterValidator(_command),
        WithJsonSchema({"type": "array", "minItems": 1, "maxItems": 1024, "items": ARGUMENT_SCHEMA}),
    ]
    env: Annotated[
        dict[str, str], Field(max_length=256), AfterValidator(_env), WithJsonSchema(ENV_SCHEMA)
    ] = Field(default_factory=dict)
    interactive: bool = False
    priority: Annotated[int, Field(ge=-1_000_000, le=1_000_000)] = 0
    grace_period: Annotated[float, Field(ge=0, le=86_400)] | None = None
    # R16: the only replica counts it may run at; expanded to the explicit list by the validator
    allowed_replicas: AllowedReplicas | None = None
    topology: Literal["preferred", "required"] = Field(
        "preferred",
        description="Topology domains (racks, NVLink domains; R17): preferred starts the gang inside one "
        "domain where it fits, else across domains; required starts and grows it only inside one domain.",
    )
    # seconds the job is expected to run: its start-time forecast, and everyone else's, use it
    expected_duration: Annotated[float, AfterValidator(_expected_duration)] | None = None
    pod_template: JsonObject | None = Field(None, description=POD_TEMPLATE_DOC)
    gpu_fraction: Annotated[float, AfterValidator(_gpu_fraction)] | None = Field(
        None,
        description="R20: each replica takes this share of one GPU (0.05 to 0.95) instead of gpus_per_replica "
        "whole GPUs; replicas of the project's fractional jobs of the same kind share a GPU",
        json_schema_extra={"minimum": MIN_FRACTION, "maximum": MAX_FRACTION},
    )

    @model_validator(mode="after")
    def _sizes(self) -> JobCreate:
        spec = self.allowed_replicas
        listed = spec if isinstance(spec, list) else None
        replicas = self.workers + 1
        low = self.min_replicas if self.min_replicas is not None else min(listed or [replicas])
        high = self.max_replicas if self.max_replicas is not None else max(listed or [replicas])
        if spec is not None and "workers" not in self.model_fields_set:
            self.workers, replicas = low - 1, low  # a job with allowed sizes starts at its minimum
        if low > high:
            raise ValueError(f"min_replicas ({low}) is above max_replicas ({high})")
        if not low <= replicas <= high:
            raise ValueError(
                f"workers + 1 = {replicas} replicas must lie within min_replicas..max_replicas "
                f"({low}..{high}): change workers or the bounds"
            )
        self.min_replicas, self.max_replicas = low, high
        if self.gpu_fraction is not None:
            self._fractional()
        if spec is not None:
            self.allowed_replicas = replica_sizes.expand(spec, low, high)  # type: ignore[arg-type]
        return self

    def _fractional(self) -> None:
        if "gpus_per_replica" in self.model_fields_set and self.gpus_per_replica != 1:
            raise ValueError(
                f"give gpu_fraction (a share of one GPU per replica) or gpus_per_replica "
                f"({self.gpus_per_replica} whole GPUs), not both"
            )
        if self.min_replicas != self.max_replicas or self.allowed_replicas is not None:
            raise ValueError(
                "a job with gpu_fraction is not elastic: leave out min_replicas, max_replicas and "
                "allowed_replicas (it runs workers + 1 replicas)"
            )


class JobCheckpointed(BaseModel):
    """A job's report that a checkpoint is complete; ``at``: when (default: now). ISO 8601; UTC if naive."""

    model_config = ConfigDict(extra="forbid")

    at: datetime | None = None


class ReplicaPublic(BaseModel):
    index: int
    role: Literal["master", "worker"]
    status: ReplicaStatus
    node: str
    gpus: int
    gpu_ids: list[int] | None
    pid: int | None
    started_at: datetime | None
    exit_code: int | None
    share: float | None = Field(None, description="R20: a fractional replica's share of its shared GPU")
    shared_gpu: int | None = Field(
        None,
        description="R20: the scheduler's number of the node's shared GPU it runs on (gpu_ids: its device)",
    )


EtaSource = Literal["declared", "project", "cluster", "default"]


class EtaPublic(BaseModel):
    """When a waiting job is expected to start (or a running elastic job to grow), and to what size.

    ``start_p50`` is the median guess, ``start_p90`` a later one it will most likely not pass (None: not
    within the forecast's horizon). ``after`` names the job whose expected end frees the GPUs (None: they
    are free, or being freed, now); ``source`` says what that end is estimated from: the job's declared
    ``expected_duration``, its project's recent jobs of the same shape, the cluster's, or a default.
    """

    start_p50: datetime | None
    start_p90: datetime | None
    size: int
    after: str | None
    source: EtaSource | None
    computed_at: datetime


class JobPublic(BaseModel):
    project: str
    name: str
    status: JobStatus
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
    checkpointed_at: datetime | None = Field(None, description="its last complete checkpoint, as reported")
    speeds: dict[str, float] | None = Field(
        None, description="samples per second it reported at each replica count it ran (R19), by count"
    )
    allowed_replicas: list[int] | None = None  # R16: the only counts it runs at (None: any in min..max)
    topology: Literal["preferred", "required"] = "preferred"  # R17
    resize_cost_seconds: float | None = Field(
        None,
        description="R18: seconds one resize pauses it, measured from the decision to its training at the "
        "new size (a running mean of the last few); null: not measured yet, its project's resize cost applies",
    )
    resizes_measured: int = Field(0, description="R18: how many of its resizes were measured")
    expected_duration: float | None = None
    started_at: datetime | None = None
    eta: EtaPublic | None = None  # a pending job: when it starts
    grow_at: EtaPublic | None = None  # a running elastic job below max_replicas: when it grows
    gpu_fraction: float | None = Field(
        None, description="R20: each replica's share of one GPU (null: gpus_per_replica whole GPUs)"
    )


class NodeSlot(BaseModel):
    """A replica holding GPUs on a node (the dashboard's GPU map)."""

    project: str
    job: str
    index: int
    role: Literal["master", "worker"]
    gpu_ids: list[int]
    releasing: bool
    share: float | None = (
        None  # R20: a fractional replica's share of its one GPU (gpu_ids), shared with others
    )
    job_status: JobStatus | None = Field(
        default=None, description="its job's status: a releasing replica of a finished job is stopping"
    )


class WaitingSlot(BaseModel):
    """A replica placed on a node that waits for its GPUs to be freed (they are being released)."""

    project: str
    job: str
    index: int


NodeState = Literal["ready", "cordoned", "draining", "drained", "lost"]


class NodePublic(BaseModel):
    """``schedulable``: new replicas may be placed here (the executor and an admin both allow it).
    ``state``: an admin's (``draining`` while replicas of a drained node are still stopping)."""

    name: str
    gpus: int
    allocated_gpus: int
    schedulable: bool
    slots: list[NodeSlot]
    state: NodeState = "ready"
    state_since: datetime | None = None
    domain: str | None = (
        None  # R17: its topology domain (a rack, an NVLink domain), when the cluster names them
    )
    waiting: list[WaitingSlot] = Field(
        default_factory=list, description="replicas placed here that wait for their GPUs to be freed"
    )


class NodeDrain(BaseModel):
    """``grace_seconds``: how long replicas get to stop (None: each job's own grace period)."""

    model_config = ConfigDict(extra="forbid")

    grace_seconds: Annotated[float, Field(ge=0, le=86_400)] | None = None


class ClusterPublic(BaseModel):
    total_gpus: int
    allocated_gpus: int
    free_gpus: int
    nodes: list[NodePublic]
    projects: list[ProjectPublic]
    departments: list[DepartmentPublic]
    leader: bool


class EventPublic(BaseModel):
    id: int
    time: datetime
    kind: str
    project: str
    job: str
    replicas: list[int]
    reason: str
    cause: str | None
    lost_gpu_seconds: float | None = Field(
        default=None,
        description="for a shrink or an eviction: GPU-seconds of work the job lost (its GPUs times the time "
        "since its last checkpoint or restart)",
    )


class TokenCreate(_In):
    name: Name = "default"


class TokenPublic(BaseModel):
    id: int
    project: str
    name: str
    created_at: datetime
    token: str | None = Field(default=None, description="the secret; shown only once, when created")


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    role: str
    version: str
    database: str
    cycles: int
    last_cycle_at: datetime | None
    last_error: str | None


class Problem(BaseModel):
    """Every 4xx and 5xx answer: what went wrong and what to do about it."""

    detail: str


class FieldError(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationProblem(BaseModel):
    """A 422: ``detail`` sums up what to fix; ``errors`` lists each field's problem when the schema found it."""

    detail: str
    errors: list[FieldError] = Field(default_factory=list)


class AgentProgress(_In):
    """A job's training speed, as its script wrote it to ``$TIDE_CHECKPOINT_DIR/tide-progress``."""

    samples_per_second: float = Field(gt=0, le=1e12, description="the whole job's samples per second")
    steps_per_second: float | None = Field(default=None, gt=0, le=1e9, description="its steps per second")
    world_size: int | None = Field(
        default=None, ge=1, le=1_000_000, description="the training processes it measured at"
    )


class AgentPoll(_In):
    """What a job pod's agent (``tide agent``) reports each time it asks for its launch."""

    generation: int | None = Field(default=None, ge=0, description="the launch it runs (None: none yet)")
    state: Literal["warming", "warm", "running", "stopped", "exited"] = Field(
        description="warming/warm: its launcher imports torch / is ready; running: its launch trains; "
        "stopped: it stopped its launch for the next one; exited: its launch ended on its own"
    )
    exit_code: int | None = Field(default=None, description="the launch's exit code, once it exited")
    port: int | None = Field(
        default=None, ge=1, le=65535, description="a free port the agent can host the rendezvous on"
    )
    wait: float = Field(default=10.0, ge=0, le=60, description="seconds to wait for a new launch")
    checkpointed_at: float | None = Field(
        default=None,
        ge=0,
        le=1e11,
        description="Unix time of the job's last complete checkpoint, as its training script marked it",
    )
    noticed: bool = Field(
        default=False,
        description="it passed a preemption notice (SIGUSR1) to the training of the launch it runs",
    )
    progress: AgentProgress | None = Field(
        default=None, description="the training speed its script reported (goodput-aware growth, R19)"
    )


class AgentOrder(BaseModel):
    """The service's answer: ``launch`` (start launch ``generation`` at this size and rank), ``notice`` (pass
    SIGUSR1 to the running launch's training: its GPUs are being reclaimed or preempted, SIGTERM follows after
    the project's preemption notice) or ``wait``."""

    action: Literal["launch", "notice", "wait"]
    generation: int | None = None
    world_size: int | None = None
    rank: int | None = None
    rdzv_port: int | None = None
    run_id: str | None = None
