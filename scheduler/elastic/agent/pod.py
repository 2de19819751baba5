"""Tide's agent in a job pod: ``tide agent -- torchrun train.py ...`` runs the launches the service orders.

Contract (docs/kubernetes.md, "How a pod learns a resize"). The Kubernetes executor starts every replica
pod of a torchrun job with this agent as its entrypoint. The agent keeps one warm launcher (``launcher``,
as the local executor does: torch imported ahead of need) and asks the service for its launch (``link``),
reporting what it runs: ``warming`` until its launcher is ready, then ``warm``, ``running`` launch G, or
``exited`` with the launch's exit code, and the time of the job's last checkpoint (the training script's
mark in ``$TIDE_CHECKPOINT_DIR``, ``checkpoints``). On an order for a new launch it stops the running one (SIGTERM to its process group: the script checkpoints and exits; SIGKILL after the shutdown
timeout), hands the warm launcher the new launch's environment (``launch_env``) and starts warming the next
one once the launch formed. So the pod, its node and its GPUs stay; only the training processes restart.

- A launch that exits 0 on its own finished the training: the agent exits 0 (the pod succeeds, and the
  service sees the job complete). One that fails is reported (``exited``); the service restarts the launch
  or fails the job, and the agent waits for its word. A failure never ends the pod by itself.
- A ``notice`` order (a preemption notice: the replica's GPUs are reclaimed or preempted, its pod's deletion
  or the next launch follows after the project's notice) sends SIGUSR1 to the running launch's training
  processes, the launcher's children (``procs``; not its group: torchrun and the launcher's agent would be
  ended by it), once per launch; its polls then say ``noticed``.
- SIGTERM or SIGINT (the pod is being deleted) is passed to the launch; the agent exits 143 (``procs.STOPPED_EXIT``)
  once it ended.
- 404 (the job is over, or this replica was removed): the launch is stopped, exit 0. 401/403/422 (a wrong
  token or setting): a message saying what to fix, exit 2. No answer: retried with backoff while the launch
  keeps training, with a message on the first failure and every 30 s after; an agent that never reached the
  service gives up after ``connect_deadline`` seconds (exit 2, with the URL it tried).
A report that changed (a launch exited) is sent at once; a long-poll still in flight is then abandoned (its
order, if any, is given again: orders are idempotent). Standard library and httpx only: torch is imported
by the launchers, never by the agent.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from scheduler.elastic.agent.checkpoints import read_mark
from scheduler.elastic.agent.link import (
    AgentSettings,
    Link,
    Order,
    Reply,
    Report,
    launch_env,
)
from scheduler.elastic.agent.pool import Launcher, WarmPool
from scheduler.elastic.agent.ports import free_port
from scheduler.elastic.agent.procs import STOPPED_EXIT, poll_child, signal_generation
from scheduler.elastic.agent.progress import read_progress
from scheduler.elastic.agent.trace import trace
from scheduler.elastic.torchrun_argv import torchrun_argv

REFUSED_EXIT = 2
_TICK_S = 0.02
_NOTE_EVERY_S = 30.0


class _Call:
    """One poll in a daemon thread: the main loop never blocks on the network."""

    def __init__(self, link: Link, report: Report) -> None:
        self.report = report
        self.reply: Reply | None = None
        self.done = threading.Event()
        threading.Thread(target=self._run, args=(link, report), name="tide-agent-poll", daemon=True).start()

    def _run(self, link: Link, report: Report) -> None:
        try:
            self.reply = link.poll(report)
        finally:
            self.done.set()


def _spawn(argv: list[str], env: Mapping[str, str], _log: Path, _exit_file: Path) -> int:
    """A launcher in a session of its own (signals reach its workers), its output the pod's."""
    return os.posix_spawn(argv[0], argv, dict(env), setsid=True)


class PodAgent:
    """The agent of one replica pod."""

    def __init__(
        self,
        settings: AgentSettings,
        *,
        link: Link | None = None,
        state_dir: Path | None = None,
        poll_wait: float = 10.0,
        connect_deadline: float = 300.0,
        out: TextIO | None = None,
    ) -> None:
        self.settings = settings
        self.link = link or Link(settings)
        self.dir = state_dir or Path(tempfile.mkdtemp(prefix="tide-agent-"))
        self.pool = WarmPool(self.dir, f"agent-{settings.replica_id}", _spawn, size=1)
        self.poll_wait = poll_wait
        self.connect_deadline = connect_deadline
        self.out = out or sys.stderr
        self.checkpoints = os.environ.get("TIDE_CHECKPOINT_DIR", "")  # its mark is the job's progress
        self.launch: Launcher | None = None
        self.launched_at = 0.0
        self.generation: int | None = None
        self.state = "warming"
        self.exit_code: int | None = None
        self.noticed = False  # the running launch was given its preemption notice
        self.stop_requested = threading.Event()
        self._refilled = True
        self._reached = False
        self._failing_since: float | None = None
        self._noted_at = 0.0
        self._backoff = 0.0

    # the loop ---------------------------------------------------------------------------------------
    def run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: self.stop_requested.set())
        self.pool.refill()
        started = time.monotonic()
        call: _Call | None = None
        try:
            while not self.stop_requested.is_set():
                finished = self._watch_launch()
                if finished is not None:
                    return finished
                report = self._report()
                if call is not None and call.report.what() != report.what():
                    call = None  # what it reports is stale: ask again now (the old answer is given again)
                if call is None and time.monotonic() >= self._backoff:
                    call = _Call(self.link, self._sent(report))
                if call is not None and call.done.wait(_TICK_S):
                    outcome = self._act(call.reply, started)
                    call = None
                    if outcome is not None:
                        return outcome
                elif call is None:
                    time.sleep(_TICK_S)
            self._say("stopping: the pod is being deleted")
            self._stop_launch()
            return STOPPED_EXIT
        finally:
            self.pool.close()
            self.link.close()

    def _report(self) -> Report:
        """What this agent runs now (compared every tick with what the poll in flight reported)."""
        if self.state == "warming" and self.pool.warm():
            self.state = "warm"
        return Report(self.generation, self.state, self.exit_code, None, self.poll_wait, noticed=self.noticed)

    def _sent(self, report: Report) -> Report:
        """``report`` as a poll sends it: with a rendezvous port on offer (should this replica be the master)
        and the job's last checkpoint time, both read once per poll, not every tick."""
        mark = read_mark(self.checkpoints) if self.checkpoints else None
        speed = read_progress(self.checkpoints) if self.checkpoints else None  # R19
        return replace(report, port=free_port("0.0.0.0"), checkpointed_at=mark, progress=speed)

    def _act(self, reply: Reply | None, started: float) -> int | None:
        if reply is None or reply.kind == "unreachable":
            return self._unreachable(reply.message if reply else "the poll ended without an answer", started)
        self._reached, self._failing_since, self._backoff = True, None, 0.0
        if reply.kind == "launch" and reply.order is not None:
            self._relaunch(reply.order)
        elif reply.kind == "notice":
            self._notice()
        elif reply.kind == "gone":
            self._say(f"the service says: {reply.message}; stopping")
            self._stop_launch()
            return 0
        elif reply.kind == "refused":
            self._say(f"the service refused this agent: {reply.message}")
            self._stop_launch()
            return REFUSED_EXIT
        return None

    def _unreachable(self, why: str, started: float) -> int | None:
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        if now - self._noted_at >= _NOTE_EVERY_S:
            self._noted_at = now
            doing = "training continues" if self.state == "running" else "waiting for its first launch"
            self._say(f"cannot reach the Tide service at {self.settings.url} ({why}); retrying, {doing}")
        if not self._reached and now - started >= self.connect_deadline:
            self._say(
                f"gave up: no answer from {self.settings.url} for {self.connect_deadline:.0f} s; check "
                "TIDE_AGENT_URL (tide serve --agent-url) and that job pods may reach the service"
            )
            self._stop_launch()
            return REFUSED_EXIT
        self._backoff = now + min(5.0, 0.2 * 2 ** min(5, int(now - self._failing_since)))
        return None

    # launches ---------------------------------------------------------------------------------------
    def _relaunch(self, order: Order) -> None:
        trace("agent-order", generation=order.generation, size=order.world_size, rank=order.rank)
        self._stop_launch()
        env = launch_env(order, self.settings, os.environ)
        self.launch = self.pool.take(env, torchrun_argv(self.settings.command), Path("/dev/stdout"))
        self.launched_at = time.monotonic()
        self.generation, self.state, self.exit_code = order.generation, "running", None
        self.noticed = False
        self._refilled = False
        self._say(
            f"launch {order.generation}: {order.world_size} replicas, rank {order.rank}, rendezvous "
            f"{self.settings.master_host}:{order.rdzv_port}"
        )

    def _notice(self) -> None:
        """Pass a preemption notice (SIGUSR1) to the running launch's training processes, once."""
        launch = self.launch
        if launch is None or self.noticed:
            return
        self.noticed = True
        reached = signal_generation(launch.pid, 1, signal.SIGUSR1)
        trace("agent-notice", generation=self.generation, processes=reached)
        self._say(f"preemption notice: SIGUSR1 passed to {reached} training process(es) to checkpoint")

    def _watch_launch(self) -> int | None:
        """Note a launch that ended on its own; warm the next launcher once this one formed."""
        launch = self.launch
        if launch is None:
            return None
        if not self._refilled and (
            launch.workers_file.exists() or time.monotonic() - self.launched_at > 10.0
        ):
            self._refilled = True
            self.pool.refill()  # off the launch's critical path: it has formed
        code = _exit_code(launch.pid)
        if code is None:
            return None
        self.launch = None
        self._say(f"launch {self.generation} exited with code {code}")
        if code == 0:
            return 0  # the training finished: the pod succeeds
        self.state, self.exit_code = "exited", code
        return None

    def _stop_launch(self) -> None:
        launch, self.launch = self.launch, None
        if launch is None:
            return
        _signal(launch.pid, signal.SIGTERM)
        deadline = time.monotonic() + _shutdown_timeout(os.environ) + 5.0
        while _exit_code(launch.pid) is None:
            if time.monotonic() > deadline:
                _signal(launch.pid, signal.SIGKILL)
                _wait_exit(launch.pid)
                break
            time.sleep(_TICK_S)
        self.state = "stopped"

    def _say(self, message: str) -> None:
        print(f"tide agent (replica {self.settings.replica_id}): {message}", file=self.out, flush=True)


def _shutdown_timeout(env: Mapping[str, str]) -> float:
    raw = env.get("PET_SHUTDOWN_TIMEOUT", "30")
    try:
        return float(raw)
    except ValueError:
        return 30.0


def _signal(pid: int, signum: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _exit_code(pid: int) -> int | None:
    """The launcher's exit code once it ended (128 + N when a signal N ended it), else None."""
    try:
        code = poll_child(pid)
    except ChildProcessError:
        return 1  # reaped elsewhere: it is gone, and how it ended is unknown
    if code is None:
        return None
    return 128 - code if code < 0 else code


def _wait_exit(pid: int) -> None:
    with suppress(ChildProcessError):
        os.waitpid(pid, 0)
