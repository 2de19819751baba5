"""The Kubernetes executor keeps its view of pods and nodes current through watches that survive trouble.

Against the fake API server, with the real client: a watch cut mid-stream is resumed from the last
resourceVersion it delivered (no list, no event lost); a resourceVersion compacted away (410 Gone, as a
watch ERROR event or as an HTTP status) makes it list again, and what happened meanwhile is seen (a pod
that finished, a pod deleted behind Tide's back). Nodes: cordoned, tainted, NotReady, resized, added and
removed nodes are reflected in the inventory, and through the engine in ``GET /cluster``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubefake import FakeKubeApi
from kubefake.harness import IMAGE, NAMESPACE, kube_executor, wait_for
from servicekit import RunningService

from scheduler.core import Node
from scheduler.executors.base import LOST_EXIT_CODE, LaunchSpec
from scheduler.executors.kube import names
from scheduler.executors.kubernetes import KubernetesExecutor

JOB_PODS = f"/namespaces/{NAMESPACE}/pods$"  # the watch of Tide's pods (not the one of every pod)


@pytest.fixture
def executor(api: FakeKubeApi, tmp_path: Path) -> Iterator[KubernetesExecutor]:
    built = kube_executor(api, tmp_path)
    built.adopt()
    yield built
    built.close()


def launch(executor: KubernetesExecutor, replica_id: int, index: int, gpu: int) -> str:
    """Start replica ``index`` of a/train on gpu-0; the name of its pod."""
    executor.start(LaunchSpec(replica_id, "a", "train", index, "gpu-0", (gpu,), ("python", "train.py")))
    return names.pod_name("a", "train", index, replica_id)


def pod_watches(api: FakeKubeApi) -> list[dict[str, str]]:
    return [r.query for r in api.calls("GET", JOB_PODS, watch=True)]


def test_a_dropped_watch_is_resumed_from_the_last_resource_version(
    api: FakeKubeApi, executor: KubernetesExecutor
) -> None:
    master = launch(executor, 1, 0, 0)
    worker = launch(executor, 2, 1, 1)
    wait_for(
        lambda: (
            all(o.running for o in executor.observe().values())
            and api.pods(NAMESPACE)[1]["status"]["phase"] == "Running"
        )
    )
    assert executor.pod_watch is not None
    wait_for(lambda: executor.pod_watch.resource_version == str(api.store.rv), what="the watch to catch up")
    last_seen = executor.pod_watch.resource_version
    lists = executor.pod_watch.lists

    api.drop_watches()  # the connection breaks mid-stream
    wait_for(lambda: len(pod_watches(api)) == 2, what="the watch to be resumed")
    assert pod_watches(api)[-1]["resourceVersion"] == last_seen
    api.finish(NAMESPACE, worker, 3)
    wait_for(lambda: executor.observe()[2].exit_code == 3, what="the exit seen through the resumed watch")

    api.refuse_watches(503)  # the API is down for watches while the master finishes
    api.finish(NAMESPACE, master, 0)
    wait_for(lambda: len(api.calls("GET", JOB_PODS, watch=True)) >= 4, what="watch retries")
    assert executor.observe()[1].running  # not seen yet
    api.refuse_watches(None)
    wait_for(lambda: executor.observe()[1].exit_code == 0, what="the missed event after the outage")
    assert executor.pod_watch.lists == lists  # resumed every time: never listed again
    assert executor.pod_watch.relists == 0


def test_410_gone_lists_again_and_sees_what_happened_meanwhile(
    api: FakeKubeApi, executor: KubernetesExecutor
) -> None:
    finished = launch(executor, 1, 0, 0)
    removed = launch(executor, 2, 1, 1)
    wait_for(lambda: all(p["status"]["phase"] == "Running" for p in api.pods(NAMESPACE)), what="pods to run")
    assert executor.pod_watch is not None
    api.refuse_watches(503)
    api.finish(NAMESPACE, finished, 0)
    api.delete_pod_behind_tides_back(NAMESPACE, removed)
    api.compact()  # etcd compacted: the executor's resourceVersion is too old now
    api.refuse_watches(None)

    wait_for(lambda: executor.pod_watch.relists == 1, what="a relist after 410 Gone")
    seen = executor.observe()
    assert seen[1].exit_code == 0 and not seen[1].running
    assert seen[2].exit_code == LOST_EXIT_CODE and seen[2].detail == f"pod {removed} was deleted outside Tide"
    lists = api.calls("GET", JOB_PODS, watch=False)
    assert len(lists) == 2 and "resourceVersion" not in lists[-1].query

    api.fail("GET", JOB_PODS, 410, watch=True, reason="Expired")  # the other way a server says it
    dropped = [0.0]

    def relisted() -> bool:
        # a watch that was opening just as the fault was set escapes the drop: cut it again until one meets it
        if executor.pod_watch is not None and executor.pod_watch.relists == 2:
            return True
        if time.monotonic() - dropped[0] > 0.5:
            api.drop_watches()
            dropped[0] = time.monotonic()
        return False

    wait_for(relisted, what="a relist after an HTTP 410")
    third = launch(executor, 3, 0, 2)
    wait_for(
        lambda: executor.observe()[3].running and api.pod(NAMESPACE, third)["status"]["phase"] == "Running"
    )
    api.finish(NAMESPACE, third, 7)
    wait_for(lambda: executor.observe()[3].exit_code == 7, what="events after the relist")


def schedulable(executor: KubernetesExecutor) -> dict[str, tuple[int, bool]]:
    return {n.name: (n.gpus, n.schedulable) for n in executor.nodes()}


def test_node_inventory_follows_cordons_taints_readiness_and_sizes(
    api: FakeKubeApi, executor: KubernetesExecutor
) -> None:
    api.add_node("gpu-1", 8, taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    api.add_node("cpu-0", 0)  # no GPUs: not Tide's to place on
    wait_for(lambda: schedulable(executor) == {"gpu-0": (4, True), "gpu-1": (8, True)}, what="two GPU nodes")

    api.set_node("gpu-0", unschedulable=True)
    wait_for(lambda: schedulable(executor)["gpu-0"] == (4, False), what="the cordon")
    api.set_node("gpu-0", unschedulable=False)
    wait_for(lambda: schedulable(executor)["gpu-0"] == (4, True), what="the uncordon")
    api.set_node("gpu-1", taints=[{"key": "dedicated", "value": "infer", "effect": "NoExecute"}])
    wait_for(lambda: schedulable(executor)["gpu-1"] == (8, False), what="an untolerated taint")
    assert executor.inventory.why("gpu-1") == ["tainted dedicated=infer:NoExecute"]
    api.set_node("gpu-1", taints=[{"key": "dedicated", "value": "infer", "effect": "PreferNoSchedule"}])
    wait_for(lambda: schedulable(executor)["gpu-1"] == (8, True), what="a soft taint")
    api.set_node("gpu-0", ready=False)
    wait_for(lambda: schedulable(executor)["gpu-0"] == (4, False), what="NotReady")
    assert executor.inventory.why("gpu-0") == ["not Ready"]
    api.set_node("gpu-1", gpus=6)
    api.add_node("gpu-2", 2)
    api.remove_node("gpu-0")
    wait_for(
        lambda: schedulable(executor) == {"gpu-1": (6, True), "gpu-2": (2, True)}, what="resize, add, remove"
    )
    assert executor.nodes() == (Node("gpu-1", 6), Node("gpu-2", 2))


def test_the_engine_records_node_changes_every_cycle(
    api: FakeKubeApi, make_service: Callable[..., RunningService], tmp_path: Path
) -> None:
    executor = kube_executor(api, tmp_path)
    service = make_service(None, with_executor=executor, executor="kubernetes", default_image=IMAGE)
    client = service.client()
    wait_for(lambda: [(n.name, n.schedulable) for n in client.cluster().nodes] == [("gpu-0", True)])
    api.set_node("gpu-0", unschedulable=True)
    api.add_node("gpu-1", 8)
    wait_for(
        lambda: (
            [(n.name, n.gpus, n.schedulable) for n in client.cluster().nodes]
            == [("gpu-0", 4, False), ("gpu-1", 8, True)]
        ),
        what="the cordon and the new node in /cluster",
    )
    assert client.cluster().total_gpus == 12
