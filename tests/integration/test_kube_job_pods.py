"""Job pods that training can run in: REST API -> engine -> Kubernetes executor -> the fake API server.

An admin sets pod defaults on a department and a project (a priority class, a pull secret, a toleration, an
allow-list, the IPC_LOCK capability RDMA needs); a job's pod template (REST) or a Kubeflow PyTorchJob's
replica template (``POST .../pytorchjobs``, deploy/examples/pytorchjob-rdma.yaml) adds resources, env from a
Secret, volumes, /dev/shm and a service account. The pod the fake API server stores carries all of it, with
CPU and memory requests (never BestEffort) and a safe securityContext; what a job may not set is a 422 that
names the field, and nothing is created.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubefake import FakeKubeApi
from kubefake.containers import ProcessOptions
from kubefake.harness import IMAGE, NAMESPACE, kube_executor, wait_for
from servicekit import ADMIN, RunningService
from typer.testing import CliRunner

from api.client.cli.main import app
from api.client.rest import TideAPIError, TideClient
from scheduler.executors.base import ExecutorError, LaunchSpec

EXAMPLE = Path(__file__).parent.parent.parent / "deploy" / "examples" / "pytorchjob-rdma.yaml"
RDMA = "rdma/hca_shared_devices_a"
DEPARTMENT_DEFAULTS = {
    "template": {
        "spec": {
            "priorityClassName": "batch-low",
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
            "containers": [{"securityContext": {"capabilities": {"add": ["IPC_LOCK"]}}}],
        }
    },
    "allow": {"service_accounts": ["trainer"], "priority_classes": ["batch-low", "batch-high"]},
}
PROJECT_DEFAULTS = {
    "template": {
        "spec": {
            "imagePullSecrets": [{"name": "registry-creds"}],
            "volumes": [{"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets"}}],
        }
    }
}
TEMPLATE = {
    "shm_size": "16Gi",
    "spec": {
        "serviceAccountName": "trainer",
        "containers": [
            {
                "resources": {"requests": {"cpu": "6", "memory": "48Gi", RDMA: "1"}},
                "env": [
                    {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "k"}}}
                ],
                "volumeMounts": [{"name": "datasets", "mountPath": "/data", "readOnly": True}],
            }
        ],
    },
}


@pytest.fixture
def service(make_service: Callable[..., RunningService], api: FakeKubeApi, tmp_path: Path) -> RunningService:
    executor = kube_executor(api, tmp_path, pod_cpu_per_gpu="3", pod_memory_per_gpu="20Gi")
    return make_service(
        None, with_executor=executor, executor="kubernetes", cycle_period=0.1, default_image=IMAGE
    )


def pods(api: FakeKubeApi, job: str) -> list[dict[str, Any]]:
    return api.pods(NAMESPACE, f"tide.dev/job={job}")


def setup(client: TideClient) -> None:
    client.create_department({"name": "research", "deserved_gpus": 4, "pod_defaults": DEPARTMENT_DEFAULTS})
    client.create_project({"name": "team-a", "deserved_gpus": 4, "department": "research"})
    project = client.update_project("team-a", {"pod_defaults": PROJECT_DEFAULTS})
    assert project.pod_defaults == PROJECT_DEFAULTS


def test_a_jobs_pod_carries_its_template_over_the_admins_defaults(
    service: RunningService, api: FakeKubeApi
) -> None:
    client = service.client()
    setup(client)
    job = {
        "name": "train",
        "gpus_per_replica": 2,
        "command": ["python", "train.py"],
        "pod_template": TEMPLATE,
    }
    _, warnings = client.submit_warned("team-a", job)
    assert warnings == []
    pod = wait_for(lambda: (pods(api, "train") or [None])[0], what="the job's pod")
    spec, container = pod["spec"], pod["spec"]["containers"][0]
    assert container["resources"] == {
        "requests": {"cpu": "6", "memory": "48Gi", RDMA: "1"},
        "limits": {RDMA: "1", "nvidia.com/gpu": "2"},
    }
    assert {
        "name": "WANDB_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "k"}},
    } in container["env"]
    assert container["volumeMounts"] == [
        {"name": "datasets", "mountPath": "/data", "readOnly": True},
        {"name": "tide-shm", "mountPath": "/dev/shm"},
    ]
    assert spec["volumes"] == [
        {"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets"}},
        {"name": "tide-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
    ]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {
            "drop": ["ALL"],
            "add": ["IPC_LOCK"],
        },  # the department's, which only an admin may add
    }
    assert spec["serviceAccountName"] == "trainer" and spec["priorityClassName"] == "batch-low"
    assert spec["imagePullSecrets"] == [{"name": "registry-creds"}]
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
    ]
    assert spec["nodeName"] == "gpu-0" and container["image"] == IMAGE


def test_a_pod_without_a_template_is_never_besteffort(service: RunningService, api: FakeKubeApi) -> None:
    client = service.client()
    client.create_project({"name": "team-b", "deserved_gpus": 4})
    client.submit("team-b", {"name": "plain", "gpus_per_replica": 2, "command": ["python", "train.py"]})
    pod = wait_for(lambda: (pods(api, "plain") or [None])[0], what="the job's pod")
    container = pod["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "6", "memory": "40Gi"}  # --pod-*-per-gpu x 2
    assert pod["spec"]["volumes"] == [
        {"name": "tide-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "20Gi"}}
    ]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert "serviceAccountName" not in pod["spec"] and pod["spec"]["automountServiceAccountToken"] is False


def test_the_example_pytorchjob_runs_with_its_pod_template(service: RunningService, api: FakeKubeApi) -> None:
    client = service.client()
    setup(client)
    high = {"allow": {"service_accounts": ["trainer"], "priority_classes": ["batch-high"]}}
    client.update_project("team-a", {"pod_defaults": PROJECT_DEFAULTS | high})
    api.add_node("gpu-1", 8)
    api.add_node("gpu-2", 8)
    wait_for(lambda: len(client.nodes()) == 3, what="the new nodes")
    job, warnings = client.submit_manifest("team-a", EXAMPLE.read_bytes())
    assert job.name == "llm-pretrain" and job.gpus_per_replica == 8
    assert len(warnings) == 1 and "nodeSelector and node affinity" in warnings[0]
    found = wait_for(lambda: len(pods(api, "llm-pretrain")) == 2 and pods(api, "llm-pretrain"), what="2 pods")
    for pod in found:
        spec, container = pod["spec"], pod["spec"]["containers"][0]
        assert container["resources"]["limits"] == {"memory": "256Gi", RDMA: "1", "nvidia.com/gpu": "8"}
        assert container["envFrom"] == [{"configMapRef": {"name": "nccl-tuning"}}]
        assert {"name": "tide-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in spec["volumes"]
        assert spec["priorityClassName"] == "batch-high" and spec["serviceAccountName"] == "trainer"
        assert spec["nodeSelector"] == {"network.example.org/rdma": "true"}
        assert pod["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
        assert container["securityContext"]["runAsUser"] == 1000


def test_what_a_job_may_not_set_is_a_422_naming_the_field(service: RunningService, api: FakeKubeApi) -> None:
    client = service.client()
    setup(client)
    bad = {
        "spec": {
            "serviceAccountName": "cluster-admin",
            "hostNetwork": True,
            "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
            "containers": [
                {
                    "command": ["sh"],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    "securityContext": {"privileged": True},
                    "volumeMounts": [{"name": "nowhere", "mountPath": "/x"}],
                }
            ],
        }
    }
    with pytest.raises(TideAPIError) as caught:
        client.submit("team-a", {"name": "evil", "command": ["python"], "pod_template": bad})
    assert caught.value.status_code == 422
    detail = str(caught.value)
    for path, says in [
        (
            "pod_template.spec.serviceAccountName",
            "'cluster-admin' is not one the admin allows jobs (allowed: trainer)",
        ),
        ("pod_template.spec.hostNetwork", "an admin's pod defaults may set it"),
        ("pod_template.spec.volumes[0].hostPath", "hostPath volumes are not allowed"),
        ("pod_template.spec.containers[0].command", "Tide runs the job's command"),
        ("pod_template.spec.containers[0].resources.limits[nvidia.com/gpu]", "gpus_per_replica"),
        ("pod_template.spec.containers[0].securityContext.privileged", "privileged: true is not allowed"),
    ]:
        assert f"{path}: " in detail and says in detail, (path, detail)
    # a mount of a volume no level defines is found once the template is merged
    lost = {"spec": {"containers": [{"volumeMounts": [{"name": "nowhere", "mountPath": "/x"}]}]}}
    with pytest.raises(TideAPIError, match=r"volumeMounts\[0\]\.name: no volume 'nowhere'"):
        client.submit("team-a", {"name": "lost", "command": ["python"], "pod_template": lost})
    # what Kubernetes' Pod schema refuses is found at submit, not when the pod is made
    misspelt = {"spec": {"affinity": {"nodeAfinity": {}}}}
    with pytest.raises(
        TideAPIError, match=r"pod_template\.spec\.affinity\.nodeAfinity: Extra inputs are not permitted"
    ):
        client.submit("team-a", {"name": "typo", "command": ["python"], "pod_template": misspelt})
    # a manifest's refusal names the manifest's field
    manifest = EXAMPLE.read_text().replace("serviceAccountName: trainer", "serviceAccountName: root")
    with pytest.raises(
        TideAPIError, match=r"spec\.pytorchReplicaSpecs\[Master\]\.template\.spec\.serviceAccountName"
    ):
        client.submit_manifest("team-a", manifest)
    assert client.jobs() == [] and pods(api, "evil") == []


def test_bad_pod_defaults_are_a_422_and_null_clears_them(service: RunningService) -> None:
    client = service.client()
    setup(client)
    with pytest.raises(TideAPIError) as caught:
        client.update_project(
            "team-a", {"pod_defaults": {"template": {"spec": {"nodeName": "x"}}, "allow": {"root": 1}}}
        )
    assert caught.value.status_code == 422
    assert "pod_defaults.template.spec.nodeName: Tide's own" in str(caught.value)
    assert "pod_defaults.allow.root" in str(caught.value)
    assert client.update_project("team-a", {"pod_defaults": None}).pod_defaults is None
    answer = httpx.post(
        f"{service.url}/api/v1/projects",
        json={"name": "x", "deserved_gpus": 1, "pod_defaults": "big"},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert answer.status_code == 422 and "pod_defaults" in answer.text


def test_a_pod_the_schema_refuses_fails_its_replica_with_the_fields_named(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    """Defaults an admin changed after a submit can still make a bad pod: the replica fails with the fields
    named (an ExecutorError, its job failed), never an error of the cycle, and no pod is created."""
    executor = kube_executor(api, tmp_path)
    bad = {"spec": {"tolerations": [{"key": 1}]}}
    spec = LaunchSpec(4, "a", "train", 0, "gpu-0", (0,), ("python", "train.py"), pod_template=bad)
    try:
        with pytest.raises(
            ExecutorError, match=r"pod\.spec\.tolerations\[1\]\.key: Input should be a valid string"
        ):
            executor.start(spec)
        assert pods(api, "train") == []
    finally:
        executor.close()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--executor", "kubernetes", "--pod-memory-per-gpu", "lots"], "'lots' is not a Kubernetes quantity"),
        (["--executor", "kubernetes", "--pod-cpu-per-gpu", "0"], "'0' is not a Kubernetes quantity above 0"),
        (["--pod-cpu-per-gpu", "8"], "--pod-cpu-per-gpu only apply to --executor kubernetes"),
    ],
)
def test_serve_refuses_pod_requests_that_are_not_quantities(
    tmp_path: Path, args: list[str], says: str
) -> None:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith(("TIDE_", "KUBE"))}
    env.update(TIDE_DATA_DIR=str(tmp_path / "data"), TIDE_ADMIN_TOKEN=ADMIN, COLUMNS="300")
    result = CliRunner().invoke(app, ["serve", *args], env=env)
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.replace("│", " ").split())


TRAINING_SEES = """
import os, sys
data, shm = sys.argv[1], sys.argv[2]
with open(os.path.join(shm, "batch"), "w") as out:
    out.write("x" * 1024)  # what DataLoader workers share
print("key=" + os.environ.get("WANDB_API_KEY", "<unset>"))
print("data=" + open(os.path.join(data, "sample.txt")).read())
print("shm=" + str(os.path.getsize(os.path.join(shm, "batch"))))
"""


def test_a_real_process_in_a_templated_pod_reads_its_secret_data_and_shm(tmp_path: Path) -> None:
    """Through the fake's process kubelet: the pod's process gets its Secret's value from the template's
    valueFrom, reads the data volume's claim and writes to /dev/shm (each mapped to this machine)."""
    base_env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}  # the "image"
    fake = FakeKubeApi(processes=ProcessOptions(work_dir=tmp_path / "kubelet", base_env=base_env)).start()
    fake.add_node("gpu-0", 2)
    claim = tmp_path / "kubelet" / "claims" / NAMESPACE / "datasets"
    claim.mkdir(parents=True)
    (claim / "sample.txt").write_text("imagenet")
    executor = kube_executor(fake, tmp_path)
    try:
        core = executor._core()
        core.create_namespaced_secret(
            NAMESPACE, {"metadata": {"name": "wandb"}, "stringData": {"k": "s3cret"}}
        )
        template = {
            "shm_size": "1Gi",
            "spec": {
                "volumes": [{"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets"}}],
                "containers": [
                    {
                        "volumeMounts": [{"name": "datasets", "mountPath": "/data"}],
                        "env": [
                            {
                                "name": "WANDB_API_KEY",
                                "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "k"}},
                            }
                        ],
                    }
                ],
            },
        }
        argv = ("python", "-c", TRAINING_SEES, "/data", "/dev/shm")
        executor.start(LaunchSpec(5, "a", "train", 0, "gpu-0", (0,), argv, pod_template=template))
        name = pods(fake, "train")[0]["metadata"]["name"]
        wait_for(
            lambda: fake.pod(NAMESPACE, name)["status"]["phase"] == "Succeeded", what="the process to end"
        )
        text = str(core.read_namespaced_pod_log(name, NAMESPACE))
        assert "key=s3cret" in text and "data=imagenet" in text and "shm=1024" in text, text
    finally:
        executor.close()
        fake.stop()
