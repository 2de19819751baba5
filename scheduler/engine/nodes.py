"""Nodes an admin takes away: cordon for maintenance, drain with a grace period, or lose one at once.

Contract:
- ``set_node_state(session, name, state, now=..., grace=...)`` records an admin's decision on the node's row:
  ``ready`` (uncordon), ``cordoned`` (no new replicas; running ones stay), ``drained`` (no new replicas; the
  running ones are stopped with ``grace`` seconds, the job's own grace period when None) or ``lost`` (a
  fault injected on purpose: its replicas are killed at once, as when a spot instance is reclaimed). A
  drained or lost node stays unschedulable until it is set ``ready`` again; cordoning one leaves it as it
  is (it is already out of service). Returns the row, or None for an unknown node.
- ``release_taken_nodes(session, executor, now=..., knobs=...)`` runs every cycle in the leader: each
  replica still wanted on a drained or lost node is released (``scheduler.store.lifecycle.release``). An
  elastic job that keeps ``min_replicas`` and its master elsewhere shrinks (those replicas only); any other
  job is evicted whole, back to ``pending``, and starts again from its checkpoint where a gang fits (R8),
  like an eviction by the core (the rule: ``scheduler.core.taken_nodes``).
  Replicas on the node are signalled at once with the node's grace (0 for a lost node: SIGKILL); the
  job's other replicas are left to ``reconcile.stop_unwanted`` (master last). Each release is an event
  (``shrink`` or ``evict``, cause ``node``) whose reason names the node. Since the replicas are marked
  ``stop`` before they are signalled, their exit is a requested one: it never fails the job.
The core sees these nodes as unschedulable (``scheduler.store.mapper``), so nothing is placed there again.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from scheduler.core.plan import Cause
from scheduler.core.taken_nodes import on_taken_nodes
from scheduler.engine.reconcile import Knobs
from scheduler.executors.base import Executor
from scheduler.statuses import ACTIVE, ReplicaDesired
from scheduler.store import lifecycle
from scheduler.store.models import JobRow, NodeRow, ReplicaRow

log = logging.getLogger(__name__)
NODE_STATES = ("ready", "cordoned", "drained", "lost")
TAKEN = ("drained", "lost")


def set_node_state(
    session: Session, name: str, state: str, *, now: float, grace: float | None = None
) -> NodeRow | None:
    """Record an admin's ``state`` for node ``name``; see the module's contract."""
    if state not in NODE_STATES:
        raise ValueError(f"unknown node state {state!r}: use one of {', '.join(NODE_STATES)}")
    row = session.get(NodeRow, name, with_for_update=True)
    if row is None:
        return None
    if state == "cordoned" and row.state in TAKEN:
        return row  # already out of service; cordoning must not bring its replicas back
    if row.state != state or (state == "drained" and grace != row.drain_grace):
        row.state = state
        row.drain_grace = grace if state == "drained" else 0.0 if state == "lost" else None
        row.state_since = now
    log.info("node %s is now %s", name, state)
    return row


def release_taken_nodes(session: Session, executor: Executor, *, now: float, knobs: Knobs) -> int:
    """Release the replicas still wanted on drained or lost nodes; return how many jobs were touched."""
    taken = {n.name: n for n in session.scalars(select(NodeRow).where(NodeRow.state.in_(TAKEN))).all()}
    if not taken:
        return 0
    on_taken = session.scalars(
        select(ReplicaRow)
        .join(ReplicaRow.job)
        .where(
            ReplicaRow.node.in_(taken), ReplicaRow.desired == ReplicaDesired.RUN, JobRow.status.in_(ACTIVE)
        )
        .options(selectinload(ReplicaRow.job).selectinload(JobRow.replicas))
        .options(selectinload(ReplicaRow.job).selectinload(JobRow.project))
    ).all()
    by_job: dict[int, list[ReplicaRow]] = defaultdict(list)
    for replica in on_taken:
        by_job[replica.job_id].append(replica)
    for replicas in by_job.values():
        _release_job(session, executor, replicas, taken, now=now, knobs=knobs)
    return len(by_job)


def _release_job(
    session: Session,
    executor: Executor,
    gone: list[ReplicaRow],
    taken: dict[str, NodeRow],
    *,
    now: float,
    knobs: Knobs,
) -> None:
    """Shrink or evict the job of ``gone`` (as ``scheduler.core.taken_nodes`` decides); stop ``gone`` now."""
    job = gone[0].job
    kept = [r.index for r in job.replicas if r.desired == ReplicaDesired.RUN and r.node not in taken]
    what = " and ".join(f"node {n} was {taken[n].state}" for n in sorted({r.node for r in gone}))
    loss = on_taken_nodes(job.min_replicas, [r.index for r in gone], kept)
    if loss.evict:
        reason = f"{what}: the job restarts from its checkpoint on other nodes when its gang fits"
    else:
        reason = f"{what}: the job goes on with {len(kept)} replica(s) and grows again when GPUs are free"
    marked = lifecycle.release(
        session,
        job,
        loss.indices,
        evict=loss.evict,
        now=now,
        cause=Cause.NODE,
        reason=reason,
        pending_reason=reason if loss.evict else None,
    )
    stopping = set(marked)
    for replica in gone:
        if replica in stopping:
            _stop_now(executor, replica, taken[replica.node], now=now, knobs=knobs)


def _stop_now(executor: Executor, replica: ReplicaRow, node: NodeRow, *, now: float, knobs: Knobs) -> None:
    """Signal ``replica`` (marked to stop) now, with its node's grace, else its job's, else the service's."""
    grace = node.drain_grace
    if grace is None:
        grace = replica.job.grace_period if replica.job.grace_period is not None else knobs.grace_period
    executor.stop(replica.id, grace)
    replica.stop_requested_at = now
