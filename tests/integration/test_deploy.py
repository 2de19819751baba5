"""deploy/: the Kubernetes manifests, the service image and docker-compose.yml, checked offline.

The manifests are rendered with ``kubectl kustomize`` (kubectl 1.24 or later; in CI a missing kubectl is a
failure, not a skip) and every object is validated against the Kubernetes 1.30 JSON schema, strictly
(``kubernetes-validate``). Then what the objects say is checked: RBAC grants exactly the API calls of
``scheduler/executors/``, the Deployment's environment names real ``tide serve`` settings and reads the
Secret's keys, the quick start's database URL reaches its PostgreSQL, Prometheus's documented target
reaches every pod, images are pinned. The quick start of docs/kubernetes.md is run step by step: the
image set as documented reaches every workload; the service started with the rendered Deployment's
environment (a private PostgreSQL started after it, the fake API server for the cluster) waits for its
database, says where its token is at every start, and the documented CLI commands succeed and make the
job's pods. The image installs the package without torch, and the service imports and builds its
kubernetes executor with torch unimportable. docker-compose.yml is parsed: PostgreSQL with a healthcheck,
Tide waiting for it."""

from __future__ import annotations

import base64
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import psycopg
import pytest
import typer
import yaml
from kubefake import FakeKubeApi
from kubefake.harness import wait_for
from pgserver import PrivateServer, find_bindir

from api.client.cli.main import app
from scheduler.elastic.agent.ports import free_port
from scheduler.engine.leader import LEADER_LABEL

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
SCHEMA = "1.30"


def kubectl() -> str:
    """kubectl 1.24 or later (kustomize v4.5+: directories under ``resources:``, components, replacements);
    Debian's ``kubernetes-client`` (1.20, kustomize v2.0.3) is too old for the manifests."""
    found = shutil.which("kubectl")
    if found is None:
        message = "kubectl (1.24 or later) is not installed: it renders the kustomizations"
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
    return found | {"TIDE_ADMIN_TOKEN", "TIDE_METRICS_TOKEN"}  # read by serve itself


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return render(K8S)


def make_quickstart_secrets(deploy: Path) -> None:
    """The quick start's step that makes its secrets, run as documented in a copy of ``deploy/``."""
    line = step("make-secrets")
    assert line == "deploy/k8s/quickstart/make-secrets.sh", line
    subprocess.run([str(deploy.parent / line)], check=True, capture_output=True, cwd=deploy.parent)


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The quick start rendered after its first steps (in a copy: the secrets are written next to it)."""
    copy = tmp_path_factory.mktemp("quickstart")
    shutil.copytree(ROOT / "deploy", copy / "deploy", ignore=shutil.ignore_patterns("secrets"))
    make_quickstart_secrets(copy / "deploy")
    return render(copy / "deploy" / "k8s" / "quickstart")


@pytest.fixture(scope="module")
def example() -> list[dict[str, Any]]:
    return render(K8S / "overlays" / "example")


def unhashed(name: str) -> str:
    return re.sub(r"-[a-z0-9]{10}$", "", name)  # a generated ConfigMap's content hash


def test_every_object_is_valid_kubernetes(
    base: list[dict[str, Any]], quickstart: list[dict[str, Any]], example: list[dict[str, Any]]
) -> None:
    secret = yaml.safe_load((K8S / "secret.example.yaml").read_text())
    for obj in [*base, *quickstart, *example, secret]:
        kubernetes_validate.validate(obj, SCHEMA, strict=True)
    kinds = sorted(
        (o["kind"], o["metadata"].get("namespace", ""), unhashed(o["metadata"]["name"])) for o in base
    )
    assert kinds == [
        ("ClusterRole", "", "tide-read-cluster"),
        ("ClusterRoleBinding", "", "tide-read-cluster"),
        ("ConfigMap", "tide", "tide"),
        ("Deployment", "tide", "tide"),
        ("Namespace", "", "tide"),
        ("Namespace", "", "tide-jobs"),
        ("PodDisruptionBudget", "tide", "tide"),
        ("Role", "tide", "tide-leader"),
        ("Role", "tide-jobs", "tide-jobs"),
        ("RoleBinding", "tide", "tide-leader"),
        ("RoleBinding", "tide-jobs", "tide-jobs"),
        ("Service", "tide", "tide"),
        ("Service", "tide", "tide-metrics"),
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
    assert {unhashed(o["metadata"]["name"]) for o in example} == {
        unhashed(o["metadata"]["name"]) for o in base
    } | {"acme-tide", "acme-jobs"}  # the same objects; the two Namespaces renamed


VERBS = {
    "list": "list",
    "read": "get",
    "create": "create",
    "delete": "delete",
    "replace": "update",
    "patch": "patch",
}
RESOURCES = {
    "lease": "leases",
    "pod_log": "pods/log",
    "pod": "pods",
    "service": "services",
    "secret": "secrets",
    "node": "nodes",
    "event": "events",
    "network_policy": "networkpolicies",
}
GROUPS = {"networkpolicies": "networking.k8s.io"}  # the rest: the core group ""
CALL = re.compile(
    r"\.(list|read|create|delete|replace|patch)_(namespaced_)?(pod_log|pod|service|secret|node|event|network_policy|lease)"
    r"(_for_all_namespaces)?\b"
)
WATCHED = re.compile(
    r"Reflector\(\s*[^)]*?\.list_(namespaced_)?(pod_log|pod|service|secret|node|event)(_for_all_namespaces)?"
    r"( if [^,]*)?,",
    re.DOTALL,
)
CLUSTER_SCOPED = {"nodes"}  # resources that have no namespace: their calls need a ClusterRole
LEADER_SOURCE = ROOT / "scheduler" / "engine" / "leader.py"  # its calls are in the service's own namespace


def api_calls(
    paths: list[Path] | None = None,
) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """The verbs per resource of every API call in ``paths`` (scheduler/executors/ unless given; watches:
    the Reflector's), and those of them that reach beyond one namespace (a cluster-scoped resource, or
    ``_for_all_namespaces``)."""
    calls: dict[str, set[str]] = {}
    cluster: dict[str, set[str]] = {}
    for path in paths or list((ROOT / "scheduler" / "executors").rglob("*.py")):
        source = path.read_text()
        found = [(VERBS[verb], resource, every) for verb, _, resource, every in CALL.findall(source)]
        found += [("watch", resource, every) for _, resource, every, _ in WATCHED.findall(source)]
        for verb, resource, every in found:
            calls.setdefault(RESOURCES[resource], set()).add(verb)
            if every or RESOURCES[resource] in CLUSTER_SCOPED:
                cluster.setdefault(RESOURCES[resource], set()).add(verb)
    return calls, cluster


def test_rbac_grants_exactly_the_calls_the_leader_election_makes(base: list[dict[str, Any]]) -> None:
    """In the service's own namespace: its Lease and its own pod's label (scheduler/engine/leader.py)."""
    role = by_kind(base, "Role")["tide-leader"]
    assert role["metadata"]["namespace"] == by_kind(base, "Deployment")["tide"]["metadata"]["namespace"]
    granted: dict[str, set[str]] = {}
    for rule in role["rules"]:
        assert rule["apiGroups"] == (["coordination.k8s.io"] if rule["resources"] == ["leases"] else [""])
        for resource in rule["resources"]:
            granted.setdefault(resource, set()).update(rule["verbs"])
    calls, cluster = api_calls([LEADER_SOURCE])
    assert granted == calls == {"leases": {"create", "get", "update"}, "pods": {"patch"}}
    assert cluster == {}
    assert by_kind(base, "RoleBinding")["tide-leader"]["roleRef"]["name"] == "tide-leader"


def test_rbac_grants_exactly_the_calls_the_executor_makes(base: list[dict[str, Any]]) -> None:
    granted: dict[str, set[str]] = {}
    roles = [r for name, r in by_kind(base, "Role").items() if name != "tide-leader"]
    for role in [*roles, *by_kind(base, "ClusterRole").values()]:
        for rule in role["rules"]:
            for resource in rule["resources"]:
                assert rule["apiGroups"] == [GROUPS.get(resource, "")], rule
                granted.setdefault(resource, set()).update(rule["verbs"])
    calls, cluster = api_calls()
    assert calls["pods"] >= {"create", "delete", "list", "watch"} and calls["nodes"] >= {"list", "watch"}
    assert granted == calls
    cluster_wide: dict[str, set[str]] = {}
    for role in by_kind(base, "ClusterRole").values():
        for rule in role["rules"]:
            for resource in rule["resources"]:
                cluster_wide.setdefault(resource, set()).update(rule["verbs"])
    # nodes, and the pods of every namespace (GPUs other workloads hold), read only; the rest in the jobs
    # namespace only
    assert cluster_wide == cluster == {"nodes": {"list", "watch"}, "pods": {"list", "watch"}}
    subject = {"kind": "ServiceAccount", "name": "tide", "namespace": "tide"}
    for binding in [*by_kind(base, "RoleBinding").values(), *by_kind(base, "ClusterRoleBinding").values()]:
        assert binding["subjects"] == [subject]
    assert "*" not in yaml.safe_dump(by_kind(base, "Role")) + yaml.safe_dump(by_kind(base, "ClusterRole"))


def test_the_rbac_table_of_the_docs_is_the_manifests(base: list[dict[str, Any]]) -> None:
    docs = (ROOT / "docs" / "kubernetes.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| `deploy/k8s/base/rbac.yaml`"))
    for role in [*by_kind(base, "Role").values(), *by_kind(base, "ClusterRole").values()]:
        for rule in role["rules"]:
            for resource in rule["resources"]:
                assert f"{resource} {'/'.join(sorted(rule['verbs']))}" in row, (resource, row)


def test_the_documented_clusterrole_for_project_namespaces_is_the_jobs_role(
    base: list[dict[str, Any]],
) -> None:
    docs = (ROOT / "docs" / "kubernetes.md").read_text()
    section = docs.split("\n## Tenancy: namespaces per project, TLS\n", 1)[1].split("\n## ", 1)[0]
    (role,) = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", section, re.DOTALL)]
    kubernetes_validate.validate(role, SCHEMA, strict=True)
    assert role["kind"] == "ClusterRole"
    assert role["rules"] == by_kind(base, "Role")["tide-jobs"]["rules"]
    binding = next(line for line in section.splitlines() if "create rolebinding" in line)
    assert f"--clusterrole={role['metadata']['name']}" in binding and "--serviceaccount=tide:tide" in binding


def test_the_deployment_runs_the_kubernetes_executor_in_the_jobs_namespace(
    base: list[dict[str, Any]],
) -> None:
    pod = by_kind(base, "Deployment")["tide"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "tide" and pod["securityContext"]["runAsNonRoot"] is True
    container = pod["containers"][0]
    raw = {e["name"]: e for e in container["env"]}
    env = container_env(base, "tide")
    downward = {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}  # leader election's
    assert {n: raw[n]["valueFrom"]["fieldRef"]["fieldPath"] for n in downward} == downward
    assert (set(env) | set(raw)) - set(downward) <= serve_envvars()  # every other is a `tide serve` setting
    assert env["TIDE_EXECUTOR"] == "kubernetes"
    assert env["TIDE_NAMESPACE"] == by_kind(base, "Role")["tide-jobs"]["metadata"]["namespace"]
    assert raw["TIDE_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "tide", "key": "database-url"}
    assert raw["TIDE_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "tide", "key": "admin-token"}
    assert raw["TIDE_METRICS_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "metrics-token"
    assert float(env["TIDE_GRACE_PERIOD"]) >= 35  # torchrun's shutdown timeout (30 s) + 5 s
    service = by_kind(base, "Service")["tide"]["metadata"]  # job pods' agents reach the service there
    assert env["TIDE_AGENT_URL"] == f"http://{service['name']}.{service['namespace']}.svc"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    startup = container["startupProbe"]  # a pod waiting for its database is not killed meanwhile
    assert startup["periodSeconds"] * startup["failureThreshold"] > float(env["TIDE_DATABASE_WAIT"]) + 30
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert env["TIDE_DATA_DIR"] in mounts and "/tmp" in mounts
    example = yaml.safe_load((K8S / "secret.example.yaml").read_text())
    assert set(example["stringData"]) == {"database-url", "admin-token", "metrics-token"}


def test_two_replicas_spread_and_budgeted_and_the_service_routes_to_the_leader(
    base: list[dict[str, Any]], example: list[dict[str, Any]], quickstart: list[dict[str, Any]]
) -> None:
    """HA: two pods on different nodes where possible, one evicted at a time, a new one up before an old one
    stops; the API's Service selects the leader's label (scheduler/engine/leader.py sets it); every replica
    reads the one admin token (required: a pod without it would generate its own)."""
    for objects in (base, example):
        deployment = by_kind(objects, "Deployment")["tide"]
        spec, pod = deployment["spec"], deployment["spec"]["template"]["spec"]
        assert spec["replicas"] == 2 and spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
        labels = spec["template"]["metadata"]["labels"]
        [spread] = pod["topologySpreadConstraints"]
        assert (
            spread["topologyKey"] == "kubernetes.io/hostname"
            and spread["labelSelector"]["matchLabels"] == labels
        )
        budget = by_kind(objects, "PodDisruptionBudget")["tide"]
        assert budget["spec"]["maxUnavailable"] == 1 and budget["spec"]["selector"]["matchLabels"] == labels
        selector = by_kind(objects, "Service")["tide"]["spec"]["selector"]
        assert selector == {**labels, LEADER_LABEL: "true"}
        assert by_kind(objects, "Service")["tide-metrics"]["spec"]["selector"] == labels  # every pod
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert "optional" not in env["TIDE_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]
    quick = by_kind(quickstart, "Deployment")["tide"]  # the demo: one pod that generates its token
    env = {e["name"]: e for e in quick["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert quick["spec"]["replicas"] == 1 and env["TIDE_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"]
    assert "two pods would each generate their own" in (K8S / "quickstart" / "kustomization.yaml").read_text()


def wiring(objects: list[dict[str, Any]]) -> tuple[str, str]:
    """The service's and the jobs' namespaces, once every reference between them is checked."""
    deployment = by_kind(objects, "Deployment")["tide"]
    service_ns = deployment["metadata"]["namespace"]
    env = container_env(objects, "tide")
    jobs_ns = env["TIDE_NAMESPACE"]
    assert by_kind(objects, "ServiceAccount")["tide"]["metadata"]["namespace"] == service_ns
    for name, obj in {**by_kind(objects, "Service"), **by_kind(objects, "ConfigMap")}.items():
        assert obj["metadata"]["namespace"] == service_ns, name
    for kind in ("Role", "RoleBinding"):
        assert by_kind(objects, kind)["tide-jobs"]["metadata"]["namespace"] == jobs_ns
    for kind, name in (("RoleBinding", "tide-jobs"), ("ClusterRoleBinding", "tide-read-cluster")):
        assert by_kind(objects, kind)[name]["subjects"] == [
            {"kind": "ServiceAccount", "name": "tide", "namespace": service_ns}
        ]
    assert env["TIDE_AGENT_URL"] == f"http://tide.{service_ns}.svc"
    assert set(by_kind(objects, "Namespace")) == {service_ns, jobs_ns}
    return service_ns, jobs_ns


def test_the_namespaces_are_wired_in_every_kustomization(
    base: list[dict[str, Any]], quickstart: list[dict[str, Any]], example: list[dict[str, Any]]
) -> None:
    assert wiring(base) == wiring(quickstart) == ("tide", "tide-jobs")
    assert wiring(example) == ("acme-tide", "acme-jobs")
    env = container_env(example, "tide")  # the overlay's settings merged over the base's
    assert (env["TIDE_LOG_FORMAT"], env["TIDE_GRACE_PERIOD"], env["TIDE_EXECUTOR"]) == (
        "json",
        "60",
        "kubernetes",
    )
    deployment = by_kind(example, "Deployment")["tide"]
    assert deployment["spec"]["replicas"] == 2
    assert workload_images(example) == {"tide": {"registry.example/tide-scheduler:0.1.0"}}


def test_a_namespace_overlay_of_the_service_renders(tmp_path: Path) -> None:
    """`namespace:` over base/ renames its one Namespace (two used to collide: "ID conflict")."""
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"namespace": "acme", "resources": [os.path.relpath(K8S / "base", tmp_path)]})
    )
    objects = render(tmp_path)
    assert set(by_kind(objects, "Namespace")) == {"acme"}
    assert {
        o["metadata"]["namespace"]
        for o in objects
        if o["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding")
    } == {"acme"}


def test_every_setting_is_documented(example: list[dict[str, Any]]) -> None:
    docs = (ROOT / "docs" / "kubernetes.md").read_text()
    section = docs.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(TIDE_\w+)` \|", section, re.MULTILINE))
    keys = set(by_kind(example, "ConfigMap")[next(iter(by_kind(example, "ConfigMap")))]["data"])
    assert keys == documented  # the example overlay sets every knob the table lists
    elsewhere = {"TIDE_HOST", "TIDE_PORT", "TIDE_DATA_DIR", "TIDE_DATABASE_URL", "TIDE_ADMIN_TOKEN"}
    elsewhere |= {"TIDE_METRICS_TOKEN", "TIDE_KUBECONFIG", "TIDE_NODES", "TIDE_GPUS_PER_NODE"}
    elsewhere |= {"TIDE_NODES_PER_DOMAIN", "TIDE_TLS_CERT", "TIDE_TLS_KEY"}
    assert serve_envvars() == documented | elsewhere
    for name in elsewhere:
        assert f"`{name}`" in section, name


def test_the_example_serves_https_through_an_ingress_with_a_managed_certificate(
    example: list[dict[str, Any]],
) -> None:
    ingress = by_kind(example, "Ingress")["tide"]
    service = by_kind(example, "Service")["tide"]
    assert ingress["metadata"]["namespace"] == service["metadata"]["namespace"] == "acme-tide"
    assert "cert-manager.io/cluster-issuer" in ingress["metadata"]["annotations"]
    (tls,) = ingress["spec"]["tls"]
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] in tls["hosts"] and tls["secretName"]
    (path,) = rule["http"]["paths"]
    backend = path["backend"]["service"]
    assert backend["name"] == "tide" and backend["port"]["name"] in {
        p["name"] for p in service["spec"]["ports"]
    }
    assert path["path"] == "/" and path["pathType"] == "Prefix"


def test_prometheus_scrapes_every_pod_where_the_docs_say(base: list[dict[str, Any]]) -> None:
    docs = (ROOT / "docs" / "observability.md").read_text()
    configs = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", docs, re.DOTALL)]
    kube = [c for c in configs if "dns_sd_configs" in str(c)]
    assert len(kube) == 1
    target = kube[0]["scrape_configs"][0]["dns_sd_configs"][0]
    name, namespace, _ = target["names"][0].split(".")
    service = by_kind(base, "Service")[name]
    assert service["metadata"]["namespace"] == namespace
    assert service["spec"]["clusterIP"] == "None"  # one target per pod, leader and standbys
    port = service["spec"]["ports"][0]
    container = by_kind(base, "Deployment")["tide"]["spec"]["template"]["spec"]["containers"][0]
    container_port = {p["name"]: p["containerPort"] for p in container["ports"]}[port["targetPort"]]
    assert target["port"] == port["port"] == container_port
    assert (
        service["spec"]["selector"] == by_kind(base, "Deployment")["tide"]["spec"]["selector"]["matchLabels"]
    )


def test_the_jobs_namespace_has_pod_security_labels(base: list[dict[str, Any]]) -> None:
    labels = {name: o["metadata"]["labels"] for name, o in by_kind(base, "Namespace").items()}
    assert labels["tide"]["pod-security.kubernetes.io/enforce"] == "restricted"
    # job pods run their images' users (often root): baseline, never privileged or on the host
    assert labels["tide-jobs"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["tide-jobs"]["pod-security.kubernetes.io/audit"] == "restricted"


def test_every_image_is_pinned(quickstart: list[dict[str, Any]]) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    images = [i for found in workload_images(quickstart).values() for i in found]
    images += [s["image"] for s in compose["services"].values()]
    for image in images:
        tag = image.rpartition(":")[2]
        assert re.fullmatch(r"\d+\.\d+(\.\d+)?(-\w+)?", tag), (
            f"{image}: pin a full version, not a floating tag"
        )


def secret_data(obj: dict[str, Any]) -> dict[str, str]:
    """A Secret's keys and values: ``data`` decoded, ``stringData`` as written."""
    decoded = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
    return decoded | dict(obj.get("stringData") or {})


def test_the_quickstart_database_url_reaches_its_postgres(quickstart: list[dict[str, Any]]) -> None:
    url = secret_data(by_kind(quickstart, "Secret")["tide"])["database-url"]
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
    assert secret_data(by_kind(quickstart, "Secret")["tide-postgres"])["password"] == password
    assert len(password) >= 32  # generated: openssl rand -hex 24


def test_no_password_of_the_quick_start_is_committed(tmp_path: Path) -> None:
    for path in (K8S / "quickstart").glob("*.yaml"):
        for obj in yaml.safe_load_all(path.read_text()):
            if obj and obj.get("kind") == "Secret":
                raise AssertionError(f"{path} commits a Secret")
    assert "deploy/k8s/quickstart/secrets/" in (ROOT / ".gitignore").read_text().splitlines()
    result = subprocess.run([kubectl(), "kustomize", str(K8S / "quickstart")], capture_output=True, text=True,
                            check=False, cwd=tmp_path)  # fmt: skip
    if not (K8S / "quickstart" / "secrets").exists():  # the step not run: kustomize says what is missing
        assert result.returncode != 0 and "postgres.env" in result.stderr
    passwords = set()
    for run in ("one", "two"):
        shutil.copytree(ROOT / "deploy", tmp_path / run / "deploy", ignore=shutil.ignore_patterns("secrets"))
        make_quickstart_secrets(tmp_path / run / "deploy")
        made = tmp_path / run / "deploy" / "k8s" / "quickstart" / "secrets"
        passwords.add((made / "postgres.env").read_text())
        assert (made / "postgres.env").stat().st_mode & 0o777 == 0o600
    assert len(passwords) == 2  # random: every quick start its own
    before = (made / "tide.env").read_text()
    make_quickstart_secrets(tmp_path / "two" / "deploy")  # run again: kept (the database has that password)
    assert (made / "tide.env").read_text() == before


def dockerfile() -> list[tuple[str, str]]:
    text = (ROOT / "deploy" / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_the_image_installs_the_service_without_torch() -> None:
    steps = dockerfile()
    starts = [i for i, (op, _) in enumerate(steps) if op == "FROM"]
    assert len(starts) == 2, starts  # a builder, and the image that runs
    builder, final = steps[starts[0] : starts[1]], steps[starts[1] :]
    base, _, name = builder[0][1].partition(" AS ")
    assert name == "builder" and final[0] == ("FROM", base)
    # pinned by digest (and a full version for people): a rebuild gets the same base
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+@sha256:[0-9a-f]{64}", base), base
    installs = [arg for op, arg in builder if op == "RUN" and "pip install" in arg]
    assert len(installs) == 1 and "pip install /src " in installs[0]  # no [train] extra: no torch
    assert "uninstall -y pip setuptools wheel" in installs[0]
    assert not [arg for op, arg in final if "pip install" in arg]  # nothing is built or installed there
    assert any(op == "RUN" and "pip uninstall -y pip setuptools wheel" in arg for op, arg in final)
    assert ("COPY", "--from=builder /opt/tide /opt/tide") in final
    for op, arg in builder:
        if op == "COPY":
            *sources, _ = arg.split()
            assert all((ROOT / s).exists() for s in sources), arg
    assert ("USER", "10001:10001") in final and ("ENTRYPOINT", '["tide"]') in final
    env = next(arg for op, arg in final if op == "ENV")
    assert "PATH=/opt/tide/bin:$PATH" in env.split()
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


# The quick start of docs/kubernetes.md, step by step, as far as a machine without a cluster allows.


def quick_start() -> list[str]:
    """The command lines of docs/kubernetes.md's quick start (its first block), in order."""
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```\n", 2)[1]
    return [line.strip() for line in block.splitlines() if line.strip()]


def step(*words: str) -> str:
    """The quick start's one command line that holds every one of ``words``."""
    found = [line for line in quick_start() if all(w in line for w in words)]
    assert len(found) == 1, (words, found)
    return found[0]


def set_image(directory: Path, argument: str) -> None:
    """``kustomize edit set image NAME=NEW:TAG`` in ``directory``: kustomize itself where installed, else
    the ``images:`` entry it writes (kubectl has no ``edit``; no standalone kustomize here)."""
    found = shutil.which("kustomize")
    if found is not None:
        subprocess.run([found, "edit", "set", "image", argument], cwd=directory, check=True)
        return
    name, _, new = argument.partition("=")
    new_name, _, tag = new.rpartition(":")
    path = directory / "kustomization.yaml"
    document = yaml.safe_load(path.read_text())
    document.setdefault("images", []).append({"name": name, "newName": new_name, "newTag": tag})
    path.write_text(yaml.safe_dump(document))


def workload_images(objects: list[dict[str, Any]]) -> dict[str, set[str]]:
    kinds = ("Deployment", "StatefulSet", "DaemonSet", "Job")
    return {
        o["metadata"]["name"]: {c["image"] for c in o["spec"]["template"]["spec"]["containers"]}
        for o in objects
        if o["kind"] in kinds
    }


def test_the_image_set_as_documented_reaches_every_tide_workload(tmp_path: Path) -> None:
    line = step("kustomize edit set image")
    match = re.fullmatch(r"cd (\S+) && kustomize edit set image (\S+) && cd -", line)
    assert match is not None, line
    directory, argument = match.groups()
    shutil.copytree(ROOT / "deploy", tmp_path / "deploy", ignore=shutil.ignore_patterns("secrets"))
    set_image(tmp_path / directory, argument)
    make_quickstart_secrets(tmp_path / "deploy")
    applied = step("kubectl apply -k").split()[-1]
    for path in (tmp_path / "deploy" / "k8s", tmp_path / applied):
        images = workload_images(render(path))
        images.pop("tide-postgres", None)  # the demo database's own image
        assert images == {"tide": {"REGISTRY/tide-scheduler:0.1.0"}}, (path, images)


def container_env(objects: list[dict[str, Any]], deployment: str) -> dict[str, str]:
    """The environment Kubernetes gives the Deployment's container: ConfigMaps, Secrets (those rendered),
    the Downward API's namespace, ``$(VAR)`` expanded."""
    workload = by_kind(objects, "Deployment")[deployment]
    container = workload["spec"]["template"]["spec"]["containers"][0]
    data = {
        name: secret_data(o) if o["kind"] == "Secret" else {**o.get("data", {})}
        for o in objects
        if o["kind"] in ("ConfigMap", "Secret")
        for name in [o["metadata"]["name"]]
    }
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(data[source["configMapRef"]["name"]])
    for item in container["env"]:
        ref = item.get("valueFrom", {})
        if "value" in item:
            env[item["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], item["value"])
        elif ref.get("fieldRef", {}).get("fieldPath") == "metadata.name":
            continue  # the pod's name: none outside a pod (the leader then labels no pod)
        elif "secretKeyRef" in ref:
            key = ref["secretKeyRef"]
            if key["name"] not in data:
                continue  # a Secret the kustomization expects rather than makes (base/)
            if key["key"] in data[key["name"]] or not key.get("optional"):
                env[item["name"]] = data[key["name"]][key["key"]]
        else:
            assert ref["fieldRef"]["fieldPath"] == "metadata.namespace", item
            env[item["name"]] = workload["metadata"]["namespace"]
    return env


class Served:
    """``tide ARGS`` as the container runs it (ENTRYPOINT ``tide``), its output collected as it comes."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        argv = [sys.executable, "-m", "api.client.cli.main", *args]
        self.process = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def said(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def stop(self) -> str:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)
        self.reader.join(timeout=10)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return "\n".join(self.lines)


def ready(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture
def unstarted_pg() -> Iterator[PrivateServer]:
    bindir = find_bindir()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but no PostgreSQL server binaries (initdb, pg_ctl) were found")
        pytest.skip("no PostgreSQL server binaries here (set TIDE_TEST_PG_BINDIR)")
    server = PrivateServer(bindir).init()  # initialised, not started: Tide starts first
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def fake_cluster() -> Iterator[FakeKubeApi]:
    fake = FakeKubeApi().start()
    fake.add_node("gpu-0", 2)
    fake.add_node("gpu-1", 2)
    yield fake
    fake.stop()


def quick_start_env(
    quickstart: list[dict[str, Any]], tmp_path: Path, pg: PrivateServer, cluster: FakeKubeApi
) -> tuple[dict[str, str], Path]:
    """The rendered Deployment's environment with what differs on this machine: the database's host and
    port (the quick start's user, password and database stay), the address (loopback, a free port), the
    data directory, and a kubeconfig for the fake API server instead of the pod's service account."""
    env = container_env(quickstart, "tide")
    env["TIDE_DATABASE_URL"] = re.sub(r"@[\w.-]+:\d+/", f"@127.0.0.1:{pg.port}/", env["TIDE_DATABASE_URL"])
    data = tmp_path / env["TIDE_DATA_DIR"].strip("/")
    env.update(
        TIDE_HOST="127.0.0.1",
        TIDE_PORT=str(free_port()),
        TIDE_DATA_DIR=str(data),
        TIDE_KUBECONFIG=str(cluster.kubeconfig(tmp_path / "kubeconfig")),
    )
    return outside(tmp_path / "service") | env, data


def outside(home: Path) -> dict[str, str]:
    """This process's environment without Tide's or Kubernetes' variables, its config and data under
    ``home``: a `tide` command finds no server or token but what it is given and saves."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("TIDE_", "KUBE", "XDG_"))}
    return kept | {"XDG_CONFIG_HOME": str(home / "config"), "XDG_DATA_HOME": str(home / "data")}


def create_the_quick_start_database(pg: PrivateServer, url: str) -> None:
    """What the postgres image does with POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB."""
    user, password, database = re.fullmatch(r"postgresql://(\w+):([\w-]+)@[\w.:-]+/(\w+)", url).groups()  # type: ignore[union-attr]
    conninfo = pg.url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {user} LOGIN PASSWORD '{password}'")
        conn.execute(f"CREATE DATABASE {database} OWNER {user}")


@pytest.mark.slow
@pytest.mark.postgres
def test_the_quick_start_as_written(
    quickstart: list[dict[str, Any]], tmp_path: Path, unstarted_pg: PrivateServer, fake_cluster: FakeKubeApi
) -> None:
    assert step("kubectl apply -k") == "kubectl apply -k deploy/k8s/quickstart"
    assert step("rollout status") == "kubectl -n tide rollout status deploy/tide --timeout=5m"
    deployment = by_kind(quickstart, "Deployment")["tide"]
    assert deployment["metadata"]["namespace"] == "tide"
    env, data = quick_start_env(quickstart, tmp_path, unstarted_pg, fake_cluster)
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    url = f"http://127.0.0.1:{env['TIDE_PORT']}"
    probe = deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"]

    # PostgreSQL and Tide start together: Tide waits for the database instead of exiting
    first = Served(args, env)
    try:
        wait_for(lambda: first.said("the database does not answer yet (try 2"), timeout=60, what="retries")
        assert first.process.poll() is None
        unstarted_pg.start()
        create_the_quick_start_database(unstarted_pg, container_env(quickstart, "tide")["TIDE_DATABASE_URL"])
        wait_for(lambda: ready(url + probe), timeout=90, what="Tide ready once PostgreSQL is")
    finally:
        output = first.stop()
    stored = f"stored in {data / 'admin-token'}"
    assert f"(generated now; {stored})" in output, output

    # the token step: the file the log names, read as the docs say
    rendered_data = container_env(quickstart, "tide")["TIDE_DATA_DIR"]
    assert step("admin-token") == f"kubectl -n tide exec deploy/tide -- cat {rendered_data}/admin-token"
    token = (data / "admin-token").read_text().strip()

    # a restart (the container restarted in the same pod): the log still says where the token is
    second = Served(args, env)
    try:
        wait_for(lambda: ready(url + probe), timeout=90, what="Tide ready after a restart")
        assert second.said(f"Admin token:   {stored}"), second.lines
        assert (data / "admin-token").read_text().strip() == token

        forward = step("port-forward")
        assert forward == "kubectl -n tide port-forward svc/tide 8000:80 &"
        service = by_kind(quickstart, "Service")["tide"]["spec"]["ports"][0]
        assert (service["port"], service["targetPort"]) == (80, "http")
        for line in quick_start():
            if not line.startswith("tide "):
                continue
            argv = shlex.split(line.replace("http://127.0.0.1:8000", url).replace("TOKEN", token))
            result = subprocess.run(
                [sys.executable, "-m", "api.client.cli.main", *argv[1:]],
                env=outside(tmp_path / "user"),  # the user's machine: what `tide login` saves, nothing else
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert result.returncode == 0, (line, result.stdout, result.stderr)
        pods = step("get pods")
        assert pods == "kubectl -n tide-jobs get pods -l tide.dev/job=train"
        namespace, selector = pods.split()[2], pods.split()[-1]
        wait_for(
            lambda: len(fake_cluster.pods(namespace, selector)) == 4, timeout=60, what="4 pods of the job"
        )
    finally:
        second.stop()
