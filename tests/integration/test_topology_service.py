"""Topology domains (R17) through the service: the local executor's virtual nodes in domains
(``tide serve --nodes-per-domain``), a job that requires one domain (REST ``topology``, CLI ``--topology``),
and where its replicas land.

Story: four 2-GPU nodes in two racks of two. Team a runs a 1-GPU job, so one rack has 3 GPUs free and the
other 4. A 4-replica gang that requires one rack starts whole in the free rack; a 5-replica one waits,
saying that no rack has room; a job with a topology the API does not know is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from servicekit import ADMIN, wait_for
from test_cli_commands import cli_bridge, tide

from api.server.parts import resolve_nodes
from api.server.settings import Settings


def _job(name: str) -> dict[str, object]:
    return json.loads(tide("describe", "job", name, "-p", "a", "--json").output)


def test_a_job_that_requires_one_rack_starts_inside_one_and_says_why_it_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cli_bridge(tmp_path, monkeypatch, nodes=4, gpus_per_node=2, nodes_per_domain=2) as bridge:
        assert tide("project", "create", "a", "--deserved", "8").exit_code == 0
        listing = tide("node", "list").output
        assert "DOMAIN" in listing and "domain-0" in listing and "domain-1" in listing
        tide("submit-dist", "pytorch", "--name", "one", "-p", "a", "--", "sleep", "100")
        wait_for(lambda: _job("one")["status"] == "running", what="one to run")
        out = tide(
            "submit-dist", "pytorch", "--name", "gang", "-p", "a", "--workers", "3", "--topology", "required",
            "--", "sleep", "100",
        )  # fmt: skip
        assert out.exit_code == 0, out.output
        wait_for(lambda: _job("gang")["status"] == "running", what="gang to run")
        gang = _job("gang")
        assert gang["topology"] == "required"
        nodes = {r["node"] for r in gang["replicas"]}
        one_node = _job("one")["replicas"][0]["node"]
        racks = {n: n.split("-")[1] for n in ("node-0", "node-1", "node-2", "node-3")}
        assert len({int(racks[n]) // 2 for n in nodes}) == 1  # one rack ...
        assert int(racks[one_node]) // 2 not in {int(racks[n]) // 2 for n in nodes}  # ... the free one
        assert "Topology:   required" in tide("describe", "job", "gang", "-p", "a").output

        tide("submit-dist", "pytorch", "--name", "wide", "-p", "a", "--workers", "4", "--topology", "required",
             "--", "sleep", "100")  # fmt: skip
        wait_for(
            lambda: "inside one topology domain" in str(_job("wide")["pending_reason"]), what="wide's reason"
        )

        bad = tide("submit-dist", "pytorch", "--name", "x", "-p", "a", "--topology", "rack", "--", "true")
        assert bad.exit_code == 2 and "preferred or required" in bad.output
        with httpx.Client(transport=bridge, base_url="http://tide") as http:
            body = {"name": "y", "command": ["true"], "topology": "sometimes"}
            answer = http.post(
                "/api/v1/projects/a/jobs", json=body, headers={"Authorization": f"Bearer {ADMIN}"}
            )
            assert answer.status_code == 422


def test_nodes_per_domain_groups_the_virtual_nodes_in_order() -> None:
    nodes, _ = resolve_nodes(Settings(nodes=5, gpus_per_node=8, nodes_per_domain=2))
    assert [n.domain for n in nodes] == ["domain-0", "domain-0", "domain-1", "domain-1", "domain-2"]
    plain, _ = resolve_nodes(Settings(nodes=2, gpus_per_node=8))
    assert [n.domain for n in plain] == [None, None]


def test_topology_key_is_for_kubernetes_and_nodes_per_domain_for_virtual_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # the error box on one line
    local = tide("serve", "--data-dir", str(tmp_path), "--topology-key", "rack")
    assert local.exit_code == 2 and "--topology-key only apply to --executor kubernetes" in local.output
    kube = tide("serve", "--data-dir", str(tmp_path), "--executor", "kubernetes", "--nodes-per-domain", "2")
    assert kube.exit_code == 2 and "--nodes-per-domain" in kube.output
