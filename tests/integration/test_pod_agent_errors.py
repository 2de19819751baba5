"""``tide agent``, a job pod's entrypoint, when something is wrong: every case is a message that says what
to fix and a non-zero exit, never a traceback or a pod that hangs.

The agent runs as a real process (``tide agent -- torchrun train.py``), as the kubelet would start it: with
no settings, against a service that is not there, and against a real service that refuses its token.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from servicekit import RunningService, settings_for, wait_for
from test_agent_polls import AgentPods, _replicas

from scheduler.core import Node
from scheduler.elastic.agent.ports import free_port

TIDE = str(Path(sys.executable).parent / "tide")
COMMAND = ["torchrun", "train.py"]


def agent(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TIDE_")}
    return subprocess.run(
        [TIDE, "agent", *args, "--", *COMMAND],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def pod_env(url: str, replica_id: int = 1, token: str = "t0ken") -> dict[str, str]:
    return {
        "TIDE_AGENT_URL": url,
        "TIDE_AGENT_TOKEN": token,
        "TIDE_PROJECT": "a",
        "TIDE_JOB": "train",
        "TIDE_REPLICA_ID": str(replica_id),
        "TIDE_MASTER_ADDR": "127.0.0.1",
    }


def test_an_agent_without_its_settings_says_which_one_is_missing() -> None:
    done = agent({})
    assert done.returncode == 2
    assert "TIDE_AGENT_URL is not set" in done.stderr and "Traceback" not in done.stderr
    env = pod_env("http://127.0.0.1:1")
    env.pop("TIDE_AGENT_TOKEN")
    assert "TIDE_AGENT_TOKEN is not set" in agent(env).stderr
    assert "is not a replica id" in agent({**pod_env("http://x"), "TIDE_REPLICA_ID": "r1"}).stderr
    assert "must start with http" in agent(pod_env("tide.tide.svc")).stderr


def test_an_agent_that_cannot_reach_the_service_says_where_it_tried_then_gives_up() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    done = agent(pod_env(url), "--connect-timeout", "2")
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - started < 30
    assert f"cannot reach the Tide service at {url}" in done.stderr
    assert "gave up: no answer from" in done.stderr and "TIDE_AGENT_URL" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture
def service(tmp_path: Path) -> Iterator[RunningService]:
    executor = AgentPods((Node("node-0", 4),))
    running = RunningService(settings_for(tmp_path, None), executor=executor).start()
    running.client().create_project({"name": "a", "deserved_gpus": 4})
    yield running
    running.stop()


def test_an_agent_with_a_wrong_token_is_told_so_and_exits(service: RunningService) -> None:
    service.client().submit("a", {"name": "train", "command": COMMAND, "workers": 1})
    ids = wait_for(lambda: len(r := _replicas(service, "train")) == 2 and r, what="the job's pods")
    assert isinstance(ids, dict)
    done = agent(pod_env(service.url, ids[0], token="not-this-jobs-token"))
    assert done.returncode == 2
    assert "the service refused this agent: HTTP 401" in done.stderr
    assert "not the agent token of job a/train" in done.stderr and "Traceback" not in done.stderr
    gone = agent(pod_env(service.url, 999_999, token="whatever"))  # a replica the job no longer has
    assert gone.returncode == 2 and "HTTP 401" in gone.stderr  # the token is checked first
