"""Job pod templates: what a job and an admin's defaults may set, how the levels merge, and the pod that
results (validated against the Kubernetes 1.30 schema, strict, as the API server would)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate

from scheduler.executors.base import LaunchSpec
from scheduler.executors.kube import podspec
from scheduler.executors.kube.podtemplate import (
    Allow,
    allow_of,
    defaults_problems,
    effective,
    merged_problems,
    parse_quantity,
    problems,
)

OPTIONS = podspec.PodOptions(namespace="tide-jobs", default_image="img:1")
RDMA = "rdma/hca_shared_devices_a"

JOB: dict[str, Any] = {
    "shm_size": "16Gi",
    "metadata": {"labels": {"team": "vision"}, "annotations": {"sidecar.istio.io/inject": "false"}},
    "spec": {
        "containers": [
            {
                "name": "pytorch",  # ignored: Tide names its container
                "resources": {"requests": {"cpu": "12", "memory": "100Gi"}, "limits": {RDMA: "1"}},
                "env": [
                    {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "key"}}},
                    {"name": "NCCL_IB_HCA", "value": "mlx5"},
                ],
                "envFrom": [{"configMapRef": {"name": "nccl-tuning"}}],
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
                "securityContext": {"runAsUser": 1000},
            }
        ],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}}],
        "tolerations": [{"key": "rdma", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"nic": "cx7"},
        "serviceAccountName": "trainer",
        "imagePullSecrets": [{"name": "registry"}],
        "priorityClassName": "batch-high",
        "securityContext": {"fsGroup": 1000},
    },
}
NODE_AFFINITY = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "nic", "operator": "In", "values": ["cx7"]}]}]}}  # fmt: skip
ANTI_AFFINITY = {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {
    "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"team": "x"}}}}]}  # fmt: skip
ALLOWED = Allow(service_accounts=("trainer",), priority_classes=("batch-high",))


def spec(template: Any = None, gpus: tuple[int, ...] = (0, 1)) -> LaunchSpec:
    return LaunchSpec(
        replica_id=3, project="vision", job="resnet", index=0, node="gpu-0", gpu_ids=gpus,
        argv=("torchrun", "train.py"), env={"TIDE_NUM_REPLICAS": "1", "DATA": "/data"}, pod_template=template,
    )  # fmt: skip


def paths(found: list[Any]) -> list[str]:
    return [p.path for p in found]


def test_a_full_template_is_valid_for_a_job_the_admin_allows() -> None:
    assert problems(JOB, "pod_template", allow=ALLOWED) == []


def test_the_pod_carries_the_template() -> None:
    body = podspec.pod_body(spec(JOB), OPTIONS)
    kubernetes_validate.validate(body, "1.30", strict=True)
    pod, container = body["spec"], body["spec"]["containers"][0]
    assert container["name"] == "replica"
    assert container["resources"] == {
        "requests": {"cpu": "12", "memory": "100Gi"},
        "limits": {RDMA: "1", "nvidia.com/gpu": "2"},
    }
    env = {e["name"]: e for e in container["env"]}
    assert env["WANDB_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "wandb", "key": "key"}}
    assert env["NCCL_IB_HCA"]["value"] == "mlx5" and env["DATA"]["value"] == "/data"
    assert container["envFrom"] == [{"configMapRef": {"name": "nccl-tuning"}}]
    assert container["volumeMounts"] == [
        {"name": "data", "mountPath": "/data", "readOnly": True},
        {"name": "tide-shm", "mountPath": "/dev/shm"},
    ]
    assert pod["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}},
        {"name": "tide-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
    ]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsUser": 1000,
    }  # fmt: skip
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "rdma", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert pod["serviceAccountName"] == "trainer" and pod["priorityClassName"] == "batch-high"
    assert pod["imagePullSecrets"] == [{"name": "registry"}] and pod["nodeSelector"] == {"nic": "cx7"}
    assert pod["securityContext"] == {"fsGroup": 1000} and pod["nodeName"] == "gpu-0"
    assert body["metadata"]["labels"]["team"] == "vision"
    assert body["metadata"]["labels"]["tide.dev/job"] == "resnet"
    assert body["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"


def test_no_template_no_besteffort_and_shm_is_half_the_memory_request() -> None:
    options = podspec.PodOptions(
        namespace="ns", default_image="img", cpu_per_gpu="1500m", memory_per_gpu="12Gi"
    )
    body = podspec.pod_body(spec(gpus=(0, 1, 2)), options)
    kubernetes_validate.validate(body, "1.30", strict=True)
    container = body["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "4500m", "memory": "36Gi"}
    assert body["spec"]["volumes"] == [
        {"name": "tide-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "18Gi"}}
    ]
    # a limit alone is the request (Kubernetes' rule): no default request beside it; "0": no /dev/shm
    limited = {"shm_size": "0", "spec": {"containers": [{"resources": {"limits": {"memory": "8Gi"}}}]}}
    container = podspec.pod_body(spec(limited), options)["spec"]["containers"][0]
    assert container["resources"] == {
        "requests": {"cpu": "3"}, "limits": {"memory": "8Gi", "nvidia.com/gpu": "2"}
    } and "volumeMounts" not in container  # fmt: skip
    # a number (YAML's cpu: 4) is a quantity string, as the client's Pod model requires
    numbers = {"spec": {"containers": [{"resources": {"requests": {"cpu": 4, "memory": 2**30}}}]}}
    assert podspec.pod_body(spec(numbers), options)["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "4",
        "memory": "1073741824",
    }
    # an extended resource asked as a request only gets its limit (Kubernetes requires one)
    rdma = {"spec": {"containers": [{"resources": {"requests": {RDMA: "1"}}}]}}
    resources = podspec.pod_body(spec(rdma), options)["spec"]["containers"][0]["resources"]
    assert resources["limits"][RDMA] == "1" and resources["requests"][RDMA] == "1"


def test_tides_own_fields_are_refused_with_what_to_do_instead() -> None:
    template = {
        "metadata": {"name": "x", "labels": {"tide.dev/job": "other"}},
        "spec": {
            "nodeName": "gpu-9",
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "image": "other:1",
                    "command": ["python"],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    "env": [{"name": "TIDE_AGENT_URL", "value": "http://evil"}],
                    "volumeMounts": [{"name": "x", "mountPath": "/dev/shm"}],
                },
                {"name": "sidecar"},
            ],
        },
    }
    found = {p.path: p.message for p in problems(template, "pod_template", allow=Allow())}
    assert set(found) == {
        "pod_template.metadata.name",
        "pod_template.metadata.labels[tide.dev/job]",
        "pod_template.spec.nodeName",
        "pod_template.spec.terminationGracePeriodSeconds",
        "pod_template.spec.containers[0].image",
        "pod_template.spec.containers[0].command",
        "pod_template.spec.containers[0].resources.limits[nvidia.com/gpu]",
        "pod_template.spec.containers[0].env[0].name",
        "pod_template.spec.containers[0].volumeMounts[0].mountPath",
        "pod_template.spec.containers[1]",
    }
    assert "gpus_per_replica" in found["pod_template.spec.containers[0].resources.limits[nvidia.com/gpu]"]
    assert "grace_period" in found["pod_template.spec.terminationGracePeriodSeconds"]
    assert "shm_size" in found["pod_template.spec.containers[0].volumeMounts[0].mountPath"]
    # an admin's defaults may not set them either
    assert problems(template, "t", allow=None) != []


def test_what_only_an_admin_may_allow() -> None:
    template = {
        "spec": {
            "hostNetwork": True,
            "volumes": [{"name": "nvme", "hostPath": {"path": "/mnt/nvme"}}],
            "serviceAccountName": "cluster-admin",
            "priorityClassName": "system-cluster-critical",
            "securityContext": {"sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]},
            "containers": [{"securityContext": {"privileged": True, "capabilities": {"add": ["IPC_LOCK"]}}}],
        }
    }
    found = {p.path: p.message for p in problems(template, "pod_template", allow=ALLOWED)}
    assert set(found) == {
        "pod_template.spec.hostNetwork",
        "pod_template.spec.volumes[0].hostPath",
        "pod_template.spec.serviceAccountName",
        "pod_template.spec.priorityClassName",
        "pod_template.spec.securityContext.sysctls",
        "pod_template.spec.containers[0].securityContext.privileged",
        "pod_template.spec.containers[0].securityContext.capabilities",
    }
    assert "allowed: trainer" in found["pod_template.spec.serviceAccountName"]
    assert "allow.host_path" in found["pod_template.spec.volumes[0].hostPath"]
    generous = Allow(host_path=True, privileged=True, service_accounts=("cluster-admin",),
                     priority_classes=("system-cluster-critical",))  # fmt: skip
    assert problems(template, "pod_template", allow=generous) == []
    assert problems(template, "pod_template", allow=None) == []  # an admin's own defaults


def test_unknown_and_malformed_fields_are_named() -> None:
    template = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "lots"}}, "env": [{"name": "A"}], "workingDir": "/w"}
            ],
            "volumes": [{"name": "v", "gitRepo": {}}, {"name": "Data_1", "emptyDir": {}}],
            "nodeSelector": {"gpu": 1},
        },
        "metadata": {"labels": {"team": "a b"}},
        "shm_size": 16,
    }
    assert sorted(paths(problems(template, "p", allow=Allow()))) == [
        "p.metadata.labels[team]",
        "p.shm_size",
        "p.spec.containers[0].env[0]",
        "p.spec.containers[0].resources.requests[cpu]",
        "p.spec.containers[0].workingDir",
        "p.spec.nodeSelector[gpu]",
        "p.spec.volumes[0].gitRepo",
        "p.spec.volumes[1].name",
    ]


def test_levels_merge_department_then_project_then_job() -> None:
    department = {
        "template": {
            "shm_size": "8Gi",
            "spec": {
                "priorityClassName": "batch-low",
                "tolerations": [{"key": "dept", "operator": "Exists"}],
                "affinity": {"nodeAffinity": NODE_AFFINITY},
                "containers": [{"securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                                "env": [{"name": "A", "value": "dept"}, {"name": "B", "value": "dept"}]}],
            },
        },
        "allow": {"priority_classes": ["batch-low"]},
    }  # fmt: skip
    project = {
        "template": {
            "spec": {
                "imagePullSecrets": [{"name": "registry"}],
                "affinity": {"podAntiAffinity": ANTI_AFFINITY},
                "containers": [{"env": [{"name": "A", "value": "project"}]}],
            }
        }
    }
    job = {"shm_size": "32Gi", "spec": {"containers": [{"env": [{"name": "B", "value": "job"}]}]}}
    merged = effective(department, project, job)
    assert merged["shm_size"] == "32Gi"
    container = merged["spec"]["containers"][0]
    assert container["env"] == [{"name": "A", "value": "project"}, {"name": "B", "value": "job"}]
    assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert merged["spec"]["affinity"] == {
        "podAntiAffinity": ANTI_AFFINITY
    }  # affinity: the most specific, whole
    assert merged["spec"]["priorityClassName"] == "batch-low"
    assert merged["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    assert allow_of(department, project) == Allow(priority_classes=("batch-low",))
    assert allow_of(department, {"allow": {}}) == Allow()  # the project's own allow, even empty, wins
    body = podspec.pod_body(spec(merged), OPTIONS)
    kubernetes_validate.validate(body, "1.30", strict=True)
    assert body["spec"]["containers"][0]["securityContext"]["capabilities"] == {
        "drop": ["ALL"],
        "add": ["IPC_LOCK"],
    }


def test_what_only_the_merged_template_shows() -> None:
    job = {"spec": {"containers": [{"volumeMounts": [{"name": "data", "mountPath": "/data"}],
                                    "resources": {"requests": {"memory": "64Gi"}}}]}}  # fmt: skip
    project = {"template": {"spec": {"containers": [{"resources": {"limits": {"memory": "32Gi"}}}]}}}
    found = merged_problems(effective(None, project, job), "pod_template")
    assert paths(found) == [
        "pod_template.spec.containers[0].volumeMounts[0].name",
        "pod_template.spec.containers[0].resources.requests[memory]",
    ]
    shared = {"template": {"spec": {"volumes": [{"name": "data", "nfs": {"server": "nfs", "path": "/d"}}]}}}
    assert merged_problems(effective(shared, None, {"spec": job["spec"]}), "t") == []


def test_pod_defaults_documents_are_checked() -> None:
    assert defaults_problems({"template": JOB, "allow": {"host_path": True, "service_accounts": ["a"]}}) == []
    assert paths(defaults_problems({"allow": {"host_path": "yes", "service_accounts": "a"}, "x": 1})) == [
        "pod_defaults.x", "pod_defaults.allow.host_path", "pod_defaults.allow.service_accounts",
    ]  # fmt: skip


def test_quantities() -> None:
    assert parse_quantity("500m") == parse_quantity("0.5") and parse_quantity("1Gi") == 2**30
    assert parse_quantity("1e3") == 1000 and parse_quantity(2) == 2
    assert parse_quantity("lots") is None and parse_quantity(True) is None and parse_quantity("1Xi") is None
