"""Tide as a platform team runs it: a real Prometheus scrapes a real ``tide serve``, its recording rules
produce series, its alerts are unit-tested by ``promtool``, and every Grafana panel's query runs.

The rules are ``deploy/prometheus/tide-rules.yaml`` (with ``tide-rules.test.yaml``, promtool's own unit
tests of every alert) and the dashboard is ``deploy/grafana/tide-dashboard.json``. Prometheus and promtool
come from Debian's ``prometheus`` package, installed by the test when missing (``debian.ensure``); where it
cannot be installed the tests are skipped on a developer's machine, and fail when ``CI`` is set.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from debian import ensure
from prometheus_client.parser import text_string_to_metric_families
from servicekit import ADMIN, RunningService, free_port, wait_for
from test_deploy import by_kind, render

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "tide-rules.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "tide-rules.test.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "tide-dashboard.json"
METRICS_TOKEN = "prometheus-scrape-token"
JOB = {"command": ["sleep", "600"]}
# Grafana's own variables, as Grafana substitutes them before it asks Prometheus
GRAFANA_VARIABLES = {"$project": ".*", "$__rate_interval": "1m"}


def _tool(name: str) -> str:
    return str(ensure("prometheus", name))


def _recorded() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["record"] for group in groups for rule in group["rules"] if "record" in rule]


def _panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [
        (panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel["targets"]
    ]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":  # label_values(metric, label): Grafana asks for the metric's series
            metric = re.fullmatch(r"label_values\((\w+), *\w+\)", variable["query"]["query"])
            assert metric, variable
            queries.append((f"variable {variable['name']}", metric.group(1)))
    return queries


def _grafana_to_promql(expr: str) -> str:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"a Grafana variable the test does not know: {expr}"
    return expr


def _names_in(expr: str) -> set[str]:
    """Tide's raw metric names an expression reads (``tide_...``; recording rules are ``tide:...``)."""
    return set(re.findall(r"(?<![\w:])tide_[a-z_]+", expr))


def test_rules_pass_promtool_check_and_unit_tests() -> None:
    promtool = _tool("promtool")
    check = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    tests = subprocess.run(
        [promtool, "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    alerts = {
        rule["alert"]
        for group in yaml.safe_load(RULES.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    assert alerts - tested == set(), "every alert has a promtool unit test"


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """Start a real Prometheus that scrapes ``target`` (host:port) every second and loads Tide's rules;
    give its URL."""
    binary = _tool("prometheus")
    started: list[subprocess.Popen[bytes]] = []

    def start(target: str) -> str:
        port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {
                    "job_name": "tide",
                    "authorization": {"type": "Bearer", "credentials": METRICS_TOKEN},
                    "static_configs": [{"targets": [target]}],
                }
            ],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        with (tmp_path / "prometheus.log").open("wb") as log:
            process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        started.append(process)
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _ready(url), timeout=30, what="Prometheus to answer")
        return url

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=10)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def query(url: str, promql: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10).json()
    assert answer["status"] == "success", f"{promql}: {answer.get('error')}"
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def _values(url: str, promql: str) -> dict[str, float]:
    return {row["metric"].get("project", ""): float(row["value"][1]) for row in query(url, promql)}


def test_prometheus_scrapes_tide_and_every_rule_and_panel_answers(
    make_service: Callable[..., RunningService], prometheus: Callable[[str], str]
) -> None:
    # The seed scenario: a's elastic job borrows all 4 GPUs; then b asks for its 2.
    svc = make_service(None, metrics_token=METRICS_TOKEN)
    client = svc.client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    client.create_project({"name": "b", "deserved_gpus": 2})
    client.submit("a", {"name": "elastic", "workers": 3, "min_replicas": 2, "max_replicas": 4, **JOB})
    client.submit("a", {"name": "huge", "workers": 7, "gpus_per_replica": 1, **JOB})  # 8 replicas: never fit
    url = prometheus(svc.url.removeprefix("http://"))

    wait_for(
        lambda: _values(url, "tide:project_borrowed_gpus").get("a") == 2, timeout=60, what="a to borrow 2"
    )
    assert _values(url, "max by (project) (tide_project_never_fit_gpus)") == {"a": 8, "b": 0}
    assert _values(url, "tide:project_owed_unmet_gpus") == {"a": 0, "b": 0}

    client.submit("b", {"name": "rigid", "workers": 1, **JOB})
    wait_for(
        lambda: _values(url, "tide:project_allocated_gpus") == {"a": 2, "b": 2},
        timeout=60,
        what="b's reclaim",
    )
    wait_for(
        lambda: _values(url, 'sum by (kind) (tide_decisions_total{kind="shrink"})') == {"": 1},
        timeout=30,
        what="the shrink counted",
    )

    # every recording rule produces a series
    def all_recorded() -> bool:
        return all(query(url, name) for name in _recorded())

    wait_for(all_recorded, timeout=60, what="every recording rule to produce a series")
    # the alerts load; none fires in this healthy scenario; the job that can never fit is seen at once (the
    # alert is pending: it fires after 15 minutes). b was below its guarantee while a shrank: that alert
    # went pending and clears once the rules see the reclaim.
    rules = httpx.get(f"{url}/api/v1/rules", timeout=10).json()["data"]["groups"]
    assert all(rule["health"] == "ok" for group in rules for rule in group["rules"]), rules

    def alerts() -> set[tuple[str, str | None, str]]:
        found = httpx.get(f"{url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        return {(a["labels"]["alertname"], a["labels"].get("project"), a["state"]) for a in found}

    wait_for(
        lambda: not any(name == "TideProjectBelowGuarantee" for name, _, _ in alerts()),
        timeout=30,
        what="b's below-guarantee alert to clear after the reclaim",
    )
    now = alerts()
    assert ("TideJobsNeverFit", "a", "pending") in now
    # One shrink over a series a few seconds old extrapolates to a high resize rate, so the storm alert may
    # be pending; its 15 minutes keep it from firing on a blip.
    assert now - {("TideResizeStorm", None, "pending")} == {("TideJobsNeverFit", "a", "pending")}, now

    # every Grafana panel's query runs, and names only what Tide exports or a rule records
    exported = _exported(svc.url)
    recorded = set(_recorded())
    for title, expr in _panel_queries():
        promql = _grafana_to_promql(expr)
        query(url, promql)  # fails on a query Prometheus refuses
        assert _names_in(promql) <= exported, f"{title}: {_names_in(promql) - exported} not exported by Tide"
        assert set(re.findall(r"tide:[\w:]+", promql)) <= recorded, f"{title}: not a recording rule"
    for expr in (rule["query"] for group in rules for rule in group["rules"]):
        assert _names_in(expr) <= exported, f"rule {expr}: {_names_in(expr) - exported} not exported"


def _exported(service_url: str) -> set[str]:
    text = httpx.get(f"{service_url}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30).text
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def test_a_metric_tide_does_not_export_is_caught() -> None:
    """The name check above can fail: a misspelt metric in a panel is not among the exported names."""
    assert _names_in('sum(tide_project_alocated_gpus{project=~".*"}) / tide:cluster_gpus') == {
        "tide_project_alocated_gpus"
    }
    assert _grafana_to_promql("rate(x[$__rate_interval])") == "rate(x[1m])"
    with pytest.raises(AssertionError):
        _grafana_to_promql("x{job=$unknown}")


def test_the_monitoring_component_scrapes_each_pod_once(tmp_path: Path) -> None:
    """The optional ServiceMonitor selects the headless Service `tide-metrics` only (not the API's Service,
    which would hand each scrape to whichever pod it picks), on a port it has, with the metrics token."""
    k8s = ROOT / "deploy" / "k8s"
    base = os.path.relpath(k8s, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [base],
                "components": [f"{base}/components/monitoring"],
            }
        )
    )
    objects = render(tmp_path)
    (monitor,) = by_kind(objects, "ServiceMonitor").values()
    services = by_kind(objects, "Service")
    wanted = monitor["spec"]["selector"]["matchLabels"]
    selected = [
        name for name, s in services.items() if wanted.items() <= s["metadata"].get("labels", {}).items()
    ]
    assert selected == ["tide-metrics"]
    assert services["tide-metrics"]["spec"]["clusterIP"] == "None"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in services["tide-metrics"]["spec"]["ports"]}
    secret = yaml.safe_load((k8s / "secret.example.yaml").read_text())
    credentials = endpoint["authorization"]["credentials"]
    assert credentials["name"] == secret["metadata"]["name"] and credentials["key"] in secret["stringData"]
    assert monitor["metadata"]["namespace"] == secret["metadata"]["namespace"]
