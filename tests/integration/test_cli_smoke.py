"""The CLI against a real ``tide serve`` on a free port, found with no flags (server.json, admin-token)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from serveargv import serve_argv
from servicekit import answers, free_port, kill_leftovers, wait_for


def test_cli_finds_the_local_server_and_runs_a_job(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "TIDE_DATA_DIR": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    env |= {"TIDE_NODES": "1", "TIDE_GPUS_PER_NODE": "2", "COLUMNS": "80"}
    for name in ("TIDE_ADMIN_TOKEN", "TIDE_URL", "TIDE_TOKEN", "TIDE_PROJECT"):
        env.pop(name, None)
    argv = serve_argv(port)
    server = subprocess.Popen(
        [*argv, "--cycle-period", "0.2", "--grace-period", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def tide(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "api.client.cli.main", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)

    try:
        wait_for(lambda: answers(f"http://127.0.0.1:{port}"), timeout=30, what="tide serve")
        assert tide("project", "create", "team-a", "--deserved", "2").returncode == 0
        submitted = tide("submit-dist", "pytorch", "--name", "hello", "-p", "team-a", "--", "sleep", "30")
        assert submitted.returncode == 0, submitted.stderr
        wait_for(lambda: "running" in tide("list").stdout, timeout=20, what="hello to run")
        assert "1/1/1" in tide("list").stdout
        assert "team-a/hello" in tide("describe", "job", "hello").stdout
        deleted = tide("delete", "job", "hello")
        assert deleted.returncode == 0 and "Deleted job team-a/hello" in deleted.stdout
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        kill_leftovers(tmp_path / "data")
    down = tide("list")
    assert down.returncode == 4
    assert f"http://127.0.0.1:{port}" in down.stderr and "tide serve" in down.stderr
