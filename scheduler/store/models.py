"""SQLAlchemy 2 ORM rows: the persistent state of a Tide service.

Contract: plain declarative rows, no behaviour. Times are float seconds since the epoch (the core's clock).
Converting rows to core dataclasses happens only in ``scheduler.store.mapper``; to API schemas only in
``api.server.convert``. The schema itself is owned by the Alembic history in ``migrations/``: any change here needs
a new migration (never edit one that landed).

A ``ReplicaRow`` is a *wanted placement* first: the engine inserts it when the core decides START/GROW and
launches the process once its node has room (``pid`` is set then). ``desired`` says what the engine wants:
``run``, ``stop`` (shrink/evict/cancel: signal it, delete the row once it exited, unless its job finished),
or ``done`` (it exited on its own; kept for the job's history). Statuses and ``desired`` are strings holding
the words of ``scheduler.statuses``; only ``scheduler.store.lifecycle`` changes them once a row exists.

A ``NodeRow`` carries two opinions: ``schedulable`` is the executor's (Kubernetes cordon, NotReady, a node
gone), ``state`` an admin's (``scheduler.engine.nodes``); the core places onto a node only when both agree.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from scheduler.statuses import ReplicaDesired, ReplicaStatus


class Base(DeclarativeBase):
    """Declarative base of every Tide row."""


class DepartmentRow(Base):
    __tablename__ = "departments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    deserved_gpus: Mapped[int] = mapped_column(Integer)
    over_quota_weight: Mapped[float] = mapped_column(Float, default=1.0)
    limit_gpus: Mapped[int | None] = mapped_column(Integer, nullable=True)
    fair_share_gpus: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    # R15: its projects' jobs are spared by reclaim this long after a start or resize (0: off)
    min_runtime_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # its projects' preemption notice: SIGUSR1 this long before the SIGTERM of a reclaim (NULL: none)
    preemption_notice_seconds: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # its projects' jobs' pod defaults ({"template": ..., "allow": ...}, scheduler.executors.kube.podtemplate)
    pod_defaults: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # R18: seconds a resize pauses its projects' jobs not yet measured (NULL: the service's default)
    resize_cost_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)

    projects: Mapped[list[ProjectRow]] = relationship(back_populates="department")


class ProjectRow(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    deserved_gpus: Mapped[int] = mapped_column(Integer)
    over_quota_weight: Mapped[float] = mapped_column(Float, default=1.0)
    limit_gpus: Mapped[int | None] = mapped_column(Integer, nullable=True)
    allow_over_quota: Mapped[bool] = mapped_column(Boolean, default=True)
    department_id: Mapped[int | None] = mapped_column(ForeignKey("departments.id"), nullable=True)
    fair_share_gpus: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    # fair share over time (R14): decayed GPU-seconds above quota as of ``usage_at``, and the over-quota
    # weight the last cycle used for it (None until a cycle ran with a usage half-life)
    usage_gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    usage_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    usage_weight: Mapped[float | None] = mapped_column(Float, nullable=True)
    # R15: its own minimum runtime in seconds; NULL: its department's (none without a department)
    min_runtime_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    # its own preemption notice in seconds; NULL: its department's (none without a department); 0: none
    preemption_notice_seconds: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # its jobs' pod defaults, over its department's (NULL: its department's only)
    pod_defaults: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # R18: seconds a resize pauses its jobs not yet measured; NULL: its department's, else the service's
    resize_cost_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)

    department: Mapped[DepartmentRow | None] = relationship(back_populates="projects")
    jobs: Mapped[list[JobRow]] = relationship(back_populates="project", cascade="all, delete-orphan")


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("project_id", "name", name="uq_jobs_project_name"),
        # PostgreSQL: room on each page for the rewrites of a job's note every cycle (HOT updates; 0016)
        {"postgresql_with": {"fillfactor": 70}},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(63))
    status: Mapped[str] = mapped_column(String(16), index=True)
    workers: Mapped[int] = mapped_column(Integer)
    min_replicas: Mapped[int] = mapped_column(Integer)
    max_replicas: Mapped[int] = mapped_column(Integer)
    gpus_per_replica: Mapped[int] = mapped_column(Integer)
    # the only replica counts it may run at, ascending (R16); NULL: any count in min..max
    allowed_replicas: Mapped[list[int] | None] = mapped_column(JSON, nullable=True)
    # R17: "preferred" (start inside one topology domain where it fits) or "required" (only there)
    topology: Mapped[str] = mapped_column(String(16), default="preferred", server_default="preferred")
    image: Mapped[str | None] = mapped_column(String(512), nullable=True)
    command: Mapped[list[str]] = mapped_column(JSON)
    env: Mapped[dict[str, str]] = mapped_column(JSON)
    interactive: Mapped[bool] = mapped_column(Boolean, default=False)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    grace_period: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    submitted_at: Mapped[float] = mapped_column(Float)
    last_resized_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # the last complete checkpoint the job reported (its training script's mark file, or the REST call)
    checkpointed_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # R19: the newest samples per second it reported at each size it ran, {"replicas": rate}
    progress_rates: Mapped[dict[str, float] | None] = mapped_column(JSON, nullable=True)
    # R18: what one resize pauses it, as measured (decision -> training at the new size; mean of the last few),
    # how many were measured, and when the resize being measured now was decided (NULL: none)
    resize_cost_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    resizes_measured: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    resize_from: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # its first start
    expected_duration: Mapped[float | None] = mapped_column(Float, nullable=True)  # seconds, as declared
    eta: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # scheduler.engine.eta_store
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    generation: Mapped[int] = mapped_column(Integer, default=0)
    pending_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    queue_position: Mapped[int | None] = mapped_column(Integer, nullable=True)
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    agent_token_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)  # in-place launches
    # its own pod template (Kubernetes pods), merged over its project's pod defaults at each launch
    pod_template: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # R20: the share of one GPU each replica takes, exact ("1/2"; NULL: whole GPUs, gpus_per_replica of them)
    gpu_fraction: Mapped[str | None] = mapped_column(String(16), nullable=True)

    project: Mapped[ProjectRow] = relationship(back_populates="jobs")
    replicas: Mapped[list[ReplicaRow]] = relationship(
        back_populates="job", cascade="all, delete-orphan", order_by="ReplicaRow.index"
    )


class ReplicaRow(Base):
    __tablename__ = "replicas"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(253))
    gpus: Mapped[int] = mapped_column(Integer)
    gpu_ids: Mapped[list[int] | None] = mapped_column(JSON, nullable=True)
    desired: Mapped[str] = mapped_column(String(8), default=ReplicaDesired.RUN)
    status: Mapped[str] = mapped_column(String(16), default=ReplicaStatus.STARTING)
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    stop_requested_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # in-place launches (scheduler.elastic.inplace): the launch this replica's agent is to run, and since when
    launch_generation: Mapped[int | None] = mapped_column(Integer, nullable=True)
    launch_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # preemption notice (scheduler.elastic.notice): seconds between SIGUSR1 and SIGTERM, set when a reclaim
    # or preemption releases it (already cut to its grace), and when its SIGUSR1 was given
    notice_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    noticed_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # R20: a fractional replica's share ("1/2") of its node's shared GPU number ``shared_gpu`` (the scheduler's
    # number; ``gpu_ids`` holds the device it was given)
    share: Mapped[str | None] = mapped_column(String(16), nullable=True)
    shared_gpu: Mapped[int | None] = mapped_column(Integer, nullable=True)

    job: Mapped[JobRow] = relationship(back_populates="replicas")


class AgentReportRow(Base):
    """What a replica's agent last said (``api.server.routes.agent``): the launch it runs and how it is doing.
    ``port``/``port_generation``: the rendezvous port the master replica's agent hosts that launch on."""

    __tablename__ = "agent_reports"

    replica_id: Mapped[int] = mapped_column(ForeignKey("replicas.id", ondelete="CASCADE"), primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    generation: Mapped[int | None] = mapped_column(Integer, nullable=True)
    state: Mapped[str] = mapped_column(String(16))
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    port_generation: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reported_at: Mapped[float] = mapped_column(Float)


def takes_replicas(schedulable: bool, state: str) -> bool:
    """Whether a node takes new replicas: the executor says it may and an admin left it ``ready``."""
    return schedulable and state == "ready"


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    gpus: Mapped[int] = mapped_column(Integer)
    schedulable: Mapped[bool] = mapped_column(Boolean, default=True)  # the executor's view
    # an admin's: ready, cordoned (no new replicas), drained (replicas stopped), lost (killed at once)
    state: Mapped[str] = mapped_column(String(16), default="ready", server_default="ready")
    drain_grace: Mapped[float | None] = mapped_column(Float, nullable=True)
    state_since: Mapped[float | None] = mapped_column(Float, nullable=True)
    # R17: its topology domain (a rack, an NVLink domain) as the executor reports it; NULL: none
    domain: Mapped[str | None] = mapped_column(String(253), nullable=True)


class EventRow(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    time: Mapped[float] = mapped_column(Float, index=True)
    kind: Mapped[str] = mapped_column(String(16))
    project: Mapped[str] = mapped_column(String(63))
    job: Mapped[str] = mapped_column(String(63))
    replicas: Mapped[list[int]] = mapped_column(JSON)
    reason: Mapped[str] = mapped_column(Text)
    cause: Mapped[str | None] = mapped_column(String(16), nullable=True)
    details: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class TokenRow(Base):
    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(63))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)


class SchemaCompatRow(Base):
    """One row, written by ``scheduler.store.migrate`` with every migration: the schema's revision and the
    oldest revision whose code still runs against it (N/N+1: docs/kubernetes.md, 'Upgrades')."""

    __tablename__ = "schema_compat"

    revision: Mapped[str] = mapped_column(String(64), primary_key=True)
    compatible_with: Mapped[str] = mapped_column(String(64))
