"""deploy/: the Kubernetes manifests, the service image and docker-compose.yml, checked offline.

The manifests are rendered with ``kubectl kustomize`` (Debian's ``kubectl``/``kubernetes-client``,
installed with apt-get when missing; in CI a missing kubectl is a failure, not a skip) and every object is
validated against the Kubernetes 1.30 JSON schema, strictly (``kubernetes-validate``). Then what the
objects say is checked: least-privilege RBAC, the Deployment's environment names real ``tide serve``
settings and reads the Secret's keys, the quick start's database URL reaches its PostgreSQL. The image
installs the package without torch, and the service imports and builds its kubernetes executor with
torch unimportable. docker-compose.yml is parsed: PostgreSQL with a healthcheck, Tide waiting for it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import typer
import yaml

from api.client.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
SCHEMA = "1.30"


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        # Debian ships kubectl as `kubernetes-client` (bookworm: 1.20, with kustomize v2.0.3)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "kubernetes-client"], check=False, capture_output=True
        )
        found = shutil.which("kubectl")
    if found is None:
        message = "kubectl is not installed and could not be installed (apt-get install kubernetes-client)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def render(path: Path) -> list[dict[str, Any]]:
    result = subprocess.run([kubectl(), "kustomize", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def serve_envvars() -> set[str]:
    command = typer.main.get_command(app)
    serve = command.commands["serve"]  # type: ignore[attr-defined]
    found = {p.envvar for p in serve.params if isinstance(p.envvar, str)}
    return found | {"TIDE_ADMIN_TOKEN"}  # read by serve itself


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return render(K8S)


@pytest.fixture(scope="module")
def quickstart() -> list[dict[str, Any]]:
    return render(K8S / "quickstart")


def test_every_object_is_valid_kubernetes(
    base: list[dict[str, Any]], quickstart: list[dict[str, Any]]
) -> None:
    example = yaml.safe_load((K8S / "secret.example.yaml").read_text())
    for obj in [*base, *quickstart, example]:
        kubernetes_validate.validate(obj, SCHEMA, strict=True)
    kinds = sorted((o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in base)
    assert kinds == [
        ("ClusterRole", "", "tide-read-nodes"),
        ("ClusterRoleBinding", "", "tide-read-nodes"),
        ("Deployment", "tide", "tide"),
        ("Namespace", "", "tide"),
        ("Namespace", "", "tide-jobs"),
        ("Role", "tide-jobs", "tide-jobs"),
        ("RoleBinding", "tide-jobs", "tide-jobs"),
        ("Service", "tide", "tide"),
        ("ServiceAccount", "tide", "tide"),
    ]
    extra = {(o["kind"], o["metadata"]["name"]) for o in quickstart} - {
        (o["kind"], o["metadata"]["name"]) for o in base
    }
    assert extra == {
        ("Secret", "tide"),
        ("Secret", "tide-postgres"),
        ("Service", "tide-postgres"),
        ("StatefulSet", "tide-postgres"),
    }


def test_rbac_is_least_privilege(base: list[dict[str, Any]]) -> None:
    role = by_kind(base, "Role")["tide-jobs"]
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): sorted(r["verbs"]) for r in role["rules"]}
    assert rules == {
        (("",), ("pods",)): ["create", "delete", "get", "list", "watch"],
        (("",), ("pods/log",)): ["get"],
        (("",), ("services",)): ["create", "delete", "get", "list"],
        (("",), ("secrets",)): ["create", "delete", "get", "list", "update"],  # jobs' agent tokens
    }
    nodes = by_kind(base, "ClusterRole")["tide-read-nodes"]["rules"]
    assert nodes == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    subject = {"kind": "ServiceAccount", "name": "tide", "namespace": "tide"}
    for binding in (
        by_kind(base, "RoleBinding")["tide-jobs"],
        by_kind(base, "ClusterRoleBinding")["tide-read-nodes"],
    ):
        assert binding["subjects"] == [subject]
    assert "*" not in yaml.safe_dump(by_kind(base, "Role")) + yaml.safe_dump(by_kind(base, "ClusterRole"))


def test_the_deployment_runs_the_kubernetes_executor_in_the_jobs_namespace(
    base: list[dict[str, Any]],
) -> None:
    pod = by_kind(base, "Deployment")["tide"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "tide" and pod["securityContext"]["runAsNonRoot"] is True
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert set(env) <= serve_envvars()  # every variable is a real `tide serve` setting
    assert env["TIDE_EXECUTOR"]["value"] == "kubernetes"
    assert env["TIDE_NAMESPACE"]["value"] == by_kind(base, "Role")["tide-jobs"]["metadata"]["namespace"]
    assert env["TIDE_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "tide", "key": "database-url"}
    assert env["TIDE_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "admin-token"
    assert float(env["TIDE_GRACE_PERIOD"]["value"]) >= 35  # torchrun's shutdown timeout (30 s) + 5 s
    service = by_kind(base, "Service")["tide"]["metadata"]  # job pods' agents reach the service there
    assert env["TIDE_AGENT_URL"]["value"] == f"http://{service['name']}.{service['namespace']}.svc"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert env["TIDE_DATA_DIR"]["value"] in mounts and "/tmp" in mounts
    example = yaml.safe_load((K8S / "secret.example.yaml").read_text())
    assert set(example["stringData"]) == {"database-url", "admin-token"}


def test_the_quickstart_database_url_reaches_its_postgres(quickstart: list[dict[str, Any]]) -> None:
    url = by_kind(quickstart, "Secret")["tide"]["stringData"]["database-url"]
    match = re.fullmatch(r"postgresql://(\w+):([\w-]+)@([\w.-]+):(\d+)/(\w+)", url)
    assert match is not None
    user, password, host, port, database = match.groups()
    service = by_kind(quickstart, "Service")["tide-postgres"]
    assert host == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert int(port) == service["spec"]["ports"][0]["port"]
    postgres = by_kind(quickstart, "StatefulSet")["tide-postgres"]["spec"]["template"]["spec"]["containers"][
        0
    ]
    env = {e["name"]: e.get("value") for e in postgres["env"]}
    assert (env["POSTGRES_USER"], env["POSTGRES_DB"]) == (user, database)
    assert by_kind(quickstart, "Secret")["tide-postgres"]["stringData"]["password"] == password


def dockerfile() -> list[tuple[str, str]]:
    text = (ROOT / "deploy" / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_the_image_installs_the_service_without_torch() -> None:
    steps = dockerfile()
    assert steps[0] == ("FROM", "python:3.11-slim")
    installs = [arg for op, arg in steps if op == "RUN" and "pip install" in arg]
    assert installs == ["pip install /src && rm -rf /src"]  # no [train] extra: no torch, no matplotlib
    for op, arg in steps:
        if op == "COPY":
            *sources, _ = arg.split()
            assert all((ROOT / s).exists() for s in sources), arg
    assert ("USER", "10001:10001") in steps and ("ENTRYPOINT", '["tide"]') in steps
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [d for d in dependencies if re.match(r"(torch|matplotlib)\b", d)]
    script = """
import importlib.abc, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("torch", "matplotlib"):
            raise ImportError(f"{name} is not in the image")
sys.meta_path.insert(0, NoTorch())
from pathlib import Path
from api.server.app import build_executor
from api.client.cli.main import main
assert "torch" not in sys.modules and "matplotlib" not in sys.modules
from api.server.settings import Settings
executor = build_executor(Settings(data_dir=Path("."), executor="kubernetes", namespace="tide-jobs"))
print(type(executor).__name__)
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert result.returncode == 0 and result.stdout.strip() == "KubernetesExecutor", result.stderr


def test_compose_runs_tide_with_postgres() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    postgres, tide = compose["services"]["postgres"], compose["services"]["tide"]
    assert postgres["image"].startswith("postgres:")
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    assert tide["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert (ROOT / tide["build"]["context"] / tide["build"]["dockerfile"]).is_file()
    assert "/readyz" in " ".join(tide["healthcheck"]["test"]) and tide["healthcheck"]["test"][0] == "CMD"
    env = tide["environment"]
    assert set(env) <= serve_envvars()
    assert env["TIDE_EXECUTOR"] == "local"
    user, password, db = (
        postgres["environment"][k] for k in ("POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB")
    )
    assert env["TIDE_DATABASE_URL"] == f"postgresql://{user}:{password}@postgres:5432/{db}"
    assert env["TIDE_ADMIN_TOKEN"].startswith("${TIDE_ADMIN_TOKEN:?")  # no default token: compose refuses
    assert any(p.endswith(":8000") for p in tide["ports"])
    assert set(compose["volumes"]) == {"postgres-data", "tide-data"}
