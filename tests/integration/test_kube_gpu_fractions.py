"""GPU fractions on Kubernetes (R20): REST API -> engine -> Kubernetes executor -> the fake API server, whose
kubelet runs every container as a real process and plays the NVIDIA device plugin (a pod that requests
``nvidia.com/gpu`` gets its node's lowest free devices in ``NVIDIA_VISIBLE_DEVICES``; one that requests none
gets none).

A shared GPU is held by a reservation pod that requests the whole GPU and prints the device it was given;
the fractional replicas' pods request no GPU and get that device. Three 0.5 notebooks on a node of two GPUs:
two share one reservation, the third has the other; each notebook's process sees its reservation's device
and its share. A fraction's end leaves its partner's reservation alone; the last one's end removes it, and a
whole-GPU job then gets that GPU from the device plugin without a rejection. A restarted Tide adopts the
reservations: a fraction started later on a shared GPU uses the reservation there, and one nobody uses is
removed.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubefake import FakeKubeApi, ProcessOptions
from kubefake.harness import IMAGE, NAMESPACE, kube_executor, wait_for
from kubernetes import client as client_v1
from kubernetes import config
from servicekit import RunningService

from api.client.rest import TideClient
from scheduler.executors.base import LaunchDeferred, LaunchSpec
from scheduler.executors.kube import names, reservations

pytestmark = pytest.mark.slow
SHOW = 'echo "device=$NVIDIA_VISIBLE_DEVICES share=$TIDE_GPU_FRACTION"; exec sleep 120'
GPU = "nvidia.com/gpu"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeKubeApi]:
    base_env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    fake = FakeKubeApi(processes=ProcessOptions(work_dir=tmp_path / "kubelet", base_env=base_env)).start()
    fake.add_node("gpu-0", 2)
    yield fake
    fake.stop()


def serve(make_service: Callable[..., RunningService], api: FakeKubeApi, tmp_path: Path) -> RunningService:
    executor = kube_executor(api, tmp_path, grace=1.0)
    return make_service(
        None, with_executor=executor, executor="kubernetes", cycle_period=0.1, default_image=IMAGE
    )


def held(api: FakeKubeApi) -> list[dict[str, Any]]:
    """The reservation pods, Running or not."""
    return api.pods(NAMESPACE, f"{names.ROLE}={reservations.ROLE}")


def pod_of(api: FakeKubeApi, job: str) -> dict[str, Any] | None:
    found = api.pods(NAMESPACE, f"{names.JOB}={job}")
    return found[0] if found else None


def said(api: FakeKubeApi, job: str) -> str | None:
    """What the job's process printed (its device and share), once it printed it."""
    pod = pod_of(api, job)
    if pod is None or pod["status"].get("phase") != "Running":
        return None
    assert api.processes is not None
    text = api.processes.log_text(NAMESPACE, pod["metadata"]["name"]) or ""
    return next((line for line in text.splitlines() if line.startswith("device=")), None)


def device_of(api: FakeKubeApi, pod: dict[str, Any]) -> str:
    """The device the fake device plugin gave a pod that requested one GPU."""
    (device,) = api.kubelets.devices[pod["metadata"]["uid"]]
    return device


def notebook(client: TideClient, name: str) -> None:
    client.submit(
        "team-a", {"name": name, "gpu_fraction": 0.5, "interactive": True, "command": ["sh", "-c", SHOW]}
    )


def test_three_halves_share_two_reserved_gpus_and_each_reservation_goes_with_its_last_fraction(
    api: FakeKubeApi, make_service: Callable[..., RunningService], tmp_path: Path
) -> None:
    client = serve(make_service, api, tmp_path).client()
    client.create_project({"name": "team-a", "deserved_gpus": 2})
    for name in ("nb1", "nb2", "nb3"):
        notebook(client, name)
    lines = {
        n: wait_for(lambda n=n: said(api, n), 30, f"{n} to print its device") for n in ("nb1", "nb2", "nb3")
    }

    reserved = {p["metadata"]["name"]: p for p in held(api)}
    assert len(reserved) == 2  # two GPUs, not three
    for pod in reserved.values():
        container = pod["spec"]["containers"][0]
        assert pod["spec"]["nodeName"] == "gpu-0" and container["resources"]["limits"][GPU] == "1"
        assert pod["metadata"]["labels"][names.PROJECT] == "team-a"
    devices = {name: device_of(api, pod) for name, pod in reserved.items()}
    assert sorted(devices.values()) == ["GPU-gpu-0-0", "GPU-gpu-0-1"]
    sharing: dict[str, list[str]] = {}
    for job in ("nb1", "nb2", "nb3"):
        pod = pod_of(api, job)
        assert pod is not None
        resources = pod["spec"]["containers"][0]["resources"]
        assert GPU not in resources.get("limits", {}) and GPU not in resources.get("requests", {})
        assert resources["requests"] == {"cpu": "2", "memory": "16Gi"}  # half of one GPU's defaults
        assert pod["spec"]["nodeName"] == "gpu-0"
        reservation = pod["metadata"]["labels"][names.GPU_RESERVATION]
        assert lines[job] == f"device={devices[reservation]} share=0.5"  # the reserved device, and its cap
        assert pod["metadata"]["uid"] not in api.kubelets.devices  # the device plugin gave it nothing
        sharing.setdefault(reservation, []).append(job)
    assert sorted(map(len, sharing.values())) == [1, 2]
    assert [j.status for j in client.jobs("team-a")] == ["running"] * 3

    (alone,) = next(jobs for jobs in sharing.values() if len(jobs) == 1)
    pair = next(jobs for jobs in sharing.values() if len(jobs) == 2)
    lone_reservation = next(r for r, jobs in sharing.items() if len(jobs) == 1)
    api.kubelets.slow_to_stop[(NAMESPACE, lone_reservation)] = 0.8  # its GPU stays held a while
    client.delete_job("team-a", alone)  # and at once a whole-GPU job, which waits for the GPU it leaves
    client.submit(
        "team-a", {"name": "whole", "gpus_per_replica": 1, "command": ["sh", "-c", "exec sleep 120"]}
    )
    whole = wait_for(
        lambda: (p := pod_of(api, "whole")) and p["status"].get("phase") in ("Running", "Failed") and p,
        30,
        "the whole-GPU job's pod to run",
    )
    assert api.kubelets.rejected == []  # never placed while the reservation still held the GPU
    assert lone_reservation not in {p["metadata"]["name"] for p in held(api)}
    assert device_of(api, whole) == devices[lone_reservation]  # the GPU its fraction left

    pair_reservation = next(r for r, jobs in sharing.items() if len(jobs) == 2)
    client.delete_job("team-a", pair[0])
    wait_for(lambda: pod_of(api, pair[0]) is None, 15, "the first of the pair to go")
    assert [p["metadata"]["name"] for p in held(api)] == [pair_reservation]  # its partner still runs on it
    assert said(api, pair[1]) is not None
    client.delete_job("team-a", pair[1])
    wait_for(lambda: not held(api), 15, "the last reservation to go")
    assert api.kubelets.rejected == []


def test_a_restarted_tide_adopts_the_reservations_and_removes_the_unused_ones(
    api: FakeKubeApi, make_service: Callable[..., RunningService], tmp_path: Path
) -> None:
    first = serve(make_service, api, tmp_path)
    client = first.client()
    client.create_project({"name": "team-a", "deserved_gpus": 2})
    notebook(client, "nb1")
    wait_for(lambda: said(api, "nb1"), 30, "nb1 to print its device")
    (reservation,) = held(api)
    stray = reservations.reservation_body(
        reservations.reservation_name("gpu-0", 1),
        NAMESPACE,
        node="gpu-0",
        device=1,
        project="team-a",
        image=IMAGE,
    )  # as if Tide stopped after reserving a GPU for a fraction it never started
    first.stop()
    kube = config.new_client_from_config(str(api.kubeconfig(tmp_path / "admin.kubeconfig")))
    client_v1.CoreV1Api(kube).create_namespaced_pod(NAMESPACE, client_v1.V1Pod.model_validate(stray))
    kube.close()
    wait_for(lambda: len(held(api)) == 2, 15, "the stray reservation to be made")

    client = serve(make_service, api, tmp_path).client()
    wait_for(lambda: len(held(api)) == 1, 15, "the unused reservation to be removed")
    notebook(client, "nb2")  # packed onto nb1's GPU: the reservation there is used again, not made twice
    line = wait_for(lambda: said(api, "nb2"), 30, "nb2 to print its device")
    (kept,) = held(api)
    assert kept["metadata"]["uid"] == reservation["metadata"]["uid"]
    assert line == f"device={device_of(api, reservation)} share=0.5" == said(api, "nb1")
    for job in ("nb1", "nb2"):
        pod = pod_of(api, job)
        assert (
            pod is not None and pod["metadata"]["labels"][names.GPU_RESERVATION] == kept["metadata"]["name"]
        )
    assert api.kubelets.rejected == []


def test_a_fraction_whose_reservation_is_deleted_behind_tides_back_is_stopped_and_says_why(
    api: FakeKubeApi, make_service: Callable[..., RunningService], tmp_path: Path
) -> None:
    client = serve(make_service, api, tmp_path).client()
    client.create_project({"name": "team-a", "deserved_gpus": 2})
    notebook(client, "nb1")
    wait_for(lambda: said(api, "nb1"), 30, "nb1 to print its device")
    (reservation,) = held(api)
    api.delete_pod_behind_tides_back(NAMESPACE, reservation["metadata"]["name"])  # its GPU is free to anyone
    job = wait_for(lambda: (j := client.job("team-a", "nb1")).status == "failed" and j, 30, "nb1 to fail")
    assert f"the pod reserving its GPU, {reservation['metadata']['name']}, was deleted" in (job.message or "")
    wait_for(lambda: pod_of(api, "nb1") is None, 15, "its pod to be deleted")


def test_with_namespaces_per_project_the_reservation_is_the_projects_and_another_tides_is_left_alone(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    executor = kube_executor(api, tmp_path, namespace_per_project=True)
    stranger = reservations.reservation_body(
        "another-tides", "elsewhere", node="gpu-0", device=1, project="team-a", image=IMAGE
    )
    kube = config.new_client_from_config(str(api.kubeconfig(tmp_path / "admin.kubeconfig")))
    client_v1.CoreV1Api(kube).create_namespaced_pod("elsewhere", client_v1.V1Pod.model_validate(stranger))
    kube.close()
    share = LaunchSpec(7, "team-a", "nb", 0, "gpu-0", (0,), ("sh", "-c", SHOW), {"TIDE_GPU_FRACTION": "0.5"})
    share = dataclasses.replace(share, image=IMAGE, gpu_share="0.5")

    def started() -> Any:
        try:
            return executor.start(share)
        except LaunchDeferred:
            return None

    try:
        wait_for(started, 30, "the fraction to start")
        (reservation,) = api.pods("tide-team-a", f"{names.ROLE}={reservations.ROLE}")
        assert reservation["metadata"]["name"] == reservations.reservation_name("gpu-0", 0)
        pod = api.pods("tide-team-a", f"{names.REPLICA_ID}=7")[0]
        assert pod["metadata"]["labels"][names.GPU_RESERVATION] == reservation["metadata"]["name"]
        for _ in range(3):
            executor.observe()  # each observation sweeps unused reservations: never another Tide's
        assert [p["metadata"]["name"] for p in api.pods("elsewhere")] == ["another-tides"]
        assert executor.nodes()[0].gpus == 1  # Tide's reservation is its own GPU; the other Tide's is not
    finally:
        executor.close()
