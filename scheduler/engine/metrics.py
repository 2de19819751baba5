"""Prometheus metrics of the scheduling loop: cycle durations, decisions by kind and cause, errors.

Contract: ``EngineMetrics(registry)`` registers its collectors on the given ``CollectorRegistry`` (one per
service, never the process-global one, so several services in one process do not clash). The engine calls
``cycle_done`` after every cycle it ran, ``cycle_failed`` when a cycle (or a release turn) raised, ``release_done`` after a release turn between
cycles, ``eta_done``/``eta_failed``
after a start-time forecast, ``phase_done`` with the seconds each phase of a cycle took, ``state_read`` after each read of the snapshot (full checks of the one kept in
memory and the drift they found), and ``executor_error`` when an executor call failed and was handled (a replica
that could not start). Every label is bounded: ``kind`` is a
decision (``start``, ``grow``, ``shrink``, ``evict``), ``cause`` a ``scheduler.core.plan.Cause`` value,
``operation`` ``start`` (a launch refused) or ``cycle`` (an executor call that failed a cycle), ``error`` one of ``executor``, ``database``, ``other``, ``phase`` one of ``PHASES``; never free text.
All label combinations exist from the start (at 0), so ``rate()`` and ``increase()`` see the first one;
``project`` (the work preemptions cost, ``tide_preemption_lost_gpu_seconds_total``) is bounded by the
projects an admin created, and a project's series starts at 0 in the first cycle that preempts anything
of it.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from sqlalchemy.exc import DBAPIError

from scheduler.core.plan import Action, Cause, Decision
from scheduler.executors.base import ExecutorError

ETA_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
EXECUTOR_OPERATIONS = ("start", "cycle")  # a replica that could not start; a call that failed a cycle
ERROR_KINDS = ("executor", "database", "other")
PHASES = (
    "observe",
    "read",
    "state_check",
    "plan",
    "persist",
    "forecast",
    "apply",
    "plan_check",
)  # of a cycle, each timed (tide_cycle_phase_seconds)


def error_kind(error: BaseException) -> str:
    """A bounded category for a failed cycle."""
    if isinstance(error, ExecutorError):
        return "executor"
    if isinstance(error, DBAPIError):
        return "database"
    return "other"


class EngineMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.cycle_seconds = Histogram(
            "tide_cycle_duration_seconds",
            "Seconds one scheduling cycle took (observe, plan, persist, apply).",
            buckets=CYCLE_BUCKETS,
            registry=self.registry,
        )
        self.decisions = Counter(
            "tide_decisions",
            "Scheduling decisions applied: kind start/grow/shrink/evict (grow and shrink are resizes, "
            "evict an eviction), by cause (reclaim, preempt, limit, quota, node, consolidate, fair-share).",
            ["kind", "cause"],
            registry=self.registry,
        )
        self.executor_errors = Counter(
            "tide_executor_errors",
            "Executor calls that failed, by operation.",
            ["operation"],
            registry=self.registry,
        )
        self.cycle_errors = Counter(
            "tide_cycle_errors",
            "Scheduling cycles that failed (retried next period), by error kind.",
            ["error"],
            registry=self.registry,
        )
        self.lost_gpu_seconds = Counter(
            "tide_preemption_lost_gpu_seconds",
            "GPU-seconds of work lost to shrinks and evictions the scheduler decided (reclaim, preemption, "
            "limits, moves; not lost nodes), by the project whose job lost them: each job's GPUs times the "
            "time since its last checkpoint or restart (R5 takes the victims that lose the least first).",
            ["project"],
            registry=self.registry,
        )
        self.eta_seconds = Histogram(
            "tide_eta_recompute_seconds",
            "Seconds one start-time forecast of every waiting job took (in its worker process).",
            buckets=ETA_BUCKETS,
            registry=self.registry,
        )
        self.eta_failures = Counter(
            "tide_eta_failures",
            "Start-time forecasts that failed (the ETAs stored before stay).",
            registry=self.registry,
        )
        self.phase_seconds = Histogram(
            "tide_cycle_phase_seconds",
            "Seconds each phase of a scheduling cycle took: observe (nodes synced, the executor observed, its "
            "observations recorded), read (the snapshot, read again where it changed), state_check (now and then, the "
            "whole database read again to check the snapshot kept in memory), plan (plan_cycle alone), persist (the "
            "plan written), forecast (a start-time forecast handed to its worker or stored, finished jobs past their "
            "retention removed), apply (stops and launches) and plan_check (now and then, plan_cycle again without "
            "what the last cycles kept, to check the plan made with it).",
            ["phase"],
            buckets=CYCLE_BUCKETS,
            registry=self.registry,
        )
        self.release_seconds = Histogram(
            "tide_release_turn_seconds",
            "Seconds one release turn took: between cycles, while replicas are stopping, what exited recorded "
            "and what its GPUs were kept for launched, without planning again.",
            buckets=CYCLE_BUCKETS,
            registry=self.registry,
        )
        self.state_checks = Counter(
            "tide_state_checks",
            "Full reads of the database that checked the scheduling snapshot the engine keeps in memory.",
            registry=self.registry,
        )
        self.state_drift = Counter(
            "tide_state_drift",
            "Places (a job, its note, the projects, the departments, the nodes) where a check found the "
            "snapshot kept in memory different from the database (0 unless a change went unseen).",
            registry=self.registry,
        )
        self.plan_checks = Counter(
            "tide_plan_checks",
            "Plans made again from scratch (plan_cycle without what the last cycles kept) to check the plan "
            "made with it.",
            registry=self.registry,
        )
        self.plans_kept = Counter(
            "tide_plans_kept",
            "Cycles that carried out the last plan again without planning: the snapshot had not changed and no "
            "time the plan was compared with (a settle time, a minimum runtime, the end of the ten seconds whose "
            "least-work-lost order a reclaim took a victim by) had come.",
            registry=self.registry,
        )
        self.plan_drift = Counter(
            "tide_plan_drift",
            "Plan checks that found the plan made with what the last cycles kept different from the plan made "
            "from scratch (0 unless something kept was reused where it should not have been; the plan from "
            "scratch is the one carried out).",
            registry=self.registry,
        )
        for action in Action:
            for cause in Cause:
                self.decisions.labels(kind=action.value, cause=cause.value)
        for phase in PHASES:
            self.phase_seconds.labels(phase=phase)
        for operation in EXECUTOR_OPERATIONS:
            self.executor_errors.labels(operation=operation)
        for kind in ERROR_KINDS:
            self.cycle_errors.labels(error=kind)

    def cycle_done(self, seconds: float, applied: Iterable[Decision]) -> None:
        self.cycle_seconds.observe(seconds)
        self._applied(applied)

    def _applied(self, applied: Iterable[Decision]) -> None:
        for decision in applied:
            self.decisions.labels(kind=decision.action.value, cause=decision.cause.value).inc()
            if decision.action in (Action.SHRINK, Action.EVICT) and decision.cause is not Cause.NODE:
                self.lost_gpu_seconds.labels(project=decision.project).inc(decision.lost_gpu_seconds)

    def cycle_failed(self, error: BaseException) -> None:
        kind = error_kind(error)
        self.cycle_errors.labels(error=kind).inc()
        if kind == "executor":
            self.executor_errors.labels(operation="cycle").inc()

    def phase_done(self, phase: str, seconds: float) -> None:
        self.phase_seconds.labels(phase=phase).observe(seconds)

    def release_done(self, seconds: float, applied: Iterable[Decision] = ()) -> None:
        """A release turn took ``seconds`` and applied ``applied`` (starts the last plan held GPUs for)."""
        self.release_seconds.observe(seconds)
        self._applied(applied)

    def state_read(self, checks: int, drift: int, check_seconds: float | None = None) -> None:
        """A read of the kept snapshot ran ``checks`` full checks (``check_seconds`` the last one took, timed
        as the phase ``state_check`` and not as ``read``) that found ``drift`` places different."""
        self.state_checks.inc(checks)
        self.state_drift.inc(drift)
        if check_seconds is not None:
            self.phase_seconds.labels(phase="state_check").observe(check_seconds)

    def plan_kept(self) -> None:
        self.plans_kept.inc()

    def plan_checked(self, seconds: float, *, drifted: bool) -> None:
        self.phase_seconds.labels(phase="plan_check").observe(seconds)
        self.plan_checks.inc()
        if drifted:
            self.plan_drift.inc()

    def eta_done(self, seconds: float) -> None:
        self.eta_seconds.observe(seconds)

    def eta_failed(self) -> None:
        self.eta_failures.inc()

    def executor_error(self, operation: str) -> None:
        self.executor_errors.labels(operation=operation).inc()
