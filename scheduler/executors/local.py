"""The local executor: each replica is a real process tree on this machine, in its own process group.

Contract (see ``base.Executor``): ``start`` runs the replica's argv (never through a shell) under
``shim.py`` (``posix_spawn``) in a new session, with ``TIDE_*`` identity and the given env,
``CUDA_VISIBLE_DEVICES`` set to its GPUs when they are real, ``TIDE_CHECKPOINT_DIR`` (the job's own, else
``DATA/checkpoints/PROJECT/JOB-ID``; the master's observations carry the progress mark the job writes there,
``checkpoints.read_mark``), and stdout+stderr appended to
``DATA/logs/PROJECT/JOB/replica-I.log``. A record per
replica (``DATA/replicas/ID.json``: pid, its kernel start time, stop state) outlives the service: ``adopt``
reloads them, and a pid is trusted only while ``/proc/PID/stat`` shows the same start time, so a reused pid
is never signalled. ``notify`` (the preemption notice) sends SIGUSR1 to the replica's training processes
only, not to its group (``procs``): the command the shim runs, or for a torchrun job the workers of its
launcher or torchrun agent (torchrun does not forward SIGUSR1; it would end the agent). ``stop`` sends
SIGTERM to the group; ``observe`` sends SIGKILL once the grace has passed,
and when a replica ends, to whatever it left behind, in its group or not (``TIDE_REPLICA_UID``).
Virtual nodes share the machine: with no real GPUs, ``gpu_ids`` are bookkeeping only.

A job whose command is a torchrun launch (``scheduler.elastic.torchrun_argv.uses_torchrun``) gets the
``PET_*`` environment of a fixed-size launch (``local_launches``), and its observations say whether its
workers started (``ready``). Every replica of a plain ``torchrun ARGS`` job runs in a launcher
(``scheduler.elastic.agent.pool``: an idle, pre-warmed one, else one started for it), which plays torchrun's
agent when it can (``torchrun_agent``) and hands over to torchrun otherwise; so all replicas of a launch take
the same path. Processes are read from ``/proc`` by ``scheduler.elastic.agent.procs``.
The executor supports the engine's coordinated restart (``capabilities.coordinated_restarts``): a replica
id may be started again once its earlier process was observed to exit and was forgotten.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from scheduler.core.model import Node
from scheduler.elastic.agent.checkpoints import read_mark
from scheduler.elastic.agent.pool import WarmPool, eligible
from scheduler.elastic.agent.procs import (
    REPLICA_UID,
    kill_marked,
    poll_child,
    signal_generation,
    start_ticks,
    with_workers,
)
from scheduler.elastic.agent.progress import read_progress
from scheduler.elastic.agent.trace import trace
from scheduler.elastic.torchrun_argv import argv_for, uses_torchrun
from scheduler.executors import shim
from scheduler.executors.base import (
    LOST_EXIT_CODE,
    Announcement,
    Capabilities,
    ExecutorError,
    LaunchSpec,
    Observation,
)
from scheduler.executors.local_launches import TorchrunLaunches, checkpoint_dir

MAX_LOG_READ_BYTES = 1 << 20
REFILL_DELAY_S = 2.0  # after a launch formed, before the pool of warm launchers refills


@dataclass
class _Record:
    replica_id: int
    project: str
    job: str
    index: int
    node: str
    pid: int
    start_ticks: int | None
    started_at: float
    stop_sent_at: float | None = None
    grace: float = 0.0
    killed: bool = False
    exit_code: int | None = None
    torchrun: bool = False
    ready: bool = False  # torchrun: a worker process was seen (the launch formed)
    exit_file: str | None = None  # a warm launcher's (None: DATA/replicas/ID.exit)
    marker: str | None = None  # a warm launcher's TIDE_REPLICA_UID (None: the replica's own)
    workers_file: str | None = None  # a warm launcher's workers create it when the launch formed
    checkpoint_dir: str | None = None  # the job's TIDE_CHECKPOINT_DIR (its mark file says its progress)


@dataclass(frozen=True, slots=True)
class _Started:
    pid: int
    exit_file: str | None
    marker: str | None
    workers_file: str | None


def spawn_shim(argv: list[str], env: Mapping[str, str], log: Path, exit_file: Path) -> int:
    """Start ``argv`` under the shim in a new session (its own process group), output appended to ``log``."""
    shim_argv = [sys.executable, "-I", "-S", shim.__file__, str(exit_file), "--", *argv]
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    # posix_spawn, not Popen: no Popen object to outlive (a restarted service adopts by pid).
    return os.posix_spawn(sys.executable, shim_argv, env, file_actions=actions, setsid=True)


def visible_gpu_count() -> int:
    """GPUs that torch sees on this machine; 0 without an NVIDIA driver or without torch."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        import torch  # noqa: PLC0415 - costs seconds; only when a GPU driver is present

        return int(torch.cuda.device_count())
    except Exception:
        return 0


def pool_size(nodes: tuple[Node, ...]) -> int:
    """Idle warm launchers to keep: ``$TIDE_WARM_LAUNCHERS``, else one per GPU up to 8 (0: none kept idle;
    each replica then gets a launcher started for it)."""
    raw = os.environ.get("TIDE_WARM_LAUNCHERS", "")
    return int(raw) if raw.isdigit() else min(8, sum(n.gpus for n in nodes))


class LocalExecutor:
    """Replicas as process groups on this machine; state under ``data_dir``."""

    capabilities = Capabilities(coordinated_restarts=True, preemption_notices=True)

    def __init__(self, data_dir: Path, nodes: tuple[Node, ...], *, real_gpus: bool = False) -> None:
        self._nodes = nodes
        self._data_dir = data_dir
        self._torchrun = TorchrunLaunches()
        self._pool_size = pool_size(nodes)
        self._pool: WarmPool | None = None
        self._formed_at = 0.0  # when a torchrun launch last formed
        self._real_gpus = real_gpus
        self.state_dir = data_dir / "replicas"
        self.log_dir = data_dir / "logs"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._instance = hashlib.blake2b(str(data_dir.resolve()).encode(), digest_size=6).hexdigest()
        self._records: dict[int, _Record] = {}

    @property
    def real_gpus(self) -> bool:
        return self._real_gpus

    def nodes(self) -> tuple[Node, ...]:
        return self._nodes

    def log_path(self, project: str, job: str, index: int) -> Path:
        return self.log_dir / project / job / f"replica-{index}.log"

    def adopt(self) -> None:
        """Reload the records of replicas started by an earlier run of the service."""
        for path in sorted(self.state_dir.glob("*.json")):
            with suppress(ValueError, TypeError, OSError):
                record = _Record(**json.loads(path.read_text()))
                self._records.setdefault(record.replica_id, record)

    def observe(self) -> dict[int, Observation]:
        now = time.time()
        for record in self._records.values():
            if record.exit_code is None:
                self._refresh(record, now)
        self._check_workers()
        return {rid: self._observation(r) for rid, r in self._records.items()}

    def start(self, spec: LaunchSpec) -> Observation:
        if spec.replica_id in self._records:
            raise ExecutorError(f"replica {spec.replica_id} was already started")
        if not spec.argv:
            raise ExecutorError("the local executor needs a command to run")
        torchrun = uses_torchrun(spec.argv)
        if torchrun:
            spec = replace(spec, env=self._torchrun.env_for(spec, self._data_dir))
        else:
            spec = replace(
                spec, env={"TIDE_CHECKPOINT_DIR": checkpoint_dir(spec, self._data_dir), **spec.env}
            )
        started = self._spawn(spec)
        pid = started.pid
        record = _Record(
            replica_id=spec.replica_id,
            project=spec.project,
            job=spec.job,
            index=spec.index,
            node=spec.node,
            pid=pid,
            start_ticks=start_ticks(pid),
            started_at=time.time(),
            torchrun=torchrun,
            exit_file=started.exit_file,
            marker=started.marker,
            workers_file=started.workers_file,
            checkpoint_dir=spec.env["TIDE_CHECKPOINT_DIR"],
        )
        self._records[spec.replica_id] = record
        self._save(record)
        trace("spawned", replica=spec.index, job=spec.job)
        return self._observation(record)

    def notify(self, replica_id: int) -> None:
        record = self._records.get(replica_id)
        if record is None or record.exit_code is not None or record.stop_sent_at is not None:
            return
        if record.start_ticks is not None and start_ticks(record.pid) != record.start_ticks:
            return  # not the process we started
        # shim -> command; torchrun: shim -> launcher or torchrun agent -> workers
        reached = signal_generation(record.pid, 2 if record.torchrun else 1, signal.SIGUSR1)
        trace("sigusr1", replica=record.index, job=record.job, processes=reached)

    def stop(self, replica_id: int, grace: float) -> None:
        record = self._records.get(replica_id)
        if record is None or record.exit_code is not None or record.stop_sent_at is not None:
            return
        record.stop_sent_at = time.time()
        trace("sigterm", replica=record.index, job=record.job)
        record.grace = max(grace, 0.0)
        self._signal(record, signal.SIGKILL if grace <= 0 else signal.SIGTERM)
        record.killed = grace <= 0
        self._save(record)

    def forget(self, replica_id: int) -> None:
        record = self._records.pop(replica_id, None)
        for suffix in (".json", ".exit"):
            (self.state_dir / f"{replica_id}{suffix}").unlink(missing_ok=True)
        if record is not None and record.exit_file and record.workers_file:  # a warm launcher's files
            exit_file = Path(record.exit_file)
            for path in (
                exit_file,
                *(exit_file.with_suffix(x) for x in (".spec", ".warm")),
                Path(record.workers_file),
            ):
                path.unlink(missing_ok=True)

    def read_log(self, project: str, job: str, index: int, tail: int | None = None) -> str | None:
        path = self.log_path(project, job, index)
        if not path.is_file():
            return None
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - MAX_LOG_READ_BYTES))
            text = handle.read().decode("utf-8", errors="replace")
        if tail is not None:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-tail:]) if tail > 0 else ""
        return text

    def put_agent_token(self, project: str, job: str, token: str) -> None:
        """Local replicas run no agent that polls the service."""

    def announce(self, announcement: Announcement) -> None:
        """Nothing shows decisions here but Tide's own event log."""

    def _spawn(self, spec: LaunchSpec) -> _Started:
        """Start the replica: a warm launcher from the pool when one fits, else the shim running its argv."""
        env = dict(spec.env)
        if self._real_gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpu_ids)
        log = self.log_path(spec.project, spec.job, spec.index)
        log.parent.mkdir(parents=True, exist_ok=True)
        header = f"--- tide: replica {spec.index} ({spec.replica_id}) starting on {spec.node} ---\n"
        with log.open("ab") as out:
            out.write(header.encode())
        pool = self._launcher_pool(spec)
        if pool is not None:
            try:
                launcher = pool.take(env, spec.argv, log)
            except OSError as error:
                raise ExecutorError(f"cannot start replica {spec.index}: {error}") from error
            return _Started(
                launcher.pid, str(launcher.exit_file), launcher.marker, str(launcher.workers_file)
            )
        exit_file = self.state_dir / f"{spec.replica_id}.exit"
        exit_file.unlink(missing_ok=True)
        env = {**os.environ, **env, REPLICA_UID: self._uid(spec.replica_id)}
        try:
            return _Started(spawn_shim(list(argv_for(spec.argv)), env, log, exit_file), None, None, None)
        except OSError as error:
            raise ExecutorError(f"cannot start replica {spec.index}: {error}") from error

    def _launcher_pool(self, spec: LaunchSpec) -> WarmPool | None:
        """The launchers of plain ``torchrun`` commands (None: another command), made at the first one.
        Every replica of such a job runs in a launcher (an idle one, else one started for it), so that all
        replicas of a launch take the same path (``torchrun_agent``'s rendezvous or torchrun's)."""
        if not eligible(spec.argv):
            return None
        if self._pool is None:
            self._pool = WarmPool(self.state_dir, self._instance, spawn_shim, self._pool_size)
        return self._pool

    def close(self) -> None:
        """Kill the idle warm launchers (replicas keep running: a restarted service adopts them)."""
        if self._pool is not None:
            self._pool.close()

    def _check_workers(self) -> None:
        """Mark torchrun replicas whose workers started: their launch formed (one /proc pass for all).
        A warm launcher's workers create its workers file; a cold ``torchrun`` (or a launcher that handed
        over to one) is seen by its workers' ``TIDE_REPLICA_UID``. Refill the pool of warm launchers once no
        launch formed for ``REFILL_DELAY_S`` (off a resize's critical path and its first steps)."""
        now = time.time()
        waiting = [r for r in self._records.values() if r.torchrun and not r.ready and r.exit_code is None]
        found = [r for r in waiting if r.workers_file is not None and Path(r.workers_file).exists()]
        unseen = {(r.marker or self._uid(r.replica_id)): r for r in waiting if r not in found}
        found += [unseen[uid] for uid in with_workers(unseen)] if unseen else []
        for record in found:
            record.ready = True
            self._formed_at = now
            self._save(record)
        if self._pool is not None and now - self._formed_at >= REFILL_DELAY_S:
            self._pool.refill()

    def _alive(self, record: _Record) -> bool:
        try:
            if poll_child(record.pid) is not None:  # reaps it if this process started it
                return False
        except ChildProcessError:
            pass  # started by an earlier run of the service: judge by /proc
        ticks = start_ticks(record.pid)
        if record.start_ticks is None:
            return ticks is not None
        return ticks == record.start_ticks

    def _refresh(self, record: _Record, now: float) -> None:
        if self._alive(record):
            overdue = record.stop_sent_at is not None and now - record.stop_sent_at >= record.grace
            if overdue and not record.killed:
                self._signal(record, signal.SIGKILL)
                record.killed = True
                self._save(record)
            return
        record.exit_code = self._exit_code(record)
        trace("noticed-exit", replica=record.index, code=record.exit_code, job=record.job)
        self._signal(record, signal.SIGKILL)  # leftovers of the group, if the command forked any
        self._save(record)

    def _exit_code(self, record: _Record) -> int:
        path = Path(record.exit_file) if record.exit_file else self.state_dir / f"{record.replica_id}.exit"
        with suppress(OSError, ValueError):
            return int(path.read_text().strip())
        return -int(signal.SIGKILL) if record.killed else LOST_EXIT_CODE

    def _signal(self, record: _Record, signum: signal.Signals) -> None:
        """Signal the replica's process group, only while its leader is the process we started.

        A SIGKILL also reaches the replica's processes that left its group (torchrun starts each worker in
        a session of its own): they are found by the ``TIDE_REPLICA_UID`` they inherited.
        """
        if record.start_ticks is not None and start_ticks(record.pid) not in (record.start_ticks, None):
            return
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(record.pid, signum)
        if signum == signal.SIGKILL:
            kill_marked(f"{REPLICA_UID}={record.marker or self._uid(record.replica_id)}")

    def _uid(self, replica_id: int) -> str:
        """Unique on this machine: replica ids of two services with different data dirs may coincide."""
        return f"{self._instance}-{replica_id}"

    def _observation(self, record: _Record) -> Observation:
        return Observation(
            replica_id=record.replica_id,
            pid=record.pid,
            running=record.exit_code is None,
            exit_code=record.exit_code,
            stopping=record.stop_sent_at is not None,
            ready=record.ready if record.torchrun else None,
            checkpointed_at=read_mark(record.checkpoint_dir)
            if record.index == 0 and record.checkpoint_dir
            else None,
            progress=read_progress(record.checkpoint_dir)
            if record.index == 0 and record.checkpoint_dir
            else None,
        )

    def _save(self, record: _Record) -> None:
        path = self.state_dir / f"{record.replica_id}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(record)))
        os.replace(tmp, path)
