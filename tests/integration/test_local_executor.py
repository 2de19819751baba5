"""The local executor with real processes: argv, identity env, logs, SIGTERM -> grace -> SIGKILL, exit codes,
adoption after a restart, and a reused pid never mistaken for (or signalled as) a replica."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from servicekit import kill_leftovers, wait_for

from scheduler.core import Node
from scheduler.executors.base import LOST_EXIT_CODE, ExecutorError, LaunchSpec
from scheduler.executors.local import LocalExecutor

NODES = (Node("node-0", 4),)
IGNORES_SIGTERM = "; ".join(
    [
        "import signal, time",
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)",
        "print('up', flush=True)",
        "time.sleep(60)",
    ]
)


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[LocalExecutor]:
    yield LocalExecutor(tmp_path, NODES)
    kill_leftovers(tmp_path)


def spec(replica_id: int, argv: list[str], **env: str) -> LaunchSpec:
    return LaunchSpec(
        replica_id=replica_id,
        project="a",
        job="train",
        index=replica_id,
        node="node-0",
        gpu_ids=(replica_id,),
        argv=tuple(argv),
        env={"TIDE_JOB": "train", **env},
    )


def exited(executor: LocalExecutor, replica_id: int) -> int | None:
    obs = executor.observe()[replica_id]
    return None if obs.running else obs.exit_code


def test_runs_argv_without_a_shell_with_env_and_log(executor: LocalExecutor) -> None:
    code = "import os, sys; print(os.environ['TIDE_JOB'], os.environ['EXTRA'], sys.argv[1:])"
    executor.start(spec(0, [sys.executable, "-c", code, "$HOME", "a b"], EXTRA="x"))
    assert wait_for(lambda: exited(executor, 0) == 0, what="exit 0")
    log = executor.read_log("a", "train", 0)
    assert log is not None and "train x ['$HOME', 'a b']" in log  # no shell expanded or split anything
    assert executor.read_log("a", "train", 0, tail=1) == "train x ['$HOME', 'a b']\n"


def test_exit_codes(executor: LocalExecutor) -> None:
    executor.start(spec(0, [sys.executable, "-c", "raise SystemExit(3)"]))
    executor.start(spec(1, ["/no/such/program"]))
    assert wait_for(lambda: exited(executor, 0) == 3, what="exit 3")
    assert wait_for(lambda: exited(executor, 1) == 127, what="exit 127")
    assert "cannot run '/no/such/program'" in (executor.read_log("a", "train", 1) or "")
    with pytest.raises(ExecutorError):
        executor.start(spec(0, ["true"]))


def test_stop_sends_sigterm_then_sigkill_after_grace(executor: LocalExecutor) -> None:
    executor.start(spec(0, ["sleep", "60"]))
    executor.start(spec(1, [sys.executable, "-c", IGNORES_SIGTERM]))
    wait_for(lambda: "up" in (executor.read_log("a", "train", 1) or ""), what="the stubborn replica to start")
    executor.stop(0, grace=5)
    executor.stop(1, grace=0.3)
    assert wait_for(lambda: exited(executor, 0) == -15, what="sleep to die of SIGTERM")
    assert executor.observe()[1].running  # ignores SIGTERM: still running inside its grace
    assert wait_for(lambda: exited(executor, 1) == -9, timeout=5, what="SIGKILL after the grace")


def test_adopts_replicas_after_a_restart(tmp_path: Path, executor: LocalExecutor) -> None:
    first = executor.start(spec(0, ["sleep", "60"]))
    executor.start(spec(1, [sys.executable, "-c", "import time; time.sleep(0.3)"]))
    reborn = LocalExecutor(tmp_path, NODES)  # a new service process on the same data dir
    reborn.adopt()
    seen = reborn.observe()
    assert seen[0].running and seen[0].pid == first.pid
    assert wait_for(lambda: exited(reborn, 1) == 0, what="the adopted replica's exit code")  # from the shim
    reborn.stop(0, grace=5)
    assert wait_for(lambda: exited(reborn, 0) == -15, what="the adopted replica to stop")
    reborn.forget(0)
    assert not (tmp_path / "replicas" / "0.json").exists()


def test_a_reused_pid_is_not_taken_for_the_replica(tmp_path: Path, executor: LocalExecutor) -> None:
    executor.start(spec(0, ["sleep", "60"]))
    record_path = tmp_path / "replicas" / "0.json"
    record = json.loads(record_path.read_text())
    record["pid"] = os.getpid()  # a live process that is not the replica (its start time differs)
    (tmp_path / "replicas" / "7.json").write_text(json.dumps({**record, "replica_id": 7}))
    reborn = LocalExecutor(tmp_path, NODES)
    reborn.adopt()
    assert reborn.observe()[7].exit_code == LOST_EXIT_CODE
    reborn.stop(7, grace=0)  # must not signal the test process
    assert reborn.observe()[0].running


def test_processes_that_left_the_group_are_killed_with_the_replica(executor: LocalExecutor) -> None:
    code = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen(['sleep', '60'], start_new_session=True); "  # like torchrun's workers
        "print(child.pid, flush=True); time.sleep(60)"
    )
    executor.start(spec(0, [sys.executable, "-c", code]))

    def child_pid() -> int | None:
        lines = (executor.read_log("a", "train", 0) or "").split("\n")
        return int(lines[1]) if len(lines) > 2 and lines[1].isdigit() else None

    child = wait_for(child_pid, what="the child pid")
    assert isinstance(child, int)
    executor.stop(0, grace=5)
    assert wait_for(lambda: exited(executor, 0) == -15, what="the replica to stop")
    wait_for(
        lambda: not Path(f"/proc/{child}").exists() or "Z" in _state(child), what="the stray child to die"
    )


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][:1]
    except OSError:
        return "X"
