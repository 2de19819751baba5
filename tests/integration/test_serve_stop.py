"""A real ``tide serve`` stopped as people and service managers stop it, and the CLI pointed at it by the URL
it prints.

A normal stop (SIGTERM to the service, or to its whole process group as systemd and a terminal's job
control send it, while clients are writing) leaves a clean log: no traceback, no warning that the engine
stopped on its own. It once logged a ``ConnectionResetError`` from the ``tide-engine-link`` thread when the
engine process closed its end first with a wake of the API's still unread. And the URL the banner prints
as "Tide API:" (``.../api/v1``) works as ``--url`` and ``TIDE_URL``: it once made every command fail with
"Method Not Allowed".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from servicekit import answers, free_port, kill_leftovers, serve_process, wait_for

from api.client.rest import TideAPIError, TideClient
from api.shared.paths import local_server


def _keep_writing(url: str, token: str | None, stop: threading.Event) -> None:
    """Create projects until told to stop: each write wakes the engine (a message on the link)."""
    with TideClient(url, token, timeout=2) as client:
        for n in range(100_000):
            if stop.is_set():
                return
            try:
                client.create_project({"name": f"w{threading.get_ident() % 10_000}-{n}", "deserved_gpus": 0})
            except (TideAPIError, httpx.TransportError):
                time.sleep(0.01)  # the service is going away


def _tide(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "api.client.cli.main", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("whom", ["the service", "its process group"])
def test_a_stop_under_writes_leaves_a_clean_log(tmp_path: Path, whom: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = serve_process(tmp_path, port, capture=True, own_group=True)
    stop = threading.Event()
    writers: list[threading.Thread] = []
    try:
        wait_for(lambda: answers(url), timeout=30, what="tide serve to answer")
        _, token = local_server(tmp_path)
        writers = [threading.Thread(target=_keep_writing, args=(url, token, stop)) for _ in range(4)]
        for writer in writers:
            writer.start()
        time.sleep(1.0)
        if whom == "the service":
            process.send_signal(signal.SIGTERM)
        else:
            os.killpg(process.pid, signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        stop.set()
        for writer in writers:
            writer.join(timeout=10)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate(timeout=10)
        kill_leftovers(tmp_path)
    assert process.returncode in (0, -signal.SIGTERM), output
    assert "Tide API:" in output  # the log is the service's
    assert "Traceback" not in output and "Exception in thread" not in output, output
    assert "no longer schedules" not in output, output


def test_the_url_tide_serve_prints_works_as_url_and_tide_url(tmp_path: Path) -> None:
    port = free_port()
    api = f"http://127.0.0.1:{port}/api/v1"
    process = serve_process(tmp_path / "data", port, capture=True)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "TIDE_DATA_DIR": str(tmp_path / "none")}
    for name in ("TIDE_URL", "TIDE_TOKEN", "TIDE_PROJECT"):
        env.pop(name, None)
    try:
        wait_for(lambda: answers(api.removesuffix("/api/v1")), timeout=30, what="tide serve to answer")
        _, token = local_server(tmp_path / "data")
        assert token
        env["TIDE_TOKEN"] = token
        created = _tide("project", "create", "team-a", "--deserved", "1", "--url", api, env=env)
        assert created.returncode == 0, created.stderr
        listed = _tide("project", "list", "--json", env={**env, "TIDE_URL": api + "/"})
        assert listed.returncode == 0, listed.stderr
        assert [p["name"] for p in json.loads(listed.stdout)] == ["team-a"]
        login = _tide("login", api, "--token", token, env=env)
        assert login.returncode == 0, login.stderr
        saved = json.loads((tmp_path / "cfg" / "tide" / "config.json").read_text())
        assert saved["url"] == api.removesuffix("/api/v1")
        assert _tide("cluster", "--json", env=env).returncode == 0  # through the saved URL
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
        kill_leftovers(tmp_path / "data")
    assert f"Tide API:      {api}" in output
