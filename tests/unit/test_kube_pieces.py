"""The Kubernetes executor's pure pieces: names, the pod and Service bodies, pod states, nodes, retries.

Every pod and Service body is also validated against the Kubernetes 1.30 JSON schema (strict: an unknown
or misspelt field fails), as the API server would.
"""

from __future__ import annotations

import json
import re

import kubernetes_validate
import pytest
from kubernetes.client.exceptions import ApiException

from scheduler.core import Node
from scheduler.executors.base import LOST_EXIT_CODE, LaunchSpec
from scheduler.executors.kube import names, podspec
from scheduler.executors.kube.inventory import Inventory, blockers, node_of, tolerates
from scheduler.executors.kube.retry import KubeApiError, Retrier, is_already_exists, transient
from scheduler.executors.kube.status import PodView, gone, waiting_reason

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
OPTIONS = podspec.PodOptions(namespace="tide-jobs", default_image="img:1", grace_period=30)


def spec(**changes: object) -> LaunchSpec:
    base: dict[str, object] = {
        "replica_id": 17,
        "project": "vision",
        "job": "resnet",
        "index": 2,
        "node": "gpu-3",
        "gpu_ids": (4, 5),
        "argv": ("torchrun", "train.py", "--lr", "0.1"),
        "env": {"TIDE_NUM_REPLICAS": "3", "TIDE_GENERATION": "5", "TIDE_JOB": "resnet", "DATA": "/data"},
    }
    base.update(changes)
    return LaunchSpec(**base)  # type: ignore[arg-type]


def env_map(body: dict[str, object]) -> dict[str, object]:
    container = body["spec"]["containers"][0]  # type: ignore[index]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_names_are_valid_unique_and_short() -> None:
    long = "p" * 63
    for project, job in (("a", "b"), (long, long), ("1st", "x"), ("a-b", "c"), ("a", "b-c")):
        pod, service = names.pod_name(project, job, 12, 123456), names.service_name(project, job)
        assert len(pod) <= 63 and DNS_LABEL.match(pod) and pod.endswith("-12-123456")
        assert len(service) <= 63 and DNS_LABEL.match(service) and service[0].isalpha()
    assert names.service_name("a-b", "c") != names.service_name("a", "b-c")
    assert names.pod_name("a", "b", 0, 1) != names.pod_name("a", "b", 0, 2)
    assert names.pod_labels("a", "b", 0, 9)[names.ROLE] == "master"
    assert names.pod_labels("a", "b", 3, 9) | {} == {
        "app.kubernetes.io/managed-by": "tide",
        "tide.dev/project": "a",
        "tide.dev/job": "b",
        "tide.dev/role": "worker",
        "tide.dev/replica": "3",
        "tide.dev/replica-id": "9",
    }


def test_the_pod_of_a_replica() -> None:
    body = podspec.pod_body(spec(), OPTIONS, grace=12.5)
    kubernetes_validate.validate(body, "1.30", strict=True)
    pod = body["spec"]
    container = pod["containers"][0]
    assert pod["nodeName"] == "gpu-3" and pod["restartPolicy"] == "Never"
    assert pod["terminationGracePeriodSeconds"] == 13
    # never BestEffort: a CPU and memory request per GPU (the defaults: 4 CPUs, 32Gi), and a /dev/shm
    assert container["resources"] == {
        "requests": {"cpu": "8", "memory": "64Gi"},
        "limits": {"nvidia.com/gpu": "2"},
    }
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["volumeMounts"] == [{"name": "tide-shm", "mountPath": "/dev/shm"}]
    assert pod["volumes"] == [{"name": "tide-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}]
    assert container["command"] == ["torchrun", "train.py", "--lr", "0.1"] and container["image"] == "img:1"
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert body["metadata"]["annotations"] == {"tide.dev/gpu-ids": "4,5"}
    env = env_map(body)
    host = f"{names.service_name('vision', 'resnet')}.tide-jobs.svc"
    assert [e["name"] for e in container["env"]][:2] == ["TIDE_POD_IP", "PET_LOCAL_ADDR"]  # refs need order
    assert env["PET_RDZV_ENDPOINT"] == f"{host}:29400" and env["TIDE_MASTER_ADDR"] == host
    assert env["PET_NNODES"] == "3:3" and env["PET_NPROC_PER_NODE"] == "2"
    assert env["PET_RDZV_ID"] == "vision.resnet.g5" and "is_host=0" in str(env["PET_RDZV_CONF"])
    assert env["DATA"] == "/data" and env["TIDE_JOB"] == "resnet"
    assert podspec.pod_body(spec(image="own:2"), OPTIONS)["spec"]["containers"][0]["image"] == "own:2"
    assert podspec.pod_body(spec(), OPTIONS)["spec"]["terminationGracePeriodSeconds"] == 30


def test_an_env_builders_torchrun_settings_are_kept_but_addresses_are_kubernetes_ones() -> None:
    builder_env = {
        "PET_NNODES": "2:4",
        "PET_RDZV_ENDPOINT": "gpu-0:31234",
        "PET_LOCAL_ADDR": "gpu-3",
        "X": "$(HOME)",
    }
    env = env_map(podspec.pod_body(spec(env=builder_env), OPTIONS))
    assert env["PET_NNODES"] == "2:4" and "PET_RDZV_ID" not in env
    assert env["PET_RDZV_ENDPOINT"] == f"{names.service_name('vision', 'resnet')}.tide-jobs.svc:31234"
    assert env["PET_LOCAL_ADDR"] == "$(TIDE_POD_IP)"
    assert env["X"] == "$$(HOME)"  # Kubernetes reads $$ as a literal $: the value reaches the process intact


def test_a_checkpoint_claim_is_mounted_and_an_image_is_required() -> None:
    options = podspec.PodOptions(namespace="ns", default_image="img", checkpoint_claim="ckpt")
    body = podspec.pod_body(spec(), options)
    kubernetes_validate.validate(body, "1.30", strict=True)
    assert body["spec"]["volumes"][0] == {
        "name": "checkpoints",
        "persistentVolumeClaim": {"claimName": "ckpt"},
    }
    assert env_map(body)["TIDE_CHECKPOINT_DIR"] == "/tide/checkpoints/vision/resnet-0"
    # the job's directory of the claim only: other jobs' checkpoints are not in the pod
    assert body["spec"]["containers"][0]["volumeMounts"] == [
        {
            "name": "checkpoints",
            "mountPath": "/tide/checkpoints/vision/resnet-0",
            "subPath": "vision/resnet-0",
        },
        {"name": "tide-shm", "mountPath": "/dev/shm"},  # and /dev/shm (see the pod template tests)
    ]
    again = podspec.pod_body(spec(env={"TIDE_JOB_ID": "41", "TIDE_NUM_REPLICAS": "3"}), options)
    assert (
        env_map(again)["TIDE_CHECKPOINT_DIR"] == "/tide/checkpoints/vision/resnet-41"
    )  # never an older job's
    with pytest.raises(ValueError, match="no image"):
        podspec.pod_body(spec(), podspec.PodOptions(namespace="ns"))


def test_with_an_agent_url_a_torchrun_pod_runs_tides_agent_with_its_jobs_token() -> None:
    options = podspec.PodOptions(namespace="ns", default_image="img", agent_url="http://tide.tide.svc")
    body = podspec.pod_body(spec(), options)
    kubernetes_validate.validate(body, "1.30", strict=True)
    container = body["spec"]["containers"][0]
    assert container["command"] == ["tide", "agent", "--", "torchrun", "train.py", "--lr", "0.1"]
    env = env_map(body)
    assert env["TIDE_AGENT_URL"] == "http://tide.tide.svc" and env["TIDE_REPLICA_ID"] == "17"
    assert env["PET_SHUTDOWN_TIMEOUT"] == "25"  # inside the pod's grace of 30 s: the agent ends its workers
    short = env_map(podspec.pod_body(spec(), options, grace=8))
    assert short["PET_SHUTDOWN_TIMEOUT"] == "4"
    secret = names.service_name("vision", "resnet")
    assert env["TIDE_AGENT_TOKEN"] == {"secretKeyRef": {"name": secret, "key": "agent-token"}}
    plain = podspec.pod_body(spec(argv=("python", "serve.py")), options)["spec"]["containers"][0]
    assert plain["command"] == ["python", "serve.py"] and "TIDE_AGENT_URL" not in env_map(
        podspec.pod_body(spec(argv=("python", "serve.py")), options)
    )  # not a torchrun job: nothing to relaunch, the command runs as given
    without = podspec.pod_body(spec(), OPTIONS)["spec"]["containers"][0]
    assert without["command"][0] == "torchrun"  # no agent URL: the pod runs the command itself


def test_the_jobs_secret_holds_its_agent_token() -> None:
    body = podspec.secret_body("vision", "resnet", "s3cret", OPTIONS)
    kubernetes_validate.validate(body, "1.30", strict=True)
    assert body["metadata"]["name"] == names.service_name("vision", "resnet")
    assert body["stringData"] == {"agent-token": "s3cret"}
    assert body["metadata"]["labels"][names.MANAGED_BY] == names.MANAGER


def test_the_headless_service_selects_the_master() -> None:
    body = podspec.service_body("vision", "resnet", OPTIONS)
    kubernetes_validate.validate(body, "1.30", strict=True)
    assert body["spec"]["clusterIP"] == "None" and body["spec"]["publishNotReadyAddresses"] is True
    assert body["spec"]["selector"][names.ROLE] == "master"


def pod(phase: str, *, terminated: dict[str, object] | None = None, **status: object) -> dict[str, object]:
    states = [{"name": "replica", "state": {"terminated": terminated}}] if terminated else []
    return {
        "metadata": {"name": "p", "uid": "u", "labels": names.pod_labels("a", "b", 1, 5)},
        "spec": {"nodeName": "n"},
        "status": {"phase": phase, "containerStatuses": states, **status},
    }


def test_pod_states_as_observations() -> None:
    assert PodView.of({"metadata": {"name": "x"}}) is None  # not Tide's
    running = PodView.of(pod("Running"))
    assert running is not None and running.observation().running and running.observation().pid == 1
    done = PodView.of(pod("Succeeded", terminated={"exitCode": 0}))
    assert done is not None and done.observation().exit_code == 0
    failed = PodView.of(pod("Failed", terminated={"exitCode": 3, "reason": "Error"}))
    assert failed is not None and (failed.exit_code, failed.detail) == (3, None)
    evicted = PodView.of(pod("Failed", reason="Evicted", message="The node was low on memory."))
    assert evicted is not None and evicted.exit_code == LOST_EXIT_CODE
    assert evicted.detail == "pod p: Evicted: The node was low on memory."
    assert running is not None
    assert gone(running, deleted_by_tide=True).exit_code == -15
    lost = gone(running, deleted_by_tide=False)
    assert (lost.exit_code, lost.detail) == (LOST_EXIT_CODE, "pod p was deleted outside Tide")


def node(**spec: object) -> dict[str, object]:
    return {
        "metadata": {"name": "g"},
        "spec": spec,
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_nodes_and_taints() -> None:
    tolerations = podspec.DEFAULT_TOLERATIONS
    assert node_of(node(), "nvidia.com/gpu", tolerations) == Node("g", 8)
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert node_of(node(taints=[gpu_taint]), "nvidia.com/gpu", tolerations) == Node("g", 8)
    assert blockers(node(unschedulable=True, taints=[{"key": "k", "effect": "NoExecute"}]), tolerations) == [
        "cordoned",
        "tainted k:NoExecute",
    ]
    assert blockers(node(taints=[{"key": "k", "effect": "PreferNoSchedule"}]), tolerations) == []
    assert tolerates({"operator": "Exists"}, {"key": "any", "effect": "NoExecute"})
    assert not tolerates({"key": "k", "value": "a"}, {"key": "k", "value": "b", "effect": "NoSchedule"})
    no_gpus = node()
    no_gpus["status"]["allocatable"] = {}  # type: ignore[index]
    assert node_of(no_gpus, "nvidia.com/gpu", tolerations) is None


def test_a_nodes_topology_domain_is_the_value_of_the_label_named_by_topology_key() -> None:
    """R17: ``tide serve --topology-key`` names the label (a rack, an NVLink domain); nodes without it, or a
    service without the key, have no domain."""
    tolerations = podspec.DEFAULT_TOLERATIONS
    racked = node()
    racked["metadata"]["labels"] = {"topology.kubernetes.io/rack": "rack-7", "zone": "a"}  # type: ignore[index]
    key = "topology.kubernetes.io/rack"
    assert node_of(racked, "nvidia.com/gpu", tolerations, key) == Node("g", 8, domain="rack-7")
    assert node_of(racked, "nvidia.com/gpu", tolerations) == Node("g", 8)
    assert node_of(node(), "nvidia.com/gpu", tolerations, key) == Node("g", 8)
    inventory = Inventory("nvidia.com/gpu", tolerations, key)
    inventory.replace([racked])
    assert [n.domain for n in inventory.nodes()] == ["rack-7"]
    relabelled = node()
    relabelled["metadata"]["labels"] = {key: "rack-8"}  # type: ignore[index]
    inventory.apply("MODIFIED", relabelled)
    assert [n.domain for n in inventory.nodes()] == ["rack-8"]


def api_error(status: int, reason: str, retry_after: str | None = None) -> ApiException:
    error = ApiException(status=status, reason="x")
    error.body = json.dumps({"kind": "Status", "reason": reason, "message": f"said {reason}"})
    error.headers = {"Retry-After": retry_after} if retry_after else {}
    return error


def test_retries_back_off_on_transient_answers_only() -> None:
    assert transient(api_error(503, "ServiceUnavailable")) and transient(api_error(409, "Conflict"))
    assert not transient(api_error(409, "AlreadyExists")) and is_already_exists(
        api_error(409, "AlreadyExists")
    )
    assert not transient(api_error(422, "Invalid")) and not transient(api_error(404, "NotFound"))
    slept: list[float] = []
    retrier = Retrier(attempts=4, initial=0.1, cap=1.0, sleep=slept.append)
    answers = [api_error(500, "InternalError"), api_error(429, "TooManyRequests", "7"), TimeoutError(), "ok"]

    def call() -> str:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    assert retrier.call("list pods", call) == "ok"
    assert len(slept) == 3 and 0.1 <= slept[0] <= 0.12 and 1.0 <= slept[1] <= 1.2 and 0.4 <= slept[2] <= 0.48
    with pytest.raises(
        KubeApiError, match=r"create pod p: the API answered 503 ServiceUnavailable: said .* 4 times"
    ):
        retrier.call("create pod p", lambda: (_ for _ in ()).throw(api_error(503, "ServiceUnavailable")))
    with pytest.raises(ApiException):
        retrier.call("create pod p", lambda: (_ for _ in ()).throw(api_error(422, "Invalid")))


def _pod(node: str, containers: list[int], init: tuple[int, ...] = (), **meta: object) -> dict[str, object]:
    def container(gpus: int, limits_only: bool = False) -> dict[str, object]:
        amount = {"nvidia.com/gpu": str(gpus)}
        return {"name": "c", "resources": {"limits": amount} if limits_only else {"requests": amount}}

    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": str(meta.pop("uid", "u")), **meta},
        "spec": {
            "nodeName": node,
            "containers": [container(g, limits_only=i == 0) for i, g in enumerate(containers)],
            "initContainers": [container(g) for g in init],
        },
        "status": {"phase": "Running"},
    }


def test_gpus_other_pods_hold_are_subtracted_as_the_kubelet_counts_them() -> None:
    inventory = Inventory("nvidia.com/gpu", podspec.DEFAULT_TOLERATIONS)
    inventory.own_namespace = "jobs"
    inventory.replace([node()])
    tide_label = {"labels": {names.MANAGED_BY: names.MANAGER}}
    inventory.replace_pods(
        [
            _pod("g", [1, 1], uid="a"),  # a limit alone is the request
            _pod("g", [1], init=(3,), uid="b"),  # its init container needs 3 before it runs
            _pod("g", [2], uid="mine", namespace="jobs", **tide_label),  # Tide's own: not subtracted
            {**_pod("g", [4], uid="ended"), "status": {"phase": "Succeeded"}},
            {**_pod("", [4], uid="unbound")},
        ]
    )
    assert inventory.nodes() == (Node("g", 3),)
    inventory.apply_pod("ADDED", _pod("g", [2], uid="other-tide", namespace="x", **tide_label))
    assert inventory.nodes() == (Node("g", 1),)
    inventory.apply_pod("MODIFIED", {**_pod("g", [1], uid="b"), "status": {"phase": "Failed"}})
    inventory.apply_pod("DELETED", _pod("g", [2], uid="other-tide"))
    inventory.apply_pod("ADDED", _pod("g", [9], uid="huge"))
    assert inventory.nodes() == (Node("g", 0),)


def test_why_a_pending_pod_has_not_started() -> None:
    def pending(**status: object) -> dict[str, object]:
        return {"metadata": {"name": "p"}, "status": {"phase": "Pending", **status}}

    def waiting(reason: str, message: str = "") -> list[dict[str, object]]:
        return [{"name": "main", "state": {"waiting": {"reason": reason, "message": message}}}]

    assert waiting_reason(pending()) == ""  # just made: nothing wrong
    assert waiting_reason(pending(containerStatuses=waiting("ContainerCreating"))) == ""
    pull = pending(containerStatuses=waiting("ErrImagePull", 'pull access denied for "x"'))
    assert waiting_reason(pull) == 'pod p: container main: ErrImagePull: pull access denied for "x"'
    assert waiting_reason(pending(initContainerStatuses=waiting("ImagePullBackOff"))) == (
        "pod p: container main: ImagePullBackOff"
    )
    unbound = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "unbound PVC"}
    assert waiting_reason(pending(conditions=[unbound])) == "pod p: not scheduled: Unschedulable: unbound PVC"
    assert waiting_reason({"metadata": {"name": "p"}, "status": {"phase": "Running"}}) is None
    view = PodView.of({**pull, "metadata": {"name": "p", "labels": {names.REPLICA_ID: "3"}}})
    assert view is not None and view.observation().running and view.observation().waiting
