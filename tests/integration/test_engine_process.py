"""``tide serve`` runs its scheduling engine in a child process (docs/service.md, "Processes").

What a user relies on: the engine process schedules (a job runs; ``/healthz`` says leader; ``/metrics``
carries the engine's cycle histogram; a replica's log is readable through the API); it dies with the
service, whether the service is stopped (SIGTERM: both exit) or killed (SIGKILL: the kernel takes the
engine too, so no second scheduler survives); and an engine process that dies on its own is started again
and schedules on.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
from servicekit import alive, answers, free_port, kill_leftovers, running_pids, serve_process, wait_for

from api.client.rest import TideClient
from api.shared.paths import local_server


def _engine(pid: int) -> int | None:
    """The engine process: the child of ``pid`` running ``api.server.engine.host``."""
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in task.read_text().split():
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            if b"api.server.engine.host" in argv and alive(int(child)):
                return int(child)
    return None


def _health(url: str) -> dict[str, object]:
    health: dict[str, object] = httpx.get(f"{url}/healthz", timeout=5).json()
    return health


def _cycles(url: str) -> int:
    return int(str(_health(url)["cycles"]))


def test_the_engine_process_schedules_and_dies_with_the_service(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = serve_process(tmp_path, port, "--grace-period", "5")
    try:
        wait_for(lambda: answers(url), timeout=30, what="tide serve to answer")
        engine = wait_for(lambda: _engine(process.pid), what="the engine process")
        assert isinstance(engine, int) and engine != process.pid
        _, token = local_server(tmp_path)
        with TideClient(url, token) as client:
            client.create_project({"name": "a", "deserved_gpus": 2})
            client.submit("a", {"name": "train", "workers": 1, "command": ["sleep", "600"]})
            wait_for(lambda: running_pids(client, "a", "train", 2), timeout=30, what="the job to run")
            assert "--- tide: replica 0" in client.logs("a", "train", replica=0)
        assert _health(url)["role"] == "leader"
        scrape = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10).text
        assert "tide_cycle_duration_seconds_count" in scrape and "tide_leader 1.0" in scrape

        os.kill(engine, signal.SIGKILL)  # the engine alone dies: it is started again and leads again
        wait_for(lambda: _engine(process.pid) not in (None, engine), timeout=30, what="a new engine process")
        back = wait_for(
            lambda: (h := _health(url))["role"] == "leader" and h["last_error"] is None,
            timeout=30,
            what="lead",
        )
        assert back
        cycles = _cycles(url)
        wait_for(lambda: _cycles(url) > cycles, timeout=30, what="cycles of the new engine")

        engine = _engine(process.pid)
        assert engine is not None
        process.kill()  # the service dies at once: the kernel takes the engine along
        process.wait(timeout=10)
        wait_for(lambda: not alive(engine), timeout=5, what="the engine process to die with the service")

        process = serve_process(
            tmp_path, port, "--grace-period", "5"
        )  # started again: it leads (no survivor holds the leadership)
        wait_for(lambda: answers(url), timeout=30, what="the restarted service")
        wait_for(lambda: _health(url)["role"] == "leader", timeout=30, what="the new engine to lead")
        engine = _engine(process.pid)
        assert engine is not None
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        assert not alive(engine), "SIGTERM stops the engine process too"
    finally:
        if process.poll() is None:
            process.kill()
        kill_leftovers(tmp_path)
