"""The seed scenario on Kubernetes: REST API -> engine -> Kubernetes executor -> a fake API server.

One GPU node of 4 (``gpu-0``); projects a and b are guaranteed 2 each. a's elastic job (master + 3
workers, 2..4) gets 4 pods on gpu-0; b submits two 1-GPU jobs: a's pods for replicas 3 then 2 are deleted
with the grace period, the master's pod stays, and b's pods are created only once a's are gone (the fake
kubelet would reject them otherwise: it admits no more GPUs than the node has). b's jobs are deleted and
a grows back to 4; a is deleted: its workers' pods go first, the master's last. A restart of the service
adopts every pod by its labels and creates none twice.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubefake import FakeKubeApi
from kubefake.harness import IMAGE, NAMESPACE, kube_executor, wait_for
from servicekit import RunningService

from api.client.rest import TideClient

GRACE = 2.0


def start_service(make: Callable[..., RunningService], api: FakeKubeApi, tmp_path: Path) -> RunningService:
    executor = kube_executor(api, tmp_path, grace=GRACE)
    return make(
        None,
        with_executor=executor,
        executor="kubernetes",
        cycle_period=0.1,
        grace_period=GRACE,
        default_image=IMAGE,
    )


def pods(api: FakeKubeApi, job: str) -> list[dict[str, Any]]:
    found = api.pods(NAMESPACE, f"tide.dev/job={job}")
    return sorted(found, key=lambda p: int(p["metadata"]["labels"]["tide.dev/replica"]))


def running(api: FakeKubeApi, job: str, count: int) -> bool:
    live = [p for p in pods(api, job) if p["status"]["phase"] == "Running"]
    return len(live) == count and len(pods(api, job)) == count


def replica_of(request_path: str, api_pods: dict[str, dict[str, Any]]) -> str:
    name = request_path.rsplit("/", 1)[1]
    labels = api_pods[name]["metadata"]["labels"]
    return f"{labels['tide.dev/job']}/{labels['tide.dev/replica']}"


def history_rv(api: FakeKubeApi, kind: str, name: str) -> int:
    return next(e.rv for e in api.store.history if e.type == kind and e.obj["metadata"]["name"] == name)


def env_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]}


def seed_start(client: TideClient, api: FakeKubeApi) -> list[dict[str, Any]]:
    client.create_project({"name": "a", "deserved_gpus": 2})
    client.create_project({"name": "b", "deserved_gpus": 2})
    job = {
        "name": "train",
        "workers": 3,
        "min_replicas": 2,
        "max_replicas": 4,
        "command": ["python", "train.py"],
    }
    client.submit("a", {**job, "env": {"LR": "0.1", "NOTE": "costs $(5)"}})
    wait_for(lambda: running(api, "train", 4), what="a's 4 pods to run")
    return pods(api, "train")


def check_pods_and_service(api: FakeKubeApi, first: list[dict[str, Any]]) -> None:
    """a's four pods: placed, limited, labelled, with the replica environment and the rendezvous name."""
    master = first[0]
    assert [p["metadata"]["labels"]["tide.dev/role"] for p in first] == [
        "master",
        "worker",
        "worker",
        "worker",
    ]
    assert {p["spec"]["nodeName"] for p in first} == {"gpu-0"}
    assert all(p["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"} for p in first)
    assert all(p["spec"]["terminationGracePeriodSeconds"] == 2 for p in first)
    assert master["spec"]["containers"][0]["command"] == ["python", "train.py"]
    assert master["spec"]["containers"][0]["image"] == IMAGE
    env = env_of(first[2])
    service = api.store.list("services", NAMESPACE, None)[0][0]
    host = f"{service['metadata']['name']}.{NAMESPACE}.svc"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"]["tide.dev/role"] == "master"
    assert env["TIDE_REPLICA_INDEX"] == "2" and env["TIDE_REPLICA_ROLE"] == "worker"
    assert env["TIDE_NUM_REPLICAS"] == "4" and env["TIDE_NODE"] == "gpu-0" and env["LR"] == "0.1"
    assert env["NOTE"] == "costs $$(5)"  # escaped: Kubernetes must not expand it
    assert env["PET_RDZV_ENDPOINT"] == f"{host}:29400" and env["PET_NNODES"] == "4:4"
    assert env["PET_LOCAL_ADDR"] == "$(TIDE_POD_IP)"
    assert env["TIDE_POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}


@pytest.mark.slow
def test_seed_scenario_on_kubernetes(
    api: FakeKubeApi, make_service: Callable[..., RunningService], tmp_path: Path
) -> None:
    client = start_service(make_service, api, tmp_path).client()
    first = seed_start(client, api)
    seen = {p["metadata"]["name"]: p for p in first}
    master = first[0]
    check_pods_and_service(api, first)
    assert client.logs("a", "train", replica=1, tail=1) == "fake kubelet: started on gpu-0\n"  # from the API

    b_job = {"workers": 0, "command": ["python", "eval.py"], "image": "registry.example/eval:2"}
    client.submit("b", {"name": "one", **b_job})
    client.submit("b", {"name": "two", **b_job})
    wait_for(lambda: running(api, "one", 1) and running(api, "two", 1), what="b's pods to run")
    wait_for(lambda: running(api, "train", 2), what="a to shrink to 2 pods")
    deletes = [r for r in api.calls("DELETE", "/pods/") if r.path.rsplit("/", 1)[1] in seen]
    assert [replica_of(r.path, seen) for r in deletes] == ["train/3", "train/2"]  # workers, highest first
    assert all(r.query["gracePeriodSeconds"] == "2" for r in deletes)
    assert pods(api, "train")[0]["metadata"]["uid"] == master["metadata"]["uid"]  # the master stayed
    last_gone = max(history_rv(api, "DELETED", p["metadata"]["name"]) for p in first[2:])
    b_created = min(
        history_rv(api, "ADDED", p["metadata"]["name"]) for p in pods(api, "one") + pods(api, "two")
    )
    assert last_gone < b_created  # b's pods were made once a's had released their GPUs
    assert api.kubelets.rejected == []

    client.delete_job("b", "one")
    client.delete_job("b", "two")
    wait_for(lambda: running(api, "train", 4), what="a to grow back to 4 pods")
    assert pods(api, "train")[0]["metadata"]["uid"] == master["metadata"]["uid"]
    wait_for(lambda: not api.pods(NAMESPACE, "tide.dev/project=b"), what="b's pods to be removed")
    grown = {p["metadata"]["name"]: p for p in pods(api, "train")}

    client.delete_job("a", "train")
    wait_for(lambda: not pods(api, "train"), what="a's pods to be deleted")
    final = [r for r in api.calls("DELETE", "/pods/") if r.path.rsplit("/", 1)[1] in grown]
    order = [replica_of(r.path, grown) for r in final]
    assert order[-1] == "train/0" and sorted(order[:-1]) == ["train/1", "train/2", "train/3"]
    master_name = master["metadata"]["name"]
    workers_gone = max(history_rv(api, "DELETED", name) for name in grown if name != master_name)
    master_deleted = next(
        e.rv
        for e in api.store.history
        if e.obj["metadata"]["name"] == master_name and e.obj["metadata"].get("deletionTimestamp")
    )
    assert workers_gone < master_deleted  # the master's pod was deleted only once the workers' were gone
    wait_for(lambda: not api.store.list("services", NAMESPACE, None)[0], what="the job's Service to go")
    saved = client.logs("a", "train", replica=2)  # the pod is gone; its log was kept under DATA/logs
    assert "fake kubelet: started on gpu-0" in saved and "--- tide: pod tide-a-train-" in saved
    # the Service goes in the cycle that forgets the last pod, a moment before that cycle commits
    wait_for(lambda: {r.status for r in client.job("a", "train").replicas} == {"stopped"}, what="stopped")
    assert api.kubelets.rejected == []


def test_restart_adopts_pods_and_creates_none_twice(
    api: FakeKubeApi, make_service: Callable[..., RunningService], tmp_path: Path
) -> None:
    service = start_service(make_service, api, tmp_path)
    before = seed_start(service.client(), api)
    creates = len(api.calls("POST", "/pods$"))
    service.stop()

    again = start_service(make_service, api, tmp_path)
    wait_for(lambda: again.services.engine.cycles >= 5, what="cycles after the restart")
    assert len(api.calls("POST", "/pods$")) == creates  # nothing created twice
    assert [p["metadata"]["uid"] for p in pods(api, "train")] == [p["metadata"]["uid"] for p in before]
    job = again.client().job("a", "train")
    assert job.status == "running" and [r.status for r in job.replicas] == ["running"] * 4

    api.finish(NAMESPACE, before[0]["metadata"]["name"], 0)  # the master completes the training
    wait_for(lambda: again.client().job("a", "train").status == "succeeded", what="the job to succeed")
    wait_for(lambda: not pods(api, "train"), what="the workers' pods to be removed")
