"""torchrun's agent, played by a warm launcher for a fixed-size launch (docs/elastic-resize.md, "The agent").

Contract: ``plan(args, env)`` takes torchrun's parsed arguments (its own parser, ``PET_*`` defaults applied)
and the replica's environment, and returns a ``NodeLaunch`` when the launch is one this module runs exactly as
torchrun's agent would run it for the training script: a fixed size (``--nnodes=N`` or ``N:N``), an integer
``--nproc-per-node``, a ``host:port`` rendezvous endpoint, the replica's node rank (``TIDE_NODE_RANK``, set by
Tide's pod agent to the replica's rank in an in-place launch; else its index, ``TIDE_REPLICA_INDEX``), and
none of torchrun's output options (``--log-dir``, ``--redirects``, ``--tee``, ``--local-ranks-filter``,
duplicate filters), ``--standalone``, ``--no-python``, ``--virtual-local-rank``,
``--numa-binding``; and the job did not opt out (``TIDE_TORCHRUN_AGENT=torchrun``). Otherwise a sentence saying
why not: the caller runs torchrun's own launcher.

``run(launch, entry, workers_file)`` then does the agent's work: a rendezvous of the ``N`` replicas over a
plain TCP socket on the launch's port (the master replica listens; the others send the run id and their
rank; it answers with the port its rank-0 worker will host the process group's store on), creates
``workers_file`` (the launch formed), forks ``nproc`` workers from this single-threaded, preloaded process
with the environment torchrun gives its workers (``worker_env``), and waits for them. Workers stay in the
launcher's process group, so the executor's signals reach them. On SIGTERM/SIGINT it forwards the signal,
waits up to ``--shutdown-timeout`` (SIGKILL after) and returns 143; a worker failing on its own makes it stop
the others the same way and return 1, as torchrun's agent does with no restarts left; all workers
returning 0 returns 0. ``entry(local_rank)`` runs in each forked worker and never returns.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from argparse import Namespace
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from scheduler.elastic.agent.ports import free_port
from scheduler.elastic.agent.procs import STOPPED_EXIT
from scheduler.elastic.agent.trace import trace
from scheduler.elastic.environment import NODE_RANK

OPT_OUT = "TIDE_TORCHRUN_AGENT"  # "torchrun": run torchrun's own agent (rendezvous, fork server)
FAILED_EXIT = 1
_POLL_S = 0.02
_HELLO = "tide-launch"


@dataclass(frozen=True, slots=True)
class NodeLaunch:
    """One replica's part of a fixed-size launch."""

    node_rank: int
    nnodes: int
    nproc: int
    host: str
    port: int  # the launch's port (Tide's): the replicas' rendezvous
    run_id: str
    max_restarts: int
    shutdown_timeout: float
    role: str


def _unsupported(args: Namespace) -> str | None:
    """Why torchrun's own agent must run this launch, or None."""
    flags = {
        "--standalone": args.standalone,
        "--no-python": args.no_python,
        "--log-dir": args.log_dir,
        "--redirects": args.redirects not in ("0", ""),
        "--tee": args.tee not in ("0", ""),
        "--local-ranks-filter": args.local_ranks_filter,
        "--duplicate-*-filters": args.duplicate_stdout_filters or args.duplicate_stderr_filters,
        "--virtual-local-rank": getattr(args, "virtual_local_rank", False),
        "--numa-binding": getattr(args, "numa_binding", None),
    }
    used = [flag for flag, value in flags.items() if value]
    return ", ".join(used) if used else None


def plan(args: Namespace, env: Mapping[str, str]) -> NodeLaunch | str:
    """The launch this module can run for torchrun's ``args``, or why not (see the module's contract)."""
    if env.get(OPT_OUT, "tide") == "torchrun":
        return f"{OPT_OUT}=torchrun"
    unsupported = _unsupported(args)
    if unsupported:
        return f"uses {unsupported}"
    nnodes = str(args.nnodes).split(":")
    if len(nnodes) > 2 or len(set(nnodes)) != 1 or not nnodes[0].isdigit():
        return f"--nnodes={args.nnodes} is not a fixed size"
    name = NODE_RANK if NODE_RANK in env else "TIDE_REPLICA_INDEX"
    index, size = env.get(name, ""), int(nnodes[0])
    if not index.isdigit() or not 0 <= int(index) < size:
        return f"{name}={index!r} is not a node rank below {size}"
    if not str(args.nproc_per_node).isdigit() or int(args.nproc_per_node) < 1:
        return f"--nproc-per-node={args.nproc_per_node} is not a positive integer"
    host, _, port = str(args.rdzv_endpoint or "").rpartition(":")
    if not port.isdigit() or not host:
        return f"--rdzv-endpoint={args.rdzv_endpoint!r} is not host:port"
    timeout = args.shutdown_timeout if args.shutdown_timeout is not None else 30
    return NodeLaunch(
        node_rank=int(index), nnodes=size, nproc=int(args.nproc_per_node), host=host.strip("[]"),
        port=int(port), run_id=str(args.rdzv_id), max_restarts=int(args.max_restarts),
        shutdown_timeout=float(timeout), role=str(args.role),
    )  # fmt: skip


def worker_env(launch: NodeLaunch, local_rank: int, master_port: int) -> dict[str, str]:
    """What torchrun's agent adds to a worker's environment (``local_elastic_agent._start_workers``)."""
    rank = launch.node_rank * launch.nproc + local_rank
    world = launch.nnodes * launch.nproc
    env = {
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "GROUP_RANK": str(launch.node_rank),
        "ROLE_RANK": str(rank),
        "ROLE_NAME": launch.role,
        "LOCAL_WORLD_SIZE": str(launch.nproc),
        "WORLD_SIZE": str(world),
        "GROUP_WORLD_SIZE": str(launch.nnodes),
        "ROLE_WORLD_SIZE": str(world),
        "MASTER_ADDR": launch.host,
        "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": str(launch.max_restarts),
        "TORCHELASTIC_RUN_ID": launch.run_id,
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }
    if launch.nproc > 1 and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = "1"  # torchrun's default with several workers per node
    return env


def _readline(conn: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n") and len(data) < 256:
        chunk = conn.recv(256)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()


def _host(launch: NodeLaunch) -> int:
    """The master replica: wait for every other replica of the launch, then tell them the store's port."""
    peers: dict[int, socket.socket] = {}
    family = socket.AF_INET6 if ":" in launch.host else socket.AF_INET
    with socket.create_server((launch.host, launch.port), family=family) as server:
        while len(peers) < launch.nnodes - 1:
            conn, _ = server.accept()
            conn.settimeout(5)
            try:
                hello, run_id, rank = ([*_readline(conn).split(), "", "", ""])[:3]
            except OSError:
                hello = run_id = rank = ""
            if hello != _HELLO or run_id != launch.run_id or not rank.isdigit() or int(rank) in peers:
                conn.close()  # not one of this launch's replicas
                continue
            peers[int(rank)] = conn
    master_port = free_port(launch.host)
    for conn in peers.values():
        conn.sendall(f"go {master_port}\n".encode())
    for conn in peers.values():  # the peer closes first: TIME_WAIT stays on its side
        with contextlib.suppress(OSError):
            conn.recv(1)
        conn.close()
    return master_port


def _join(launch: NodeLaunch) -> int:
    """A worker replica: join the master's rendezvous (retrying until it listens); the store's port."""
    while True:
        try:
            conn = socket.create_connection((launch.host, launch.port), timeout=1)
            break
        except OSError:
            time.sleep(_POLL_S)
    with conn:
        conn.settimeout(None)
        conn.sendall(f"{_HELLO} {launch.run_id} {launch.node_rank}\n".encode())
        reply = _readline(conn).split()
    if len(reply) != 2 or reply[0] != "go" or not reply[1].isdigit():
        raise RuntimeError(f"unexpected rendezvous reply from {launch.host}:{launch.port}: {reply!r}")
    return int(reply[1])


def rendezvous(launch: NodeLaunch) -> int:
    """Every replica of the launch is there: the port of the process group's store (on the master)."""
    if launch.nnodes == 1:
        return free_port(launch.host)
    return _host(launch) if launch.node_rank == 0 else _join(launch)


class _Workers:
    """The forked workers of one replica, by pid; signals forwarded, stop deadline kept."""

    def __init__(self, shutdown_timeout: float) -> None:
        self.pids: dict[int, int] = {}
        self.timeout = shutdown_timeout
        self.stop_requested = False
        self.kill_at: float | None = None

    def on_signal(self, signum: int, _frame: object) -> None:
        trace("agent-signal", pids=len(self.pids))
        if not self.pids and not self.stop_requested:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(STOPPED_EXIT)  # nothing started yet: nothing to wait for
        self.stop_requested = True
        self.terminate(signal.Signals(signum))

    def terminate(self, signum: signal.Signals = signal.SIGTERM) -> None:
        if self.kill_at is None:
            self.kill_at = time.monotonic() + self.timeout
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def kill_overdue(self) -> None:
        if self.kill_at is not None and time.monotonic() >= self.kill_at:
            trace("agent-sigkill")
            for pid in self.pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _fork(workers: _Workers, launch: NodeLaunch, master_port: int, entry: Callable[[int], None]) -> None:
    for local_rank in range(launch.nproc):
        env = worker_env(launch, local_rank, master_port)
        pid = os.fork()
        if pid == 0:
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.default_int_handler)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
                os.environ.update(env)
                entry(local_rank)
            finally:
                os._exit(FAILED_EXIT)  # entry never returns; this is for an exception in the lines above
        workers.pids[pid] = local_rank


def _wait(workers: _Workers) -> int:
    failed: tuple[int, int] | None = None
    while workers.pids:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            workers.kill_overdue()
            time.sleep(_POLL_S)
            continue
        local_rank = workers.pids.pop(pid, None)
        code = os.waitstatus_to_exitcode(status)
        trace("worker-exit", code=code, stop=workers.stop_requested)
        if local_rank is not None and code != 0 and failed is None and not workers.stop_requested:
            failed = (local_rank, code)
            print(f"tide agent: worker {local_rank} exited with code {code}; stopping the others",
                  file=sys.stderr, flush=True)  # fmt: skip
            workers.terminate()
    if workers.stop_requested:
        return STOPPED_EXIT
    return FAILED_EXIT if failed is not None else 0


def run(launch: NodeLaunch, entry: Callable[[int], None], workers_file: str | None) -> int:
    """Rendezvous, fork the workers, wait for them; the replica's exit code (see the module's contract)."""
    workers = _Workers(launch.shutdown_timeout)
    signal.signal(signal.SIGTERM, workers.on_signal)
    signal.signal(signal.SIGINT, workers.on_signal)
    master_port = rendezvous(launch)
    trace("formed", node=launch.node_rank, run_id=launch.run_id)
    print(f"tide agent: launch {launch.run_id} formed: node {launch.node_rank} of {launch.nnodes}, "
          f"{launch.nproc} worker(s), store {launch.host}:{master_port}", file=sys.stderr, flush=True)  # fmt: skip
    if workers_file:
        Path(workers_file).touch()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        _fork(workers, launch, master_port, entry)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    return _wait(workers)
