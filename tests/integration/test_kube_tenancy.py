"""Jobs kept apart and tidy on Kubernetes: NetworkPolicies, ownerReferences, namespaces per project, Events.

Against the fake API server (tests/kubefake), with the real ``kubernetes`` client. Each job gets a
NetworkPolicy admitting ingress to its pods from its own pods only, made with its Service and deleted with
it; the job's pods, policy and agent Secret name the Service as their owner (``blockOwnerDeletion`` false),
so the garbage collector (the fake's, at once) removes them when the Service goes behind Tide's back. With
``namespace_per_project`` each project's jobs go to ``tide-<project>``: pods, Services, policies, Secrets,
logs, adoption; a pod of another project's namespace claiming the project is not Tide's. Tide's decisions
(start, shrink by reclaim) show as Events on the job's pods, and a launch goes on when Events cannot be
posted.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubefake import FakeKubeApi
from kubefake.harness import IMAGE, NAMESPACE, kube_executor, wait_for
from servicekit import RunningService

from scheduler.executors.base import Announcement, LaunchDeferred, LaunchSpec
from scheduler.executors.kube import names, tenancy
from scheduler.executors.kubernetes import KubernetesExecutor

SERVICE_KEYS = {"apiVersion", "kind", "name", "uid", "blockOwnerDeletion", "controller"}


def spec(project: str, job: str, replica_id: int, index: int, argv: tuple[str, ...] = ("python", "t.py")) -> LaunchSpec:  # fmt: skip
    return LaunchSpec(replica_id, project, job, index, "gpu-0", (index,), argv)


@pytest.fixture
def executor(api: FakeKubeApi, tmp_path: Path) -> Iterator[KubernetesExecutor]:
    made = kube_executor(api, tmp_path, agent_url="http://tide.tide.svc")
    yield made
    made.close()


def objects(api: FakeKubeApi, resource: str, namespace: str = NAMESPACE) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in api.store.list(resource, namespace, None)[0]}


def test_each_job_has_a_network_policy_and_its_objects_are_owned_by_its_service(
    api: FakeKubeApi, executor: KubernetesExecutor
) -> None:
    executor.start(spec("a", "train", 1, 0))
    executor.start(spec("a", "train", 2, 1))
    executor.put_agent_token("a", "train", "secret-token")
    executor.start(spec("b", "other", 3, 0))
    service = objects(api, "services")[names.service_name("a", "train")]
    policies = objects(api, "networkpolicies")
    assert set(policies) == {names.service_name("a", "train"), names.service_name("b", "other")}
    policy = policies[names.service_name("a", "train")]
    job = {names.MANAGED_BY: names.MANAGER, names.PROJECT: "a", names.JOB: "train"}
    # ingress to a's pods only from a's pods: b's cannot reach its rendezvous (or NCCL) ports
    assert policy["spec"] == {
        "podSelector": {"matchLabels": job},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": job}}]}],
    }
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    owner = {
        "apiVersion": "v1",
        "kind": "Service",
        "name": service["metadata"]["name"],
        "uid": service["metadata"]["uid"],
        "blockOwnerDeletion": False,
        "controller": False,
    }
    pods = [p for p in api.pods(NAMESPACE) if p["metadata"]["labels"][names.JOB] == "train"]
    assert len(pods) == 2
    for obj in [*pods, policy, objects(api, "secrets")[names.service_name("a", "train")]]:
        assert obj["metadata"]["ownerReferences"] == [owner], obj["metadata"]["name"]

    # Tide missed the job (the Service deleted behind its back): the garbage collector removes the rest
    api.store.remove("services", NAMESPACE, service["metadata"]["name"])
    api._collect(NAMESPACE, service["metadata"]["uid"])
    wait_for(lambda: not [p for p in api.pods(NAMESPACE) if p["metadata"]["labels"][names.JOB] == "train"])
    assert set(objects(api, "networkpolicies")) == {names.service_name("b", "other")}
    assert names.service_name("a", "train") not in objects(api, "secrets")

    # the job's next pod (a restart) gets its Service and policy made again, and names the new Service:
    # a pod owned by the deleted one would be collected at once
    wait_for(lambda: executor.observe()[1].exit_code is not None, what="the lost pod seen")
    executor.forget(1)  # the master restarts while the worker's record is still there
    executor.start(spec("a", "train", 4, 0))
    again = objects(api, "services")[names.service_name("a", "train")]
    assert again["metadata"]["uid"] != service["metadata"]["uid"]
    pod = api.pod(NAMESPACE, names.pod_name("a", "train", 0, 4))
    assert pod["metadata"]["ownerReferences"][0]["uid"] == again["metadata"]["uid"]
    assert names.service_name("a", "train") in objects(api, "networkpolicies")


def test_the_policy_goes_with_the_jobs_last_pod_and_orphans_at_adoption(
    api: FakeKubeApi, executor: KubernetesExecutor, tmp_path: Path
) -> None:
    executor.start(spec("a", "train", 1, 0))
    executor.start(spec("a", "train", 2, 1))
    executor.forget(2)
    assert names.service_name("a", "train") in objects(api, "networkpolicies")  # the master still runs
    # the watch shows the deleted pod once more (gone); the engine forgets what it sees gone
    wait_for(lambda: 2 in executor.observe(), what="the deletion seen")
    executor.forget(2)
    executor.forget(1)
    assert objects(api, "networkpolicies") == {} and objects(api, "services") == {}
    # a policy left by a job whose pods are gone (Tide stopped mid-way) is removed when Tide adopts
    executor.start(spec("a", "left", 3, 0))
    api.store.remove("pods", NAMESPACE, names.pod_name("a", "left", 0, 3))
    (tmp_path / "later").mkdir()
    later = kube_executor(api, tmp_path / "later")
    try:
        later.adopt()
        assert objects(api, "networkpolicies") == {} and objects(api, "services") == {}
    finally:
        later.close()


def test_a_refused_pod_is_an_event_on_the_jobs_service(
    api: FakeKubeApi, executor: KubernetesExecutor
) -> None:
    quota = 'pods "{name}" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=1'
    api.fail("POST", "/pods$", 403, reason="Forbidden", message=quota)
    with pytest.raises(LaunchDeferred):
        executor.start(spec("a", "train", 1, 0))
    executor.events.flush()
    (event,) = objects(api, "events").values()
    service = objects(api, "services")[names.service_name("a", "train")]
    assert (event["reason"], event["type"]) == ("TideRefused", "Warning")
    assert event["involvedObject"]["kind"] == "Service"
    assert event["involvedObject"]["uid"] == service["metadata"]["uid"]
    assert "exceeded quota" in event["message"]


def test_a_refused_policy_fails_the_job_with_the_api_servers_words(
    api: FakeKubeApi, executor: KubernetesExecutor
) -> None:
    api.fail("POST", "/networkpolicies$", 403, reason="Forbidden", message="networkpolicies is forbidden")
    with pytest.raises(Exception, match="networkpolicies is forbidden"):
        executor.start(spec("a", "train", 1, 0))
    assert api.pods(NAMESPACE) == []


def test_each_project_in_a_namespace_of_its_own(api: FakeKubeApi, tmp_path: Path) -> None:
    executor = kube_executor(api, tmp_path, namespace_per_project=True)
    try:
        executor.start(spec("team-a", "train", 1, 0))
        executor.start(spec("team-b", "train", 2, 0))
        for project in ("team-a", "team-b"):
            space = f"tide-{project}"
            assert [p["metadata"]["name"] for p in api.pods(space)] == [
                names.pod_name(project, "train", 0, 1 if project == "team-a" else 2)
            ]
            assert set(objects(api, "services", space)) == set(objects(api, "networkpolicies", space))
            pod = api.pods(space)[0]
            env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
            assert env["TIDE_MASTER_ADDR"] == f"{names.service_name(project, 'train')}.{space}.svc"
        assert api.pods(NAMESPACE) == []
        wait_for(lambda: all(o.running for o in executor.observe().values()) and len(executor.observe()) == 2)
        # Tide's own pods there hold no GPUs Tide would subtract as another workload's
        assert executor.nodes()[0].gpus == 4
        wait_for(lambda: executor.read_log("team-a", "train", 0), what="the pod's log")
        # a pod labelled team-a in a namespace that is not team-a's is not this Tide's
        stranger = copy.deepcopy(api.pods("tide-team-a")[0])
        stranger["metadata"] = {
            "name": "stranger",
            "namespace": "elsewhere",
            "labels": {**stranger["metadata"]["labels"], names.REPLICA_ID: "99"},
        }
        api.store.create("pods", "elsewhere", stranger)
        executor.stop(1, 0)
        wait_for(lambda: executor.observe()[1].exit_code is not None, what="team-a's pod to end")
        assert 99 not in executor.observe()
        executor.forget(1)
        assert api.pods("tide-team-a") == [] and objects(api, "services", "tide-team-a") == {}
        assert objects(api, "networkpolicies", "tide-team-a") == {}
    finally:
        executor.close()
    (tmp_path / "again").mkdir()
    again = kube_executor(api, tmp_path / "again", namespace_per_project=True)
    try:
        again.adopt()  # team-b's pod is found again, in its namespace
        assert set(again.observe()) == {2}
    finally:
        again.close()


def test_a_project_whose_namespace_is_missing_waits(api: FakeKubeApi, tmp_path: Path) -> None:
    executor = kube_executor(api, tmp_path, namespace_per_project=True)
    missing = 'namespaces "tide-team-c" not found'
    api.fail("POST", "/namespaces/tide-team-c/services$", 404, reason="NotFound", message=missing)
    try:
        with pytest.raises(LaunchDeferred, match=f"refused service .* for now \\(404\\): {missing}"):
            executor.start(spec("team-c", "train", 1, 0))
        assert api.pods("tide-team-c") == []
    finally:
        executor.close()


def test_project_namespaces_are_valid_names() -> None:
    assert tenancy.project_namespace("team-a") == "tide-team-a"
    long_a, long_b = "a" * 62 + "x", "a" * 62 + "y"
    assert len(tenancy.project_namespace(long_a)) == 63
    assert tenancy.project_namespace(long_a) != tenancy.project_namespace(long_b)


def test_events_are_posted_on_the_jobs_pods_and_a_failing_post_fails_nothing(
    api: FakeKubeApi, executor: KubernetesExecutor
) -> None:
    executor.start(spec("a", "train", 1, 0))
    executor.start(spec("a", "train", 2, 1))
    executor.announce(Announcement("shrink", "a", "train", (1,), "reclaimed for project b", "reclaim"))
    executor.announce(Announcement("start", "a", "train", (), "started with 2 replicas"))
    executor.events.flush()
    events = list(objects(api, "events").values())
    shrink = [e for e in events if e["reason"] == "TideShrink"]
    assert len(shrink) == 1 and shrink[0]["type"] == "Warning"
    assert shrink[0]["message"] == "reclaimed for project b"
    assert shrink[0]["involvedObject"]["name"] == names.pod_name("a", "train", 1, 2)
    assert shrink[0]["involvedObject"]["uid"] == api.pod(NAMESPACE, names.pod_name("a", "train", 1, 2))["metadata"]["uid"]  # fmt: skip
    started = [e for e in events if e["reason"] == "TideStart"]
    assert len(started) == 2 and {e["type"] for e in started} == {"Normal"}  # every pod of the job
    assert {e["source"]["component"] for e in events} == {"tide"}

    api.fail("POST", "/events$", 500, times=100)
    executor.announce(Announcement("grow", "a", "train", (), "grown"))
    executor.start(spec("a", "train", 3, 2))  # a launch goes on
    executor.events.flush()
    assert executor.events.failed >= 1 and len(api.pods(NAMESPACE)) == 3


def test_events_are_rate_limited() -> None:
    sent: list[dict[str, Any]] = []
    clock = [0.0]
    from scheduler.executors.kube.events import EventPoster  # noqa: PLC0415

    poster = EventPoster(sent.append, burst=3, per_second=1.0, clock=lambda: clock[0])
    for _ in range(5):
        poster.post({"reason": "x"})
    clock[0] += 2.0
    poster.post({"reason": "y"})
    poster.flush()
    assert len(sent) == 4 and poster.dropped == 2
    poster.close()


def start_service(make: Callable[..., RunningService], api: FakeKubeApi, tmp_path: Path) -> RunningService:
    return make(
        None,
        with_executor=kube_executor(api, tmp_path, grace=1.0),
        executor="kubernetes",
        cycle_period=0.1,
        grace_period=1.0,
        default_image=IMAGE,
    )


def test_the_engines_decisions_reach_the_pods_as_events(
    make_service: Callable[..., RunningService], api: FakeKubeApi, tmp_path: Path
) -> None:
    client = start_service(make_service, api, tmp_path).client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    client.create_project({"name": "b", "deserved_gpus": 2})
    job = {"name": "train", "workers": 3, "min_replicas": 2, "max_replicas": 4, "command": ["python", "t.py"]}  # fmt: skip
    client.submit("a", job)
    wait_for(lambda: len(api.pods(NAMESPACE, "tide.dev/job=train")) == 4, what="a's 4 pods")

    def reasons() -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = {}
        for event in objects(api, "events").values():
            found.setdefault(event["reason"], []).append(event)
        return found

    wait_for(lambda: len(reasons().get("TideStart", [])) == 4, what="a start Event on each pod")
    client.submit("b", {"name": "x", "workers": 1, "command": ["python", "t.py"]})

    def shrunk() -> set[str]:  # the replica indexes of the pods that carry a shrink's Event
        return {e["involvedObject"]["name"].rsplit("-", 2)[-2] for e in reasons().get("TideShrink", [])}

    wait_for(lambda: shrunk() == {"2", "3"}, what="the shrinks' Events on replicas 2 and 3")
    shrink = reasons()["TideShrink"]
    assert {e["type"] for e in shrink} == {"Warning"}  # reclaimed: against the job's will
    assert all(e["message"].startswith("reclaimed for b/x: ") for e in shrink), shrink
