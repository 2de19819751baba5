"""A launch as one thing: who is its master, its run id and endpoint, and what each executor declares it can do."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.core import Node
from scheduler.elastic.launch import Launch, Role, endpoint, role_of, run_id_for
from scheduler.executors.base import Capabilities, LaunchSpec
from scheduler.executors.fake import FakeExecutor
from scheduler.executors.kube import names
from scheduler.executors.kube.config import KubeSettings
from scheduler.executors.kubernetes import KubernetesExecutor
from scheduler.executors.local import LocalExecutor


def test_index_zero_is_the_master_everywhere() -> None:
    assert [role_of(i) for i in range(3)] == [Role.MASTER, Role.WORKER, Role.WORKER]
    assert names.pod_labels("a", "train", 0, 7)[names.ROLE] == "master"
    assert names.pod_labels("a", "train", 2, 9)[names.ROLE] == "worker"
    assert names.master_selector("a", "train")[names.ROLE] == "master"


def test_a_launch_has_a_run_id_per_generation_and_ranked_members() -> None:
    launch = Launch("a", "train", generation=3, members=(11, 7))
    assert launch.run_id == run_id_for("a", "train", 3) == "a.train.g3"
    assert (launch.size, launch.master, launch.rank_of(7), role_of(launch.rank_of(11))) == (
        2,
        11,
        1,
        Role.MASTER,
    )
    assert endpoint("10.0.0.5", 29400) == "10.0.0.5:29400"
    assert endpoint("fd00::1", 1) == "[fd00::1]:1"
    with pytest.raises(ValueError):
        launch.rank_of(5)


def test_a_launch_without_members_is_refused() -> None:
    with pytest.raises(ValueError):
        Launch("a", "train", 1, members=())


def test_each_executor_declares_what_it_can_do(tmp_path: Path) -> None:
    nodes = (Node("node-0", 2),)
    assert FakeExecutor(nodes).capabilities == Capabilities(preemption_notices=True)
    local = LocalExecutor(tmp_path, nodes)
    assert local.capabilities == Capabilities(coordinated_restarts=True, preemption_notices=True)
    assert KubernetesExecutor(KubeSettings()).capabilities == Capabilities(announcements=True)  # Events
    with_agent = KubernetesExecutor(KubeSettings(agent_url="http://tide:8000"))
    assert with_agent.capabilities == Capabilities(inplace_restarts=True, announcements=True)
    local.close()


def test_the_memory_executor_keeps_a_bounded_history_of_starts_for_a_service_that_runs_for_days() -> None:
    executor = FakeExecutor((Node("n0", 1),), history=3)
    for replica in range(1, 11):  # ten replicas, one after another, on the one GPU
        executor.start(LaunchSpec(replica, "a", f"job-{replica}", 0, "n0", (0,), ("sleep", "1")))
        executor.forget(replica)
    assert [spec.job for spec in executor.started] == ["job-8", "job-9", "job-10"]
    assert not executor.records
    assert executor.read_log("a", "job-10", 0) is not None and executor.read_log("a", "job-1", 0) is None
