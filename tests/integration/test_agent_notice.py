"""A preemption notice on the Kubernetes executor reaches the training through each pod's agent.

Story: team a (no quota, ``preemption_notice_seconds`` 2) runs a torchrun job in place on 4 GPUs; team b,
which deserves 2, submits. The shrink does not relaunch a's survivors at once: every agent of the job (the
two leaving and the two staying) is answered ``notice`` on its poll and passes SIGUSR1 to its training;
only once the 2 s ran are the leaving pods deleted and the survivors relaunched at size 2. The agent half:
a real agent forwards the order to its launch's training process (SIGUSR1), and its launcher survives it.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from servicekit import RunningService, settings_for, wait_for
from test_agent_polls import AgentPods, _launch_all, _poll, _replicas

from scheduler.core import Node
from scheduler.elastic.agent.link import AgentSettings, Reply
from scheduler.elastic.agent.pod import PodAgent
from scheduler.elastic.agent.pool import Launcher
from scheduler.store.models import ReplicaRow

NOTICE = 2


@pytest.fixture
def service(tmp_path: Path, db_url: str) -> Iterator[RunningService]:
    executor = AgentPods((Node("node-0", 4),))
    running = RunningService(settings_for(tmp_path, db_url, grace_period=10.0), executor=executor).start()
    client = running.client()
    client.create_project({"name": "a", "deserved_gpus": 0, "preemption_notice_seconds": NOTICE})
    client.create_project({"name": "b", "deserved_gpus": 2})
    yield running
    running.stop()


def _relaunched(service: RunningService, running: int, ids: dict[int, int]) -> dict[int, dict[str, Any]]:
    """The survivors' agents, having passed the notice on, long-poll for their next launch together."""
    with ThreadPoolExecutor(len(ids)) as pool:
        futures = {
            index: pool.submit(
                _poll, service, "a", rid, generation=running, state="running", noticed=True,
                port=40000 + index, wait=20,
            )
            for index, rid in ids.items()
        }  # fmt: skip
        answers = {index: f.result().json() for index, f in futures.items()}
    assert {a["action"] for a in answers.values()} == {"launch"}, answers
    return answers


def test_every_agent_of_a_shrunk_job_is_told_first_and_the_relaunch_waits_for_the_notice(
    service: RunningService,
) -> None:
    client = service.client()
    client.submit("a", {"name": "a", "command": ["torchrun", "train.py"], "min_replicas": 2, "workers": 3})
    first = _launch_all(service, "a", None, 4, state="warm")
    g1 = first[0]["generation"]
    ids = _replicas(service, "a")

    client.submit("b", {"name": "b", "command": ["sleep", "600"], "workers": 1})
    told = wait_for(
        lambda: _poll(service, "a", ids[3], generation=g1, state="running").json()["action"] == "notice",
        what="the leaving replica's notice",
    )
    assert told
    for index in (0, 1, 2):  # the staying ones are told too: rank 0 saves the checkpoint
        assert _poll(service, "a", ids[index], generation=g1, state="running").json()["action"] == "notice"
    # once an agent says it passed the notice on, it waits; an agent between launches is not told
    assert (
        _poll(service, "a", ids[0], generation=g1, state="running", noticed=True).json()["action"] == "wait"
    )
    assert _poll(service, "a", ids[1], generation=g1, state="warm").json()["action"] == "wait"
    shrink = next(e for e in client.events(project="a") if e.kind == "shrink")
    assert shrink.cause == "reclaim" and "notice: SIGUSR1 2 s before SIGTERM" in shrink.reason
    executor: AgentPods = service.executor  # type: ignore[assignment]
    assert not any(executor.observe()[ids[i]].stopping for i in (2, 3))  # no pod deleted during the notice

    second = _relaunched(service, g1, {i: ids[i] for i in (0, 1)})  # the survivors' next launch
    with service.services.db.read() as session:
        launched = session.get(ReplicaRow, ids[0])
        assert launched is not None and launched.launch_at is not None
        waited = launched.launch_at - shrink.time.timestamp()
    print(f"relaunch {waited:.2f} s after the shrink and its notice")
    assert NOTICE <= waited < NOTICE + 2.0  # as fine as the loop looks, on a loaded machine
    assert {(o["world_size"], o["generation"] > g1) for o in second.values()} == {(2, True)}
    g2 = second[0]["generation"]
    assert _poll(service, "a", ids[0], generation=g2, state="running").json()["action"] == "wait"


TRAINER = """
import signal, sys, time
out = open(sys.argv[1], "a", buffering=1)
signal.signal(signal.SIGUSR1, lambda *_: out.write(f"SIGUSR1 {time.time()}\\n"))
out.write("up\\n")
time.sleep(60)
"""
LAUNCHER = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]]); time.sleep(60)"


def test_the_agent_passes_a_notice_to_its_launchs_training_and_the_launcher_survives(tmp_path: Path) -> None:
    signals = tmp_path / "signals.txt"
    # a launcher (as the warm launcher or torchrun would be) whose child is the training process
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, TRAINER, str(signals)], start_new_session=True
    )
    try:
        wait_for(lambda: signals.exists() and "up" in signals.read_text(), what="the training to start")
        settings = AgentSettings(
            "http://127.0.0.1:9", "t", "a", "train", 7, "127.0.0.1", ("torchrun", "x.py")
        )
        agent = PodAgent(settings, state_dir=tmp_path / "agent", out=io.StringIO())
        agent.launch = Launcher(launcher.pid, tmp_path / "e", tmp_path / "s", "m", tmp_path / "w")
        agent.generation, agent.state = 3, "running"
        assert agent._act(Reply("notice"), time.monotonic()) is None
        assert agent._report().noticed
        assert agent._act(Reply("notice"), time.monotonic()) is None  # an order given again: sent once
        wait_for(lambda: "SIGUSR1" in signals.read_text(), what="the training to get SIGUSR1")
        time.sleep(0.3)
        assert signals.read_text().count("SIGUSR1") == 1
        assert launcher.poll() is None  # the launcher was not signalled (SIGUSR1 would have ended it)
        assert "SIGUSR1 passed to 1 training process(es)" in agent.out.getvalue()  # type: ignore[attr-defined]
        agent.pool.close()
        agent.link.close()
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()
