"""A Kubeflow PyTorchJob manifest submitted as it is: ``tide submit -f`` and ``POST .../pytorchjobs``.

Through the real app (``ASGIBridge``, with its scheduling loop and the in-memory executor): the job runs at
the size the manifest asks for, ignored fields come back as warnings, and every bad manifest is a 4xx (a
CLI exit 2) that names the field, with nothing submitted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from servicekit import ADMIN, settings_for, wait_for
from typer.testing import CliRunner

from api.client.cli import context
from api.client.cli.main import app
from api.client.rest import TideAPIError, TideClient
from api.server.app import create_app
from api.server.testing import BASE_URL, ASGIBridge, local_client

MANIFESTS = Path(__file__).parent.parent / "manifests"
runner = CliRunner()


@pytest.fixture
def bridge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ASGIBridge]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("TIDE_DATA_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("TIDE_TOKEN", ADMIN)
    for name in ("TIDE_URL", "TIDE_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    bridge = ASGIBridge(create_app(settings_for(tmp_path, None, nodes=2, gpus_per_node=4)))
    context.use_client_factory(lambda target: local_client(bridge, target.token))
    client = local_client(bridge, ADMIN)
    client.create_project({"name": "team-a", "deserved_gpus": 4})
    client.create_project({"name": "team-b", "deserved_gpus": 4})
    try:
        yield bridge
    finally:
        context.use_client_factory(None)
        bridge.close()


def _post(
    bridge: ASGIBridge, project: str, body: bytes, content_type: str = "application/yaml"
) -> httpx.Response:
    http = local_client(bridge, ADMIN).http  # not closed: closing it would close the bridge
    headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": content_type}
    return http.post(f"/api/v1/projects/{project}/pytorchjobs", content=body, headers=headers)


def test_tide_submit_f_runs_the_manifest_in_the_project_of_its_namespace(bridge: ASGIBridge) -> None:
    result = runner.invoke(app, ["submit", "-f", str(MANIFESTS / "elastic-resnet.yaml")])
    assert result.exit_code == 0, result.output
    assert "Submitted job resnet-elastic to project team-a: 2..4 replicas of 1 GPU(s)" in result.output
    assert "Warning: spec.elasticPolicy.metrics: ignored" in result.output
    client = local_client(bridge, ADMIN)
    wait_for(lambda: client.job("team-a", "resnet-elastic").replicas_now == 4, what="the job to grow to 4")
    job = client.job("team-a", "resnet-elastic")
    assert job.command == [
        "torchrun",
        "/workspace/train.py",
        "--arch=resnet50",
        "--epochs=90",
        "--batch-size=64",
    ]
    assert job.image == "registry.example.org/vision/resnet:2.3" and job.env_names == ["DATA_DIR"]


def test_p_picks_the_project_of_a_manifest_without_namespace(bridge: ASGIBridge, tmp_path: Path) -> None:
    result = runner.invoke(app, ["submit", "-f", str(MANIFESTS / "elastic-echo.yaml"), "-p", "team-b"])
    assert result.exit_code == 0, result.output
    assert "Submitted job elastic-echo to project team-b: 1..3 replicas" in result.output
    assert local_client(bridge, ADMIN).job("team-b", "elastic-echo").max_replicas == 3
    stdin = runner.invoke(
        app, ["submit", "-f", "-", "-p", "team-a"], input=(MANIFESTS / "elastic-echo.yaml").read_text()
    )
    assert stdin.exit_code == 0, stdin.output


def test_a_refused_manifest_names_its_fields_and_submits_nothing(bridge: ASGIBridge, tmp_path: Path) -> None:
    data = yaml.safe_load((MANIFESTS / "elastic-resnet.yaml").read_text())
    worker = data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 2
    worker["volumes"] = [{"name": "data", "emptyDir": {}}]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["submit", "-f", str(path)])
    assert result.exit_code == 2
    limit = "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].resources.limits[nvidia.com/gpu]"
    assert f"{limit}: Master asks for 1 GPU(s) and Worker for 2" in result.output
    assert "spec.pytorchReplicaSpecs[Worker].template: Master's pod template" in result.output
    assert "Traceback" not in result.output
    assert local_client(bridge, ADMIN).jobs() == []


def test_the_api_answers_201_with_warnings_and_4xx_naming_the_field(bridge: ASGIBridge) -> None:
    echo = (MANIFESTS / "elastic-echo.yaml").read_bytes()
    created = _post(bridge, "team-a", echo)
    assert created.status_code == 201, created.text
    assert created.json()["min_replicas"] == 1 and created.json()["max_replicas"] == 3
    assert any("maxRestarts" in w for w in created.headers.get_list("warning"))
    as_json = json.dumps(yaml.safe_load(echo) | {"metadata": {"name": "echo-json"}}).encode()
    assert _post(bridge, "team-a", as_json, "application/json").status_code == 201
    again = _post(bridge, "team-a", echo)
    assert again.status_code == 409  # as POST /jobs answers for an active job of that name
    not_yaml = _post(bridge, "team-a", b"kind: [PyTorchJob\n")
    assert not_yaml.status_code == 400 and "not valid YAML" in not_yaml.json()["detail"]
    tf = _post(bridge, "team-a", echo.replace(b"kind: PyTorchJob", b"kind: TFJob"))
    assert tf.status_code == 422 and tf.json()["detail"].startswith("kind: 'TFJob'")
    assert tf.json()["errors"][0]["loc"] == ["body", "kind"]
    bad_name = _post(bridge, "team-a", echo.replace(b"name: elastic-echo", b"name: Elastic_Echo"))
    assert bad_name.status_code == 422
    assert bad_name.json()["detail"].startswith("metadata.name: 'Elastic_Echo' is not a valid name")
    tide_env = _post(
        bridge, "team-a", echo.replace(b"name: LOGLEVEL", b"name: TIDE_JOB").replace(b"elastic-echo", b"e2")
    )
    assert tide_env.status_code == 422
    assert "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].env: " in tide_env.json()["detail"]
    assert _post(bridge, "nope", echo).status_code == 404


def test_a_project_token_submits_to_its_own_project_only(bridge: ASGIBridge) -> None:
    admin = local_client(bridge, ADMIN)
    secret = admin.create_token("team-b", "ci").token
    mine = TideClient(token=secret, http=httpx.Client(transport=bridge, base_url=BASE_URL))
    echo = (MANIFESTS / "elastic-echo.yaml").read_text()
    with pytest.raises(TideAPIError) as refused:
        mine.submit_manifest("team-a", echo)
    assert refused.value.status_code == 403
    job, warnings = mine.submit_manifest("team-b", echo)
    assert job.project == "team-b" and warnings


EXAMPLE = Path(__file__).parent.parent.parent / "deploy" / "examples" / "pytorchjob-rdma.yaml"


def test_the_example_manifests_pod_template_needs_the_projects_allow_list(
    bridge: ASGIBridge, tmp_path: Path
) -> None:
    """deploy/examples/pytorchjob-rdma.yaml names a service account and a priority class: refused (exit 2,
    naming the manifest's fields) until an admin allows them with ``tide project update --pod-defaults``;
    then it is accepted, with a warning that this executor (memory) does not apply pod templates."""
    refused = runner.invoke(app, ["submit", "-f", str(EXAMPLE)])
    assert refused.exit_code == 2, refused.output
    pod = "spec.pytorchReplicaSpecs[Master].template.spec"
    assert (
        f"{pod}.serviceAccountName: service account 'trainer' is not one the admin allows" in refused.output
    )
    assert f"{pod}.priorityClassName: priority class 'batch-high'" in refused.output
    assert "Traceback" not in refused.output and local_client(bridge, ADMIN).jobs() == []
    defaults = tmp_path / "team-a-pods.yaml"
    defaults.write_text("allow:\n  service_accounts: [trainer]\n  priority_classes: [batch-high]\n")
    updated = runner.invoke(app, ["project", "update", "team-a", "--pod-defaults", str(defaults)])
    assert updated.exit_code == 0, updated.output
    assert "with pod defaults." in updated.output
    accepted = runner.invoke(app, ["submit", "-f", str(EXAMPLE)])
    assert accepted.exit_code == 0, accepted.output
    assert (
        "Warning: spec.pytorchReplicaSpecs[Master].template: this Tide runs jobs with the memory executor"
        in (accepted.output)
    )
    assert local_client(bridge, ADMIN).job("team-a", "llm-pretrain").gpus_per_replica == 8
    cleared = runner.invoke(app, ["project", "update", "team-a", "--pod-defaults", "none"])
    assert cleared.exit_code == 0 and local_client(bridge, ADMIN).project("team-a").pod_defaults is None
    bad = tmp_path / "bad.yaml"
    bad.write_text("template:\n  spec:\n    nodeName: gpu-0\n")
    wrong = runner.invoke(app, ["project", "update", "team-a", "--pod-defaults", str(bad)])
    assert wrong.exit_code == 2 and "pod_defaults.template.spec.nodeName: Tide's own" in wrong.output
    missing = runner.invoke(
        app, ["project", "update", "team-a", "--pod-defaults", str(tmp_path / "nope.yaml")]
    )
    assert missing.exit_code == 2 and "--pod-defaults: cannot read" in missing.output


def test_submit_dist_takes_a_pod_template_file(bridge: ASGIBridge, tmp_path: Path) -> None:
    template = tmp_path / "pod.yaml"
    template.write_text("shm_size: 8Gi\nspec:\n  containers:\n    - resources: {requests: {cpu: '4'}}\n")
    args = ["submit-dist", "pytorch", "--name", "t", "-p", "team-a", "--pod-template", str(template)]
    result = runner.invoke(app, [*args, "--", "python", "train.py"])
    assert result.exit_code == 0, result.output
    assert "the memory executor, not as Kubernetes pods" in result.output
    template.write_text("spec:\n  containers:\n    - command: [sh]\n")
    result = runner.invoke(app, [*args[:-1], str(template), "--name", "u", "--", "python", "train.py"])
    assert result.exit_code == 2 and "pod_template.spec.containers[0].command: Tide's own" in result.output
