"""The seed scenario on Kubernetes with real training: ``tide serve --executor kubernetes`` against the fake
API server whose kubelet runs each pod's command as a real process (``kubekit``; a fake, not Kubernetes).

Four nodes of 1 GPU; projects a and b are guaranteed 2 each. a's ``torchrun train_elastic.py`` (min 2,
max 4) trains at world size 4 in four pods, each running Tide's agent. b submits a 2-GPU job: the pods of
a's replicas 3 then 2 are deleted, the master's pod (and the other survivor's) keeps running, and the
survivors relaunch in place at world size 2 from the checkpoint; b runs and succeeds; a grows back to 4
with two new pods. No step is repeated or lost, the loss falls, both jobs succeed, no failure restart is
spent. A second test SIGKILLs ``tide serve`` right at a shrink (as the executor deletes the first pod)
and restarts it: the job trains at the new size, with each replica's pod made once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubekit import SCRIPT, KubeCluster, Steps, wait_for

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

STEP_TIME = 0.05


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[KubeCluster]:
    made = KubeCluster(tmp_path)
    try:
        made.start_service()
        made.client.create_project({"name": "a", "deserved_gpus": 2})
        made.client.create_project({"name": "b", "deserved_gpus": 2})
        yield made
    finally:
        made.close()


def submit_a(cluster: KubeCluster, steps: int) -> None:
    command = ["torchrun", str(SCRIPT), "--steps", str(steps), "--step-time", str(STEP_TIME),
               "--ckpt-every", "10", "--log-every", "1"]  # fmt: skip
    body = {"name": "train", "workers": 3, "min_replicas": 2, "max_replicas": 4, "command": command}
    cluster.client.submit("a", body)


def submit_b(cluster: KubeCluster, seconds: float) -> None:
    command = ["python", "-c", f"import time; time.sleep({seconds})"]
    cluster.client.submit("b", {"name": "work", "workers": 1, "command": command})


def status(cluster: KubeCluster, project: str, job: str) -> str:
    return cluster.client.job(project, job).status


def test_seed_scenario_on_kubernetes_resizes_in_place_with_real_training(cluster: KubeCluster) -> None:
    steps = Steps(cluster)
    submit_a(cluster, steps=700)
    steps.wait_size(4, 0.0, timeout=150)
    before = cluster.running("train")
    assert sorted(before) == [0, 1, 2, 3]
    wait_for(lambda: cluster.warm_spares() >= 4, 120, "the agents' spare launchers to import torch")

    submit_b(cluster, seconds=12)
    shrunk = steps.wait_size(2, 0.0, timeout=60)
    deleted = [name.rsplit("-", 2)[1] for name in cluster.deleted_pods()]
    assert deleted[:2] == ["3", "2"], f"workers go first, highest index first: {cluster.deleted_pods()}"
    survivors = cluster.running("train")
    assert survivors == {0: before[0], 1: before[1]}, "the master's pod and replica 1's pod are untouched"
    wait_for(lambda: status(cluster, "b", "work") == "succeeded", 90, "b's job to succeed")

    grown = steps.wait_size(4, float(shrunk["time"]), timeout=120)
    after = cluster.running("train")
    assert after[0] == before[0] and after[1] == before[1], "the survivors' pods stayed through the grow"
    assert after[2] != before[2] and after[3] != before[3], "the grow made new pods for replicas 2 and 3"
    wait_for(lambda: status(cluster, "a", "train") == "succeeded", 200, "a's job to succeed")

    lines = steps.lines()
    numbers = [int(line["step"]) for line in lines]
    assert numbers == list(range(1, 701)), "a step was repeated or lost across a resize"
    sizes = [int(line["world_size"]) for line in lines]
    assert [n for i, n in enumerate(sizes) if i == 0 or n != sizes[i - 1]] == [4, 2, 4]
    losses = [float(line["loss"]) for line in lines]
    assert sum(losses[-10:]) < sum(losses[:10]) / 3, "the loss did not fall"
    assert float(grown["time"]) > float(shrunk["time"])
    restarts = [e for e in cluster.client.events(project="a") if e.kind == "restart"]
    assert restarts == [], "a resize spent a restart"
    assert cluster.api.kubelets.rejected == [], "a pod was placed where its GPU was not free"


def _pods_made(cluster: KubeCluster) -> list[str]:
    return [str(r.body["metadata"]["name"]) for r in cluster.api.calls("POST", "/pods") if r.body]


def test_a_service_killed_at_a_shrink_resumes_it_after_its_restart(cluster: KubeCluster) -> None:
    steps = Steps(cluster)
    submit_a(cluster, steps=100_000)
    steps.wait_size(4, 0.0, timeout=150)
    master = cluster.running("train")[0]
    wait_for(lambda: cluster.warm_spares() >= 4, 120, "the agents' spare launchers to import torch")

    killed: list[Any] = []

    def kill_at_first_delete(request: Any) -> None:
        if request.method == "DELETE" and "/pods/" in request.path and not killed:
            cluster.kill_service()  # between the shrink decision and the survivors' relaunch
            killed.append(request.path)

    cluster.api.on_request = kill_at_first_delete
    submit_b(cluster, seconds=3600)
    wait_for(lambda: killed, 60, "the shrink's first pod deletion")
    cluster.api.on_request = None
    cluster.start_service()

    shrunk = steps.wait_size(2, 0.0, timeout=120)
    wait_for(lambda: sorted(cluster.running("train")) == [0, 1], 60, "a's two replicas to run")
    assert cluster.running("train")[0] == master, "the master's pod survived the service's restart"
    wait_for(lambda: status(cluster, "b", "work") == "running", 60, "b's job to run")
    made = _pods_made(cluster)
    assert len(made) == len(set(made)), f"a pod was made twice: {made}"
    wait_for(lambda: steps.at_size(2, float(shrunk["time"]) + 3), 30, "training to go on at size 2")
    numbers = [int(line["step"]) for line in steps.lines()]
    assert numbers == sorted(numbers) and len(numbers) == len(set(numbers)), "steps went back"
