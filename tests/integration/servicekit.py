"""Test kit for the service: a real Tide server in a thread, settings for tests, waiting helpers.

``alive`` and ``running_pids`` tell whether replica processes run. ``RunningService`` starts ``create_app`` under uvicorn on a free port, as ``tide serve`` does; ``stop()``
shuts it down like a restart would (replicas keep running). ``kill_leftovers`` kills the process groups a
local executor started under a data directory, so a failing test leaves no orphan.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from serveargv import serve_argv

from api.client.rest import TideClient
from api.server.app import create_app
from api.server.deps import Services
from api.server.settings import Settings
from scheduler.elastic.agent.ports import free_port  # noqa: F401 - the tests import it from here
from scheduler.executors.base import Executor

ADMIN = "test-admin-token"


@dataclass
class RunningService:
    """A Tide service on a free port; ``stop()`` ends it like a shutdown (replicas keep running)."""

    settings: Settings
    executor: Executor | None = None
    url: str = ""
    server: uvicorn.Server | None = None
    thread: threading.Thread | None = None
    clients: list[TideClient] = field(default_factory=list)

    def start(self) -> RunningService:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.app: Any = create_app(self.settings, executor=self.executor)
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive(), "the service failed to start"
            assert time.monotonic() < deadline, "the service did not start within 30 s"
            time.sleep(0.01)
        return self

    def client(self, token: str | None = ADMIN) -> TideClient:
        client = TideClient(self.url, token)
        self.clients.append(client)
        return client

    @property
    def services(self) -> Services:
        services: Services = self.app.state.tide
        return services

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(timeout=30)
            self.server = None


def settings_for(data_dir: Path, db_url: str | None, **overrides: object) -> Settings:
    base = Settings(
        data_dir=data_dir,
        database_url=db_url,
        executor="memory",
        nodes=1,
        gpus_per_node=4,
        cycle_period=0.05,
        grace_period=1.0,
        settle_seconds=0.0,
        admin_token=ADMIN,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


def kill_leftovers(data_dir: Path) -> None:
    """Kill every process group a local executor started under ``data_dir`` (tests leave no orphans)."""
    for record in (data_dir / "replicas").glob("*.json") if (data_dir / "replicas").is_dir() else ():
        with suppress(OSError, ValueError, KeyError, ProcessLookupError, PermissionError):
            os.killpg(int(json.loads(record.read_text())["pid"]), signal.SIGKILL)


def alive(pid: int) -> bool:
    """The process exists and is neither a zombie nor dead."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] not in "ZX"
    except OSError:
        return False


def running_pids(client: TideClient, project: str, job: str, count: int) -> list[int] | None:
    """The sorted pids of the job's running replicas once there are ``count`` of them, else None."""
    replicas = client.job(project, job).replicas
    pids = sorted(r.pid for r in replicas if r.pid and r.status == "running")
    return pids if len(pids) == count else None


def wait_for(predicate: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def answers(url: str) -> bool:
    """Whether a Tide service at ``url`` answers its health check."""
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def serve_process(
    data_dir: Path,
    port: int,
    *flags: str,
    gpus_per_node: int = 2,
    capture: bool = False,
    own_group: bool = False,
) -> subprocess.Popen[str]:
    """A real ``tide serve`` (one local node of ``gpus_per_node`` GPUs, a 0.2 s cycle, plus ``flags``) on
    ``data_dir``, its admin token generated there; its output kept for ``communicate()`` when ``capture``;
    in a process group of its own (its pid is the group's id) when ``own_group``, as systemd runs it."""
    env = {**os.environ, "TIDE_DATA_DIR": str(data_dir), "TIDE_GPUS_PER_NODE": str(gpus_per_node)}
    env["TIDE_NODES"] = "1"
    env.pop("TIDE_ADMIN_TOKEN", None)
    argv = serve_argv(port)
    argv += ["--cycle-period", "0.2", *flags]
    out = subprocess.PIPE if capture else subprocess.DEVNULL
    err = subprocess.STDOUT if capture else subprocess.DEVNULL
    return subprocess.Popen(argv, env=env, stdout=out, stderr=err, text=True, start_new_session=own_group)
