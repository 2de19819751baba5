"""The API process's handle on ``tide serve``'s engine process (``api.server.engine.host``).

Contract: ``EngineLink(settings)`` is what routes see as the engine (``EngineHandle``) when the
engine runs in a process of its own (``Settings.engine_process``, as ``tide serve`` sets it): ``role``,
``is_leader``, ``cycles``, ``last_cycle_at``, ``leading_since``, ``last_error``, ``changes``, ``placements`` and ``node_rows`` are the engine's as of its last
``status`` message (``api.server.engine.wire``); ``trigger()`` sends a wake (a burst of them costs one cycle: the engine
runs one cycle after its current one, however many wakes came meanwhile); ``read_log`` and
``metrics_text`` ask the engine process and wait for its answer (``EngineUnavailable`` when it does not
answer in ``CALL_TIMEOUT_S`` or is not running). ``start()`` starts the engine process and waits until its
first cycle is done (at most ``timeout`` seconds: the API serves anyway, and the loop retries). A
supervisor thread reads the engine's messages; if the engine process fails (a non-zero exit, a signal),
it is logged, shown in ``last_error`` and the process started again after ``RESTART_DELAY_S``; one that
exits cleanly was stopped (SIGTERM) and is not started again (``role`` is ``stopped``), with a warning
unless this service stops too within ``STOP_NOTICE_S`` (a SIGTERM to the whole process group, as systemd
sends it, stops both: a normal stop, which logs no warning and no traceback). ``stop()`` asks it
to stop after its current cycle, waits ``timeout`` seconds for it to exit, then kills it. ``changes``,
``placements`` and ``node_rows`` only grow (across restarts of the engine process): the view cache keys on it (``api.server.cache``).
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from api.server import longpoll
from api.server.engine.wire import Call, Reply, Sender, Start, Status, Stop, Wake, receive
from api.server.settings import Settings

log = logging.getLogger(__name__)
CALL_TIMEOUT_S = 10.0
RESTART_DELAY_S = 1.0
STOP_NOTICE_S = 2.0


class EngineHandle(Protocol):
    """The scheduling engine as the API sees it: ``scheduler.engine.loop.Engine`` in this process, or an
    ``EngineLink`` to the engine process."""

    role: str
    cycles: int
    changes: int
    placements: int
    node_rows: int
    last_cycle_at: float | None
    leading_since: float | None
    last_error: str | None
    clock: Callable[[], float]

    @property
    def is_leader(self) -> bool: ...

    def trigger(self) -> None: ...


class LogReader(Protocol):
    def read_log(self, project: str, job: str, index: int, tail: int | None = None) -> str | None: ...


class EngineUnavailable(RuntimeError):
    """The engine process did not answer (it is starting, restarting or stuck)."""


class EngineLink:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.clock = time.time
        self.role = "starting"
        self.cycles = 0
        self.changes = 0
        self.placements = 0  # as ``changes``: moves when the engine's moved (what nodes show)
        self.node_rows = 0  # as ``changes``: moves when the engine's moved (the nodes themselves)
        self.last_cycle_at: float | None = None
        self.leading_since: float | None = None
        self.last_cycle_seconds: float | None = None
        self.last_error: str | None = None
        self._seen_changes: int | None = None
        self._seen_placements: int | None = None
        self._seen_node_rows: int | None = None
        self._send: Sender | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._calls: dict[int, Future[Any]] = {}
        self._ids = itertools.count()
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def is_leader(self) -> bool:
        return self.role == "leader"

    def start(self, timeout: float = 60.0) -> None:
        self._thread = threading.Thread(target=self._supervise, name="tide-engine-link", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            log.warning("the engine process has not finished its first cycle after %.0f s", timeout)

    def _spawn(self) -> socket.socket:
        ours, theirs = socket.socketpair()
        argv = [sys.executable, "-m", "api.server.engine.host", "--fd", str(theirs.fileno())]
        argv += ["--parent", str(os.getpid())]
        self._process = subprocess.Popen(argv, pass_fds=(theirs.fileno(),))
        theirs.close()
        self._send = Sender(ours)
        settings = self.settings
        self._send(Start(settings, settings.log_level, settings.log_format))
        return ours

    def _supervise(self) -> None:
        while not self._stopping.is_set():
            sock = self._spawn()
            if self._stopping.is_set() and self._send is not None:  # stop() came while it started
                self._send(Stop())
            with sock:
                self._pump(sock)
            self._send = None
            code = self._process.wait() if self._process is not None else None
            self._fail_calls()
            if self._stopping.is_set():
                break
            if code == 0:  # it was stopped (SIGTERM to it, or to the service's whole process group)
                self.role = "stopped"
                self._bump()
                if not self._stopping.wait(STOP_NOTICE_S):  # the group's SIGTERM stops this process too
                    log.warning("the engine process stopped; this service no longer schedules")
                break
            self.role = "starting"
            self.last_error = f"the engine process exited with code {code}; starting it again"
            self._bump()
            log.error("%s", self.last_error)
            self._stopping.wait(RESTART_DELAY_S)
        self._ready.set()

    def _pump(self, sock: socket.socket) -> None:
        while (message := receive(sock)) is not None:
            if isinstance(message, Status):
                self._update(message)
            elif isinstance(message, Reply):
                future = self._calls.pop(message.id, None)
                if future is None:
                    continue
                if message.ok:
                    future.set_result(message.value)
                else:
                    future.set_exception(EngineUnavailable(message.value))

    def _update(self, status: Status) -> None:
        if status.role != self.role:
            self._bump()  # /cluster shows who leads
        self.role = status.role
        self.cycles = status.cycles
        self.last_cycle_at = status.last_cycle_at
        self.leading_since = status.leading_since
        self.last_cycle_seconds = status.last_cycle_seconds
        self.last_error = status.last_error
        if status.node_rows != self._seen_node_rows:
            self._seen_node_rows = status.node_rows
            self.node_rows += 1  # before ``placements``: what nodes show is stale once a node is
        if status.placements != self._seen_placements:
            self._seen_placements = status.placements
            self.placements += 1  # before ``changes``: a view of nodes is stale once the whole is
        if status.changes != self._seen_changes:
            self._seen_changes = status.changes
            self._bump()
        if status.ready:
            self._ready.set()

    def _bump(self) -> None:
        self.changes += 1
        longpoll.wake()  # agents' long-polls waiting for the engine

    def _fail_calls(self) -> None:
        calls, self._calls = self._calls, {}
        for future in calls.values():
            future.set_exception(EngineUnavailable("the engine process ended"))

    def trigger(self) -> None:
        """Ask for a cycle soon (from any thread)."""
        send = self._send
        if send is not None:
            send(Wake())

    def call(self, name: str, *args: object, timeout: float = CALL_TIMEOUT_S) -> Any:
        send = self._send
        if send is None:
            raise EngineUnavailable("the engine process is not running")
        call_id = next(self._ids)
        future: Future[Any] = Future()
        self._calls[call_id] = future
        if not send(Call(call_id, name, args)):
            self._calls.pop(call_id, None)
            raise EngineUnavailable("the engine process is not running")
        try:
            return future.result(timeout)
        except TimeoutError as error:
            self._calls.pop(call_id, None)
            raise EngineUnavailable(f"the engine process did not answer within {timeout:.0f} s") from error

    def read_log(self, project: str, job: str, index: int, tail: int | None = None) -> str | None:
        text: str | None = self.call("read_log", project, job, index, tail)
        return text

    def metrics_text(self) -> str:
        text: str = self.call("metrics")
        return text

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the engine after its current cycle (replicas keep running); kill it after ``timeout``."""
        self._stopping.set()
        send, process = self._send, self._process
        if send is not None:
            send(Stop())
        if process is not None:
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.error("the engine process did not stop within %.0f s; killing it", timeout)
                process.kill()
                process.wait()
        if self._thread is not None:
            self._thread.join(timeout)
        self.role = "stopped"
