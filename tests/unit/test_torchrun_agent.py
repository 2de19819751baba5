"""The warm launcher's stand-in for torchrun's agent (``scheduler.elastic.agent.torchrun_agent``).

What a user is promised: an unchanged ``torchrun train.py`` under Tide gets the worker environment torchrun
would give it (checked against torch's own agent source), launches Tide cannot run exactly as torchrun
would go to torchrun itself (with the reason in the replica's log), the replicas of a launch agree on one
store port before any worker starts, and the replica's exit code says what happened: 0 done, 1 a worker
failed (the others are stopped), 143 stopped by SIGTERM (workers told, then gone).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from scheduler.elastic.agent import torchrun_agent
from scheduler.elastic.agent.ports import free_port
from scheduler.executors.base import LaunchSpec
from scheduler.executors.local_launches import TorchrunLaunches

torchrun = pytest.importorskip("torch.distributed.run")


def tide_env(index: int, size: int = 2, **extra: str) -> dict[str, str]:
    job_env = {"TIDE_NUM_REPLICAS": str(size), "TIDE_GENERATION": "3", "TIDE_JOB_ID": "7", **extra}
    spec = LaunchSpec(replica_id=1, project="a", job="train", index=index, node=f"node-{index}",
                      gpu_ids=(), argv=("torchrun", "train.py"), env=job_env)  # fmt: skip
    return TorchrunLaunches().env_for(spec, Path("/data"))


def planned(
    argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> torchrun_agent.NodeLaunch | str:
    for key in [k for k in os.environ if k.startswith("PET_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return torchrun_agent.plan(torchrun.parse_args(argv), env)


def test_a_tide_launch_is_planned_from_torchruns_own_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    env = tide_env(index=1, size=2)
    launch = planned(["train.py", "--steps", "5"], env, monkeypatch)
    assert isinstance(launch, torchrun_agent.NodeLaunch)
    assert (launch.node_rank, launch.nnodes, launch.nproc) == (1, 2, 1)
    assert (launch.host, launch.port) == ("127.0.0.1", int(env["PET_RDZV_ENDPOINT"].rsplit(":", 1)[1]))
    assert launch.run_id == "a.train.g3"
    assert launch.max_restarts == 0


@pytest.mark.parametrize(
    ("argv", "extra", "why"),
    [
        (["--standalone", "train.py"], {}, "--standalone"),
        (["--nnodes=1:4", "train.py"], {}, "not a fixed size"),
        (["--nproc-per-node=gpu", "train.py"], {}, "not a positive integer"),
        (["--no-python", "train.sh"], {}, "--no-python"),
        (["--log-dir=/tmp/x", "train.py"], {}, "--log-dir"),
        (["train.py"], {"TIDE_TORCHRUN_AGENT": "torchrun"}, "TIDE_TORCHRUN_AGENT=torchrun"),
    ],
)
def test_what_it_cannot_run_exactly_goes_to_torchrun_with_a_reason(
    argv: list[str], extra: dict[str, str], why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = planned(argv, tide_env(index=0, **extra), monkeypatch)
    assert isinstance(result, str)
    assert why in result


def test_a_replica_index_outside_the_launch_goes_to_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**tide_env(index=1, size=2), "TIDE_REPLICA_INDEX": "2"}
    assert isinstance(planned(["train.py"], env, monkeypatch), str)


def test_workers_get_every_variable_torchruns_agent_sets() -> None:
    source = Path(torchrun.__file__).parent / "elastic" / "agent" / "server" / "local_elastic_agent.py"
    block = source.read_text().split("worker_env = {", 1)[1].split("}", 1)[0]
    torch_keys = set(re.findall(r'"([A-Z_]+)":', block)) | {"LOCAL_RANK"}
    launch = torchrun_agent.NodeLaunch(node_rank=1, nnodes=3, nproc=2, host="127.0.0.1", port=1, run_id="r",
                               max_restarts=0, shutdown_timeout=5, role="default")  # fmt: skip
    env = torchrun_agent.worker_env(launch, local_rank=1, master_port=2345)
    assert torch_keys <= set(env), torch_keys - set(env)
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["GROUP_RANK"]) == ("3", "1", "6", "1")
    assert (env["LOCAL_WORLD_SIZE"], env["GROUP_WORLD_SIZE"], env["MASTER_PORT"]) == ("2", "3", "2345")
    assert env["TORCHELASTIC_USE_AGENT_STORE"] == "False"  # rank 0's worker hosts the store


def test_the_replicas_of_a_launch_agree_on_one_store_port() -> None:
    port = free_port()
    ports: dict[int, int] = {}

    def replica(rank: int) -> None:
        launch = torchrun_agent.NodeLaunch(node_rank=rank, nnodes=3, nproc=1, host="127.0.0.1", port=port,
                                   run_id="a.train.g1", max_restarts=0, shutdown_timeout=5, role="default")  # fmt: skip
        ports[rank] = torchrun_agent.rendezvous(launch)

    threads = [threading.Thread(target=replica, args=(r,), daemon=True) for r in (0, 1, 2)]
    threads[0].start()
    stray = socket.socket()
    deadline = time.monotonic() + 10
    while stray.connect_ex(("127.0.0.1", port)) != 0 and time.monotonic() < deadline:
        time.sleep(0.02)  # the master listens
    with stray:  # not of this launch: turned away
        stray.sendall(b"tide-launch a.train.g0 1\n")
        assert stray.recv(16) == b""
    threads[2].start()
    time.sleep(0.1)
    threads[1].start()
    for t in threads:
        t.join(timeout=10)
    assert len(ports) == 3 and len(set(ports.values())) == 1, ports


AGENT = """
import os, sys, time
from scheduler.elastic.agent import torchrun_agent
codes = [int(c) for c in sys.argv[2].split(",")]
launch = torchrun_agent.NodeLaunch(node_rank=0, nnodes=1, nproc=len(codes), host="127.0.0.1", port=1,
                           run_id="r", max_restarts=0, shutdown_timeout=2, role="default")
def entry(local_rank):
    code = codes[local_rank]
    if code < 0:  # wait to be stopped (SIGTERM ends the worker: default action)
        time.sleep(60)
    time.sleep(0.2 * local_rank)
    os._exit(code)
sys.exit(torchrun_agent.run(launch, entry, sys.argv[1]))
"""


def agent(tmp_path: Path, codes: str) -> tuple[subprocess.Popen[bytes], Path]:
    workers = tmp_path / "workers"
    proc = subprocess.Popen([sys.executable, "-c", AGENT, str(workers), codes], start_new_session=True)
    return proc, workers


@pytest.mark.parametrize(("codes", "expected"), [("0,0", 0), ("0,3", 1), ("5,-1", 1)])
def test_the_replica_exit_code_says_how_its_workers_ended(tmp_path: Path, codes: str, expected: int) -> None:
    proc, workers = agent(tmp_path, codes)
    assert proc.wait(timeout=30) == expected
    assert workers.exists()  # the launch formed before the workers started


def test_sigterm_stops_the_workers_and_exits_143(tmp_path: Path) -> None:
    proc, workers = agent(tmp_path, "-1,-1")
    deadline = time.monotonic() + 20
    while not workers.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)  # the launcher only: it forwards the signal to its workers
    assert proc.wait(timeout=10) == torchrun_agent.STOPPED_EXIT
    leftovers = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True, check=False)
    assert leftovers.stdout.strip() == ""
