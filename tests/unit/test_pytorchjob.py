"""Kubeflow PyTorchJob manifests become Tide jobs; what Tide cannot honour is refused, naming the field.

The manifests in tests/manifests/ have the shape of Kubeflow's own examples (the elastic echo and ImageNet
jobs of the training operator, kubeflow.org/v1); each case below changes one thing in them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from api.shared import manifest as manifest_module
from api.shared.manifest import ManifestRefused, ManifestUnreadable, read_manifest
from api.shared.pytorchjob import translate

MANIFESTS = Path(__file__).parent.parent / "manifests"
WORKER = "spec.pytorchReplicaSpecs[Worker]"
WORKER_CONTAINER = f"{WORKER}.template.spec.containers[0]"


def manifest(name: str, change: Callable[[dict[str, Any]], object] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((MANIFESTS / f"{name}.yaml").read_text())
    if change is not None:
        change(data)
    return data


def container(data: dict[str, Any], role: str = "Worker") -> dict[str, Any]:
    found: dict[str, Any] = data["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"][0]
    return found


def refused(data: object, project: str = "team-a") -> list[str]:
    with pytest.raises(ManifestRefused) as caught:
        translate(data, project)
    return [str(problem) for problem in caught.value.problems]


def test_kubeflows_elastic_echo_job_runs_as_is() -> None:
    job = translate(read_manifest((MANIFESTS / "elastic-echo.yaml").read_bytes()), "team-a")
    assert job.body == {
        "name": "elastic-echo",
        "workers": 1,  # 2 Workers: replica 0 becomes Tide's master, which hosts the rendezvous
        "min_replicas": 1,
        "max_replicas": 3,
        "image": "registry.example.org/team-a/echo:1.0",
        "command": ["python", "-m", "torch.distributed.run", "--rdzv_backend=c10d", "/workspace/echo.py"],
        "env": {"LOGLEVEL": "INFO"},
        "gpus_per_replica": 1,
    }
    assert job.warnings == [
        f"{WORKER_CONTAINER}.resources.limits[nvidia.com/gpu]: absent: each replica gets 1 GPU",
        "spec.elasticPolicy.maxRestarts: ignored: Tide sets torchrun's restarts and counts a job's failures itself",
    ]


def test_a_master_and_workers_with_gpus_keep_their_sizes_and_command_with_args() -> None:
    job = translate(manifest("elastic-resnet"), "team-a")
    assert (job.body["workers"], job.body["min_replicas"], job.body["max_replicas"]) == (2, 2, 4)
    assert job.body["gpus_per_replica"] == 1
    assert job.body["command"] == ["torchrun", "/workspace/train.py", "--arch=resnet50", "--epochs=90",
                                   "--batch-size=64"]  # fmt: skip
    assert job.body["env"] == {"DATA_DIR": "/data/imagenet"}
    ignored = "\n".join(job.warnings)
    assert "spec.elasticPolicy.metrics: ignored: Tide grows an elastic job" in ignored
    # CPU and memory are the pod template's (Kubernetes pods get them), no longer ignored
    assert job.body["pod_template"] == {
        "spec": {"containers": [{"resources": {"requests": {"cpu": 4, "memory": "16Gi"}}}]}
    }
    assert job.origin["pod_template"] == "spec.pytorchReplicaSpecs[Master].template"
    assert "cpu" not in ignored
    assert "labels" not in ignored and "restartPolicy" not in ignored  # accepted as they are


def test_different_gpus_for_master_and_worker_are_refused_at_the_workers_limit() -> None:
    data = manifest(
        "elastic-resnet", lambda d: container(d)["resources"].update(limits={"nvidia.com/gpu": 2})
    )
    assert refused(data) == [
        f"{WORKER_CONTAINER}.resources.limits[nvidia.com/gpu]: Master asks for 1 GPU(s) and Worker for 2; "
        "Tide runs every replica alike: make them the same"
    ]


def test_a_master_whose_image_or_command_is_not_the_workers_is_refused_in_plain_english() -> None:
    def change(data: dict[str, Any]) -> None:
        container(data, "Master").update(image="registry.example.org/other:1")
        container(data, "Master")["command"] = ["python", "other.py"]
        container(data, "Master").pop("args", None)

    problems = refused(manifest("elastic-resnet", change))
    assert (
        f"{WORKER_CONTAINER}.image: Master's image differs from Worker's; Tide runs every replica alike: "
        "make them the same" in problems
    )
    assert any("Master's command and args differ from Worker's" in problem for problem in problems)


def test_an_invalid_name_is_listed_with_every_other_problem() -> None:
    def change(data: dict[str, Any]) -> None:
        data["metadata"]["name"] = "Bad_Name"
        container(data).update(workingDir="/workspace")

    problems = refused(manifest("elastic-resnet", change))
    assert problems[0].startswith("metadata.name: 'Bad_Name' is not a valid name: use at most 63 lowercase")
    assert any(problem.startswith(f"{WORKER_CONTAINER}.workingDir") for problem in problems)
    assert refused(manifest("elastic-resnet", lambda d: d["metadata"].update(name="x" * 64)))[0].startswith(
        "metadata.name: 'xxx"
    )


def test_manifest_names_follow_the_apis_rule_for_names() -> None:
    from api.server.schemas import DNS_LABEL  # noqa: PLC0415 - the server's rule, only to compare

    assert manifest_module.DNS_LABEL.pattern == DNS_LABEL.pattern


@pytest.mark.parametrize(
    ("change", "path", "says"),
    [
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}}]),
         f"{WORKER}.template", "Master's pod template (resources, volumes, env from Secrets...) differs"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(
            {"name": "log-shipper", "image": "fluent-bit"}),
         f"{WORKER}.template.spec.containers[1]", "sidecar"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(
            initContainers=[{"name": "setup"}]),
         f"{WORKER}.template.spec.initContainers", "one container per replica"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(
            topologySpreadConstraints=[{"maxSkew": 1}]),
         f"{WORKER}.template.spec.topologySpreadConstraints", "places replicas itself"),
        (lambda d: container(d).update(workingDir="/workspace"), f"{WORKER_CONTAINER}.workingDir", "absolute"),
        (lambda d: container(d).pop("command"), f"{WORKER_CONTAINER}.command", "entrypoint"),
        (lambda d: container(d)["resources"]["limits"].update({"amd.com/gpu": 1}),
         f"{WORKER_CONTAINER}.resources.limits[amd.com/gpu]", "nvidia.com/gpu only"),
        (lambda d: container(d)["resources"].update(requests={"nvidia.com/gpu": 2}),
         f"{WORKER_CONTAINER}.resources.requests[nvidia.com/gpu]", "must equal the limit (1)"),
        (lambda d: d["spec"]["elasticPolicy"].update(nProcPerNode=4),
         "spec.elasticPolicy.nProcPerNode", "one worker process per GPU"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=5),
         f"{WORKER}.replicas", "Master 1 + Worker 5 = 6 replicas, outside minReplicas..maxReplicas (2..4)"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2),
         "spec.pytorchReplicaSpecs[Master].replicas", "a job has one master"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"].update(Chief=d["spec"]["pytorchReplicaSpecs"]["Master"]),
         "spec.pytorchReplicaSpecs[Chief]", "unsupported replica type"),
        (lambda d: d["spec"].update(runPolicy={"suspend": True}), "spec.runPolicy.suspend", "no suspended jobs"),
        (lambda d: d["metadata"].update(namespace="team-b"), "metadata.namespace", "submit it to project team-b"),
        (lambda d: d["metadata"].pop("name"), "metadata.name", "required"),
        (lambda d: d.pop("spec"), "spec", "required"),
        (lambda d: container(d).update(image=""), f"{WORKER_CONTAINER}.image", "non-empty string"),
        (lambda d: container(d)["env"][0].update(value=3), f"{WORKER_CONTAINER}.env[0].value", "quote it"),
    ],
)  # fmt: skip
def test_what_tide_cannot_honour_is_refused_naming_the_field(
    change: Callable[[dict[str, Any]], object], path: str, says: str
) -> None:
    problems = refused(manifest("elastic-resnet", change))
    assert any(p.startswith(f"{path}: ") and says in p for p in problems), problems


def test_every_problem_is_reported_at_once() -> None:
    def many(data: dict[str, Any]) -> None:
        data["metadata"]["namespace"] = "elsewhere"
        data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"] = [{"name": "v"}]
        container(data, "Master")["workingDir"] = "/w"

    assert len(refused(manifest("elastic-resnet", many))) == 3


@pytest.mark.parametrize(
    ("top", "message"),
    [
        (
            {"apiVersion": "kubeflow.org/v1", "kind": "TFJob"},
            "kind: 'TFJob': Tide takes PyTorchJob manifests",
        ),
        ({"apiVersion": "kubeflow.org/v2", "kind": "PyTorchJob"}, "apiVersion: 'kubeflow.org/v2'"),
        ({"apiVersion": "batch/v1", "kind": "Job"}, "kind: 'Job'"),
    ],
)
def test_another_kind_of_manifest_is_refused(top: dict[str, str], message: str) -> None:
    data = manifest("elastic-echo") | top
    assert refused(data)[0].startswith(message)


def test_a_manifest_that_is_not_a_mapping_is_refused() -> None:
    assert refused(["a", "list"]) == ["body: must be a mapping, not a list"]


def test_fields_tide_does_not_know_are_ignored_with_a_warning() -> None:
    def extra(data: dict[str, Any]) -> None:
        data["spec"]["runPolicy"] = {"cleanPodPolicy": "None", "ttlSecondsAfterFinished": 60}
        data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["dnsPolicy"] = "None"

    warnings = translate(manifest("elastic-echo", extra), "team-a").warnings
    assert "spec.runPolicy.cleanPodPolicy: ignored: Tide does not apply run policies" in warnings
    assert f"{WORKER}.template.spec.dnsPolicy: ignored: Tide does not use this field" in warnings


def test_without_an_elastic_policy_the_job_has_a_fixed_size() -> None:
    job = translate(manifest("elastic-resnet", lambda d: d["spec"].pop("elasticPolicy")), "team-a")
    assert (job.body["workers"], job.body["min_replicas"], job.body["max_replicas"]) == (2, 3, 3)


def test_the_namespace_may_name_the_project() -> None:
    assert translate(manifest("elastic-resnet"), "team-a").body["name"] == "resnet-elastic"
    assert translate(copy.deepcopy(manifest("elastic-echo")), "anything").body["name"] == "elastic-echo"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"kind: PyTorchJob\nspec: [unclosed\n", "not valid YAML: "),
        (b"a: 1\n---\nb: 2\n", "one PyTorchJob manifest per request; this body has 2"),
        (b"", "this body has 0"),
        (b"\xff\xfe", "not UTF-8"),
        (b"!!python/object:os.system {}", "not valid YAML"),  # the safe loader builds no objects
    ],
)
def test_a_body_that_is_not_one_yaml_document_is_unreadable(data: bytes, message: str) -> None:
    with pytest.raises(ManifestUnreadable, match=message):
        read_manifest(data)


def test_yaml_errors_say_where() -> None:
    with pytest.raises(ManifestUnreadable, match="line 2, column"):
        read_manifest(b"kind: PyTorchJob\n  spec: : x\n")


def test_the_replicas_pod_template_becomes_the_jobs() -> None:
    """deploy/examples/pytorchjob-rdma.yaml: resources with RDMA, env from a Secret, envFrom, a data volume,
    /dev/shm as Kubeflow users size it, tolerations, a node selector, service account, pull secrets,
    priority class and security contexts: the job's pod template, the same for Master and Worker."""
    path = Path(__file__).parent.parent.parent / "deploy" / "examples" / "pytorchjob-rdma.yaml"
    job = translate(read_manifest(path.read_bytes()), "team-a")
    assert job.warnings == []
    assert job.body["env"] == {"NCCL_DEBUG": "WARN"} and job.body["gpus_per_replica"] == 8
    template = job.body["pod_template"]
    assert template["shm_size"] == "64Gi"  # the emptyDir of medium Memory at /dev/shm
    assert template["metadata"] == {"annotations": {"sidecar.istio.io/inject": "false"}}
    pod = template["spec"]
    container = pod["containers"][0]
    assert container["resources"] == {
        "requests": {"cpu": "32", "memory": "256Gi", "rdma/hca_shared_devices_a": "1"},
        "limits": {"memory": "256Gi", "rdma/hca_shared_devices_a": "1"},
    }
    assert container["env"] == [
        {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}}
    ]
    assert container["envFrom"] == [{"configMapRef": {"name": "nccl-tuning"}}]
    assert container["volumeMounts"] == [{"name": "imagenet", "mountPath": "/data", "readOnly": True}]
    assert container["securityContext"] == {"runAsUser": 1000, "runAsNonRoot": True}
    assert pod["volumes"] == [
        {"name": "imagenet", "persistentVolumeClaim": {"claimName": "imagenet", "readOnly": True}}
    ]
    assert pod["serviceAccountName"] == "trainer" and pod["priorityClassName"] == "batch-high"
    assert pod["imagePullSecrets"] == [{"name": "registry-creds"}]
    assert pod["tolerations"] == [{"key": "rdma", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["nodeSelector"] == {"network.example.org/rdma": "true"}
    assert pod["securityContext"] == {"fsGroup": 1000}
