"""A real ``tide serve`` stopped as people and service managers stop it.

A normal stop (SIGTERM to the service, or to its whole process group as systemd and a terminal's job
control send it, while clients are writing) leaves a clean log: no traceback, no warning that the engine
stopped on its own. It once logged a ``ConnectionResetError`` from the ``tide-engine-link`` thread when the
engine process closed its end first with a wake of the API's still unread.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from servicekit import answers, free_port, kill_leftovers, serve_process, wait_for

from api.client import TideAPIError, TideClient, local_server


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
