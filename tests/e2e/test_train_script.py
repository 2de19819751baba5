"""The reference training script under real torchrun: train, checkpoint, SIGTERM, resume at another size.

What a user relies on: a graceful stop (SIGTERM to the torchrun agents) loses no step, the job resumes from
the checkpoint at a different world size, and the loss falls. Phase 1 runs two replicas configured only by
``scheduler.elastic.environment.torchrun_env`` (c10d rendezvous on 127.0.0.1), so the environment Tide gives
replicas is exercised by real torchrun too; phase 2 resumes in one standalone agent with three workers.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scheduler.elastic.agent.ports import free_port
from scheduler.elastic.agent.progress import read_progress
from scheduler.elastic.environment import RendezvousTuning, ReplicaLaunch, torchrun_env
from scheduler.elastic.launch import run_id_for

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "examples" / "train_elastic.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
TRAIN_ARGS = ["--ckpt-every", "10", "--step-time", "0.03"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def records(*logs: Path) -> list[dict[str, object]]:
    out = []
    for log in logs:
        for line in log.read_text().splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
    return out


def steps(recs: list[dict[str, object]]) -> list[dict[str, object]]:
    return [r for r in recs if "step" in r]


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


class Agents:
    """torchrun agents started by this test, and every process they start.

    torchrun puts each worker in a session of its own, so killing an agent's group misses its workers; all
    of them inherit ``TIDE_TEST_TAG`` from the agent, and ``kill_all`` finds them by it in ``/proc``.
    """

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.tag = f"TIDE_TEST_TAG={uuid.uuid4().hex}".encode()

    def start(self, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "wb") as out:
            p = subprocess.Popen(
                argv,
                env={**os.environ, **env, "TIDE_TEST_TAG": self.tag.split(b"=")[1].decode()},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(p)
        return p

    def kill_all(self) -> None:
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                with contextlib.suppress(OSError):
                    if self.tag in (proc / "environ").read_bytes().split(b"\0"):
                        os.kill(int(proc.name), signal.SIGKILL)


@pytest.fixture
def agents() -> Iterator[Agents]:
    a = Agents()
    yield a
    a.kill_all()


def test_sigterm_checkpoints_and_resume_at_another_world_size_loses_no_step(
    agents: Agents, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    port = free_port()
    logs = [tmp_path / f"replica{i}.log" for i in range(2)]
    phase1 = []
    for i, log in enumerate(logs):
        launch = ReplicaLaunch(
            job="t", project="p", replica_index=i, run_id=run_id_for("p", "t", 1), rdzv_host="127.0.0.1",
            rdzv_port=port, min_nodes=2, max_nodes=2, checkpoint_dir=str(ckpt), local_addr="127.0.0.1",
            max_restarts=0, tuning=RendezvousTuning(shutdown_timeout_s=20),
        )  # fmt: skip
        phase1.append(agents.start([*TORCHRUN, str(SCRIPT), "--steps", "100000", *TRAIN_ARGS],
                                   torchrun_env(launch), log))  # fmt: skip

    # Let it pass a periodic checkpoint (step 10) and run on, then stop it mid-interval.
    wait_for(lambda: any(int(s["step"]) >= 25 for s in steps(records(*logs))), 60, "step 25 at world size 2")
    for p in phase1:
        p.send_signal(signal.SIGTERM)
    for p in phase1:
        p.wait(timeout=30)
    recs1 = records(*logs)
    stop = [r for r in recs1 if r.get("event") == "stop"]
    # Each agent forwards SIGTERM to its worker on its own; when the two land either side of a step's
    # all-reduce, one rank learns of the stop from its peer. Either way both stop at the same step.
    assert stop and stop[0]["signalled_ranks"] in (1, 2), recs1[-3:]
    last = max(int(s["step"]) for s in steps(recs1))
    saved = [int(r["saved_step"]) for r in recs1 if r.get("reason") == "stop"]
    assert saved == [last], "the stop checkpoint holds the last step logged"
    assert {s["world_size"] for s in steps(recs1)} == {2}
    assert (ckpt / "checkpoint.pt").exists()
    assert not list(ckpt.glob("*.tmp*")), "no temporary checkpoint left behind"
    saved_at = next(float(r["time"]) for r in recs1 if r.get("reason") == "stop")
    mark = float((ckpt / "tide-checkpointed-at").read_text())
    assert saved_at - 5 < mark <= saved_at, "the progress mark Tide reads is the stop checkpoint's time"
    speed = read_progress(ckpt)  # the training speed Tide reads (goodput-aware growth)
    assert speed is not None and speed.world_size == 2 and speed.samples_per_second > 0

    log2 = tmp_path / "resume.log"
    resumed = agents.start(
        [
            *TORCHRUN,
            "--standalone",
            "--nproc-per-node=3",
            str(SCRIPT),
            "--steps",
            str(last + 20),
            *TRAIN_ARGS,
        ],
        {"TIDE_CHECKPOINT_DIR": str(ckpt), "OMP_NUM_THREADS": "1"},
        log2,
    )
    assert resumed.wait(timeout=60) == 0, log2.read_text()[-2000:]
    recs2 = records(log2)
    start = next(r for r in recs2 if r.get("event") == "start")
    assert (start["resumed_from"], start["world_size"]) == (last, 3)
    steps2 = steps(recs2)
    assert [int(s["step"]) for s in steps2] == list(range(last + 1, last + 21)), "no step lost or repeated"
    assert {s["world_size"] for s in steps2} == {3}
    assert any(r.get("event") == "done" for r in recs2)

    losses = [float(s["loss"]) for s in steps(recs1) + steps2]
    first, final = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert final < first / 3, f"loss did not fall: {first:.4f} -> {final:.4f}"
