"""GPU fractions (R20) end to end on a real ``tide serve``: one node of 2 GPUs, the local executor, real
processes. Three 0.5 jobs of one project run, two on one GPU and the third on the other (not three GPUs),
each told its device and its share; a whole-GPU job of the same project waits, and runs on the GPU the lone
fraction leaves when that job ends. (No real GPU here: the devices are the virtual node's, so the executor
sets no CUDA_VISIBLE_DEVICES; ``TIDE_GPU_IDS`` names the device it would.)"""

from __future__ import annotations

from pathlib import Path

from servicekit import answers, free_port, kill_leftovers, serve_process, wait_for

from api.client.rest import TideAPIError, TideClient
from api.shared.paths import local_server

SHOW = ["sh", "-c", 'echo "gpus=$TIDE_GPU_IDS share=$TIDE_GPU_FRACTION"; exec sleep 600']


def _said(client: TideClient, job: str) -> str | None:
    """What replica 0 of the job printed about its GPU, once it has (None before it started)."""
    try:
        text = client.logs("a", job, replica=0)
    except TideAPIError:
        return None  # no log yet
    return next((line for line in text.splitlines() if line.startswith("gpus=")), None)


def test_three_halves_share_two_gpus_then_a_whole_job_takes_the_gpu_a_half_leaves(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = serve_process(tmp_path, port, "--grace-period", "2", gpus_per_node=2)
    try:
        wait_for(lambda: answers(url), timeout=60, what="tide serve to answer")
        _, token = local_server(tmp_path)
        with TideClient(url, token) as client:
            client.create_project({"name": "a", "deserved_gpus": 2})
            for name in ("n1", "n2", "n3"):
                client.submit("a", {"name": name, "gpu_fraction": 0.5, "command": SHOW})
            said = wait_for(
                lambda: all(s := [_said(client, n) for n in ("n1", "n2", "n3")]) and s,
                timeout=30,
                what="the three halves to start and say their device",
            )
            assert sorted(said) == ["gpus=0 share=0.5", "gpus=0 share=0.5", "gpus=1 share=0.5"]  # type: ignore[call-overload]
            node = client.nodes()[0]
            assert sorted(g for s in node.slots for g in s.gpu_ids) == [0, 0, 1]

            client.submit("a", {"name": "whole", "command": SHOW})
            wait_for(lambda: client.job("a", "whole").queue_position == 1, timeout=30, what="whole to wait")
            alone = next(n for n in ("n1", "n2", "n3") if _said(client, n) == "gpus=1 share=0.5")
            client.delete_job("a", alone)
            line = wait_for(lambda: _said(client, "whole"), timeout=30, what="the whole job to start")
            assert line == "gpus=1 share="
            assert client.job("a", "whole").status == "running"
            assert all(client.job("a", n).status == "running" for n in ("n1", "n2", "n3") if n != alone)
    finally:
        process.terminate()
        process.wait(timeout=30)
        kill_leftovers(tmp_path)
