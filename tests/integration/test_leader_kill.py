"""Two ``tide serve`` processes on one PostgreSQL database: exactly one schedules; SIGKILL it, the other
takes over within seconds.

Both are real processes sharing the database and the data directory (one machine, the local executor).
While both run, exactly one reports ``leader``, and a job submitted through the standby's API is scheduled
by the leader. The leader is then killed with SIGKILL (its advisory lock goes with its connections); the
standby leads within a few seconds (the figure is printed), adopts the running replicas (same pids), and
schedules what comes next. Each decision is recorded once; nothing is left running at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from serveargv import serve_argv
from servicekit import ADMIN, alive, free_port, kill_leftovers, running_pids, wait_for

from api.client.rest import TideClient

HANDOVER_LIMIT_S = 10.0


def _serve(data_dir: Path, db_url: str, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TIDE_DATA_DIR": str(data_dir), "TIDE_ADMIN_TOKEN": ADMIN}
    argv = serve_argv(port)
    argv += ["--database-url", db_url, "--nodes", "1", "--gpus-per-node", "4", "--cycle-period", "0.2"]
    argv += ["--grace-period", "2"]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _role(url: str) -> str | None:
    try:
        return str(httpx.get(f"{url}/healthz", timeout=2).json()["role"])
    except (httpx.TransportError, ValueError):
        return None


@pytest.mark.postgres
@pytest.mark.slow
def test_killing_the_leader_process_hands_over(pg_url: str, tmp_path: Path) -> None:
    ports = free_port(), free_port()
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    processes = [_serve(tmp_path, pg_url, ports[0])]
    try:
        wait_for(lambda: _role(urls[0]) == "leader", timeout=30, what="the first service to lead")
        processes.append(_serve(tmp_path, pg_url, ports[1]))
        wait_for(lambda: _role(urls[1]) == "standby", timeout=30, what="the second service to stand by")
        for _ in range(10):  # exactly one schedules, and it stays so
            assert sorted(str(_role(u)) for u in urls) == ["leader", "standby"]
            time.sleep(0.1)
        with TideClient(urls[1], ADMIN) as standby:  # the API of a standby works; the leader schedules
            standby.create_project({"name": "a", "deserved_gpus": 4})
            standby.submit("a", {"name": "first", "workers": 1, "command": ["sleep", "600"]})
            first = wait_for(
                lambda: running_pids(standby, "a", "first", 2), timeout=30, what="the leader to start the job"
            )

        processes[0].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        processes[0].wait(timeout=10)
        wait_for(lambda: _role(urls[1]) == "leader", timeout=HANDOVER_LIMIT_S, what="the standby to lead")
        handover = time.monotonic() - killed
        print(f"\nleader killed with SIGKILL: the standby led {handover:.2f} s later")

        with TideClient(urls[1], ADMIN) as leader:
            assert running_pids(leader, "a", "first", 2) == first and all(alive(p) for p in first)  # type: ignore[union-attr]
            leader.submit("a", {"name": "second", "workers": 1, "command": ["sleep", "600"]})
            second = wait_for(
                lambda: running_pids(leader, "a", "second", 2), timeout=30, what="the new leader to schedule"
            )
            starts = sorted(e.job for e in leader.events(project="a") if e.kind == "start")
            assert starts == ["first", "second"] and running_pids(leader, "a", "first", 2) == first
            for job in ("first", "second"):
                leader.delete_job("a", job)
            everything = [*first, *second]  # type: ignore[misc]
            wait_for(lambda: not any(alive(p) for p in everything), timeout=30, what="the replicas to stop")
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
        kill_leftovers(tmp_path)
