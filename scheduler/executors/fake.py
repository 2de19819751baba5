"""An in-memory executor: replicas are records, not processes (fast tests; ``tide serve --executor memory``,
which runs the scheduling loop at cluster scale without starting anything).

Contract: behaves like the local executor as the engine sees it. ``start`` refuses a GPU already held by a
live replica on the same node (``OverAllocationError``): tests that drive the engine hard rely on this to
prove nothing is ever over-allocated. ``notify`` records the preemption notice (``notified``, replica ids
in order; the observation says nothing of it); ``started`` keeps the last ``history`` launches, so a service
on this executor runs for days in bounded memory. ``stop`` ends a replica at once (exit -15) unless ``stop_delay`` calls
to ``observe`` must pass first. ``finish`` lets a test end a replica with an exit code. Every call costs
the same whatever the number of replicas (GPUs held are indexed by node), except ``observe``, which reports
them all.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from scheduler.core.model import Node
from scheduler.executors.base import Announcement, Capabilities, ExecutorError, LaunchSpec, Observation


class OverAllocationError(ExecutorError):
    """A replica was started on a GPU that a live replica holds."""


@dataclass
class _Record:
    spec: LaunchSpec
    observation: Observation
    stop_countdown: int | None = None


class FakeExecutor:
    """In-memory replicas on virtual nodes."""

    capabilities = Capabilities(preemption_notices=True)

    def __init__(self, nodes: tuple[Node, ...], *, stop_delay: int = 0, history: int = 1_000) -> None:
        self._nodes = nodes
        self._sizes = {n.name: n.gpus for n in nodes}
        self._held: dict[str, set[int]] = {}  # node -> GPU ids of running replicas
        self._sharing: dict[str, dict[int, set[int]]] = {}  # R20: node -> device -> fractional replicas on it
        self.stop_delay = stop_delay
        self.records: dict[int, _Record] = {}
        # the last ``history`` starts, oldest first: a service that runs for days keeps a bounded memory
        self.started: deque[LaunchSpec] = deque(maxlen=history)
        self.refused: list[str] = []
        self.notified: list[int] = []
        self._next_pid = 1000

    @property
    def real_gpus(self) -> bool:
        return False

    def nodes(self) -> tuple[Node, ...]:
        return self._nodes

    def adopt(self) -> None:
        """Nothing to reload: memory does not outlive the process."""

    def live(self) -> list[LaunchSpec]:
        return [r.spec for r in self.records.values() if r.observation.running]

    def observe(self) -> dict[int, Observation]:
        for record in self.records.values():
            if record.stop_countdown is not None and record.observation.running:
                if record.stop_countdown <= 0:
                    self._end(record, -15)
                record.stop_countdown -= 1
        return {rid: r.observation for rid, r in self.records.items()}

    def start(self, spec: LaunchSpec) -> Observation:
        if spec.replica_id in self.records:
            raise ExecutorError(f"replica {spec.replica_id} was already started")
        size = self._sizes.get(spec.node)
        if size is None or any(g < 0 or g >= size for g in spec.gpu_ids):
            raise ExecutorError(f"no GPUs {spec.gpu_ids} on node {spec.node}")
        held = self._held.setdefault(spec.node, set())
        sharing = self._sharing.setdefault(spec.node, {})
        if spec.gpu_share is not None:  # R20: a fractional replica shares its device, with fractions only
            device = spec.gpu_ids[0]
            if device in held:
                self.refused.append(f"replica {spec.replica_id}: GPU {device} on {spec.node} held whole")
                raise OverAllocationError(f"GPU {device} on {spec.node} is held by a whole-GPU replica")
            sharing.setdefault(device, set()).add(spec.replica_id)
        elif held & (set(spec.gpu_ids) | {g for g, ids in sharing.items() if ids}):
            self.refused.append(
                f"replica {spec.replica_id}: GPUs {sorted(held & set(spec.gpu_ids))} on {spec.node}"
            )
            raise OverAllocationError(f"GPUs {sorted(held & set(spec.gpu_ids))} on {spec.node} are in use")
        self._next_pid += 1
        observation = Observation(replica_id=spec.replica_id, pid=self._next_pid, running=True)
        self.records[spec.replica_id] = _Record(spec, observation)
        if spec.gpu_share is None:
            held.update(spec.gpu_ids)
        self.started.append(spec)
        return observation

    def notify(self, replica_id: int) -> None:
        record = self.records.get(replica_id)
        if record is not None and record.observation.running:
            self.notified.append(replica_id)

    def stop(self, replica_id: int, grace: float) -> None:
        record = self.records.get(replica_id)
        if record is None or not record.observation.running or record.stop_countdown is not None:
            return
        record.observation = replace(record.observation, stopping=True)
        record.stop_countdown = self.stop_delay

    def forget(self, replica_id: int) -> None:
        record = self.records.pop(replica_id, None)
        if record is not None and record.observation.running:
            self._release(record)

    def _release(self, record: _Record) -> None:
        spec = record.spec
        if spec.gpu_share is None:
            self._held.get(spec.node, set()).difference_update(spec.gpu_ids)
        else:
            self._sharing.get(spec.node, {}).get(spec.gpu_ids[0], set()).discard(spec.replica_id)

    def _end(self, record: _Record, exit_code: int) -> None:
        record.observation = replace(record.observation, running=False, exit_code=exit_code)
        self._release(record)

    def finish(self, project: str, job: str, index: int, exit_code: int) -> None:
        """End a running replica of ``project/job`` as if its process exited with ``exit_code``."""
        for record in self.records.values():
            spec = record.spec
            if (spec.project, spec.job, spec.index) == (project, job, index) and record.observation.running:
                self._end(record, exit_code)
                return
        raise KeyError(f"no running replica {index} of {project}/{job}")

    def read_log(self, project: str, job: str, index: int, tail: int | None = None) -> str | None:
        wanted = (project, job, index)
        found = any(
            (r.spec.project, r.spec.job, r.spec.index) == wanted for r in self.records.values()
        ) or any((s.project, s.job, s.index) == wanted for s in self.started)
        return f"fake replica {index} of {project}/{job}\n" if found else None

    def put_agent_token(self, project: str, job: str, token: str) -> None:
        """No agents run in memory."""

    def announce(self, announcement: Announcement) -> None:
        """Nothing shows decisions here but Tide's own event log."""

    def close(self) -> None:
        """Nothing to release."""
