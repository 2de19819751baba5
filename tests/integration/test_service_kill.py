"""``tide serve`` killed with SIGKILL in the middle of a run, then started again.

At the kill a job runs (2 replicas), a cancelled job's replicas are still stopping (they ignore SIGTERM and
have a 4 s grace), a job waits for GPUs and a short job is about to end. Replicas are designed to outlive
the service: they keep running while it is down, and the short one ends then. Started again, the service has
every job; it adopts the running replicas (same pids, each replica's log shows one start); it kills the
stopping ones once their grace is over (the deadline outlived the service); it records the exit that
happened while it was down; the waiting job starts. Every decision is recorded once. Finally no process
started for this service's data directory is left once its jobs are deleted and it is stopped.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from servicekit import alive, answers, free_port, kill_leftovers, running_pids, serve_process, wait_for

from api.client.rest import TideClient
from api.shared.paths import local_server

RUNNING = (("train", 2), ("stubborn", 1), ("short", 1))
STUBBORN = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ignoring SIGTERM', flush=True);"
    " time.sleep(600)",
]


def _ours(data_dir: Path) -> list[int]:
    """Live processes started for this data directory (the service and every replica inherit it)."""
    marker = f"\0TIDE_DATA_DIR={data_dir}\0".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if marker in b"\0" + (proc / "environ").read_bytes() and alive(int(proc.name)):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def _starts(data_dir: Path, job: str) -> list[int]:
    logs = sorted((data_dir / "logs" / "a" / job).glob("replica-*.log"))
    return [p.read_text().count("--- tide: replica") for p in logs]


def _set_the_scene(client: TideClient) -> tuple[list[int], list[int], list[int]]:
    """A running job, a cancelled one still stopping, a short one, a waiting one; their pids."""
    client.create_project({"name": "a", "deserved_gpus": 4})
    client.submit("a", {"name": "train", "workers": 1, "command": ["sleep", "600"]})
    client.submit("a", {"name": "stubborn", "command": STUBBORN, "grace_period": 4})
    client.submit("a", {"name": "short", "command": ["sleep", "4"]})
    pids = [
        wait_for(lambda j=j, n=n: running_pids(client, "a", j, n), timeout=30, what=f"{j} to run")
        for j, n in RUNNING
    ]
    # A SIGTERM before the stubborn replica's interpreter installs SIG_IGN would kill it (a loaded machine).
    wait_for(lambda: "ignoring SIGTERM" in client.logs("a", "stubborn"), timeout=30, what="SIG_IGN in place")
    client.submit("a", {"name": "waiting", "workers": 1, "command": ["sleep", "600"]})
    wait_for(lambda: client.job("a", "waiting").pending_reason, what="a reason to wait")
    client.delete_job("a", "stubborn")
    wait_for(lambda: client.job("a", "stubborn").replicas[0].status == "terminating", what="stopping")
    return pids[0], pids[1], pids[2]  # type: ignore[return-value]


@pytest.mark.slow
def test_sigkill_mid_run_then_restart(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = serve_process(tmp_path, port, "--grace-period", "30", gpus_per_node=4)
    try:
        wait_for(lambda: answers(url), timeout=30, what="tide serve to answer")
        _, token = local_server(tmp_path)
        with TideClient(url, token) as client:
            train, stubborn, short = _set_the_scene(client)
        process.kill()  # mid-run: no shutdown at all
        process.wait(timeout=10)
        survivors = [*train, *stubborn]
        assert all(alive(pid) for pid in survivors), "replicas outlive the service"
        wait_for(
            lambda: not alive(short[0]), timeout=30, what="the short job to end while the service is down"
        )

        process = serve_process(tmp_path, port, "--grace-period", "30", gpus_per_node=4)
        wait_for(lambda: answers(url), timeout=30, what="the restarted service")
        with TideClient(url, token) as client:
            names = {j.name: j.status for j in client.jobs(project="a")}
            assert set(names) == {"train", "stubborn", "short", "waiting"}
            assert running_pids(client, "a", "train", 2) == train  # adopted, not started again
            wait_for(
                lambda: not alive(stubborn[0]),
                timeout=30,
                what="the stopping replica killed after its grace",
            )
            wait_for(lambda: client.job("a", "short").status == "succeeded", what="the exit seen while down")
            waiting = wait_for(
                lambda: running_pids(client, "a", "waiting", 2), timeout=30, what="the waiting job to start"
            )
            assert client.job("a", "stubborn").status == "cancelled"
            assert running_pids(client, "a", "train", 2) == train
            assert {j: _starts(tmp_path, j) for j in names} == {
                "train": [1, 1],
                "stubborn": [1],
                "short": [1],
                "waiting": [1, 1],
            }
            starts = sorted(e.job for e in client.events(project="a") if e.kind == "start")
            assert starts == ["short", "stubborn", "train", "waiting"]
            assert [e.job for e in client.events(project="a") if e.kind == "finish"] == ["short"]
            for job in ("train", "waiting"):
                client.delete_job("a", job)
            replicas = [*train, *waiting]  # type: ignore[misc]
            wait_for(lambda: not any(alive(p) for p in replicas), timeout=30, what="the replicas to stop")
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        assert _ours(tmp_path) == [], "no orphan: nothing started for this service outlives it and its jobs"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        kill_leftovers(tmp_path)
