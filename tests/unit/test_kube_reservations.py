"""The pieces of a GPU reservation on Kubernetes (R20): its name, its pod, the script that reports the device
(run here by a real ``sh``, under both of the device plugin's ways of passing devices), a fractional
replica's pod, and what a start waits for while the reservation is not ready."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubefake.containers import expand
from kubernetes import client

from scheduler.executors.base import LaunchDeferred, LaunchSpec
from scheduler.executors.kube import names, podspec, reservations
from scheduler.executors.kube.retry import Retrier

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_one_name_per_gpu_of_a_node_valid_however_long_the_node_name() -> None:
    long_a, long_b = "gpu-node-" + "a" * 80 + "-1", "gpu-node-" + "a" * 80 + "-2"
    made = {
        reservations.reservation_name(node, gpu)
        for node in ("gpu-0", "GPU.Rack1", long_a, long_b)
        for gpu in (0, 1, 7)
    }
    assert len(made) == 12
    assert all(len(name) <= 63 and DNS_LABEL.match(name) for name in made)
    assert reservations.reservation_name("gpu-0", 3) == reservations.reservation_name("gpu-0", 3)


def body() -> dict[str, Any]:
    return reservations.reservation_body(
        "r", "ns", node="gpu-0", device=1, project="team-a", image="busybox:1.36"
    )


def test_the_reservation_pod_holds_one_gpu_and_nothing_else() -> None:
    pod = body()
    client.V1Pod.model_validate(pod)  # a Pod the API takes
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"] == container["resources"]["requests"]  # Guaranteed: evicted last
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["spec"]["nodeName"] == "gpu-0" and pod["spec"]["automountServiceAccountToken"] is False
    assert pod["metadata"]["labels"] == {
        names.MANAGED_BY: names.MANAGER,
        names.PROJECT: "team-a",
        names.ROLE: reservations.ROLE,
        reservations.GPU: "1",
    }
    assert reservations.ReservationView.of(pod) is not None
    assert reservations.ReservationView.of({"metadata": {"labels": {names.ROLE: "master"}}}) is None


def run_script(env: dict[str, str]) -> tuple[str, int]:
    """The reservation container's command as Kubernetes expands it, run by sh: its first line, and its exit
    code once SIGTERM reached it."""
    argv = [expand(a, {}) for a in body()["spec"]["containers"][0]["command"]]
    env = {"PATH": "/usr/bin:/bin", **env}
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        line = process.stdout.readline().rstrip("\n")
        process.send_signal(signal.SIGTERM)
        return line, process.wait(timeout=10)


def test_the_script_reports_the_device_the_plugin_passed_and_ends_at_sigterm(tmp_path: Path) -> None:
    line, code = run_script({"NVIDIA_VISIBLE_DEVICES": "GPU-8f6e1c2a"})  # the plugin's envvar strategy
    assert (line, code) == ("tide-reserved-gpu=GPU-8f6e1c2a", 0)
    assert reservations.device_in_log(f"starting\n{line}\n") == "GPU-8f6e1c2a"
    devices = tmp_path / "nvidia-container-devices"  # its volume-mounts strategy: one file per device
    devices.mkdir()
    (devices / "GPU-77aa").touch()
    assert run_script({"NVIDIA_VISIBLE_DEVICES": str(devices)})[0] == "tide-reserved-gpu=GPU-77aa"
    assert run_script({})[0] == "tide-reserved-gpu="
    assert reservations.device_in_log("nothing yet\n") is None


def spec(**changes: Any) -> LaunchSpec:
    base = LaunchSpec(1, "team-a", "nb", 0, "gpu-0", (1,), ("sleep", "1"), {"TIDE_GPU_FRACTION": "0.5"})
    return LaunchSpec(**{**{f: getattr(base, f) for f in base.__slots__}, **changes})


def test_a_fractional_pod_asks_for_no_gpu_and_gets_the_reserved_device() -> None:
    options = podspec.PodOptions(namespace="ns", default_image="img:1")
    pod = podspec.pod_body(spec(gpu_share="0.5"), options, shared=("tide-gpu-gpu-0-1-abc", "GPU-77aa"))
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-77aa" and env["TIDE_GPU_FRACTION"] == "0.5"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert container["resources"] == {"requests": {"cpu": "2", "memory": "16Gi"}}
    assert pod["metadata"]["labels"][names.GPU_RESERVATION] == "tide-gpu-gpu-0-1-abc"
    assert pod["metadata"]["annotations"][names.GPU_SHARE] == "0.5"
    with pytest.raises(ValueError, match="reservation"):
        podspec.pod_body(spec(gpu_share="0.5"), options)
    whole = podspec.pod_body(spec(), options)["spec"]["containers"][0]
    assert whole["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in whole["env"]}  # the device plugin's to set


def never_called() -> client.CoreV1Api:
    raise AssertionError("no API call expected")


def registry(log_text: str) -> reservations.GpuReservations:
    return reservations.GpuReservations(
        never_called, lambda: (1.0, 1.0), Retrier(attempts=1), lambda x: x, lambda name, ns: log_text
    )


def seen(phase: str, **status: Any) -> dict[str, Any]:
    pod = body()
    pod["metadata"] |= {"name": reservations.reservation_name("gpu-0", 1), "namespace": "ns", "uid": "u1"}
    pod["status"] = {"phase": phase, **status}
    return pod


def test_a_start_waits_until_the_reservation_runs_and_names_one_device() -> None:
    waiting = registry("")
    pulled = {
        "containerStatuses": [{"name": "reserve", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]
    }
    waiting.fold("ADDED", seen("Pending", **pulled))
    with pytest.raises(LaunchDeferred, match="ImagePullBackOff"):
        waiting.device_for("gpu-0", 1, "team-a", "ns")
    waiting.fold("MODIFIED", seen("Running"))
    with pytest.raises(LaunchDeferred, match="has not said which device"):
        waiting.device_for("gpu-0", 1, "team-a", "ns")
    with pytest.raises(LaunchDeferred, match="still reserved for project team-a"):
        waiting.device_for("gpu-0", 1, "team-b", "ns")

    blind = registry("tide-reserved-gpu=\n")
    blind.fold("ADDED", seen("Running"))
    with pytest.raises(LaunchDeferred, match="sees no device, not one GPU: the device plugin must pass"):
        blind.device_for("gpu-0", 1, "team-a", "ns")

    ready = registry("tide-reserved-gpu=GPU-77aa\n")
    ready.fold("ADDED", seen("Running"))
    assert ready.device_for("gpu-0", 1, "team-a", "ns") == (
        reservations.reservation_name("gpu-0", 1),
        "GPU-77aa",
    )
    assert ready.lingers(reservations.reservation_name("gpu-0", 1), "ns")
    ready.fold("DELETED", seen("Running"))
    assert not ready.lingers(reservations.reservation_name("gpu-0", 1), "ns")
