"""The CLI answers in its own words: bad input exits 2, errors name the flags typed, jobs are found in any
project, and the small things a new user trips on (docs/cli.md), through the real app in process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from servicekit import ADMIN, wait_for
from test_cli_commands import _seed, cli_bridge, runner, tide

from api.client.cli import jobs
from api.client.cli.main import app
from api.server.testing import ASGIBridge, local_client


@pytest.fixture
def bridge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ASGIBridge]:
    with cli_bridge(tmp_path, monkeypatch) as bridge:
        yield bridge


MANIFEST = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: echo
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: busybox
              command: [sleep, "100"]
"""


@pytest.mark.usefixtures("bridge")
def test_a_manifest_that_is_not_one_yaml_document_or_nothing_at_all_is_bad_input(tmp_path: Path) -> None:
    _seed()
    unclosed = tmp_path / "bad.yaml"
    unclosed.write_text("metadata: {name: [echo\n")
    result = tide("submit", "-f", str(unclosed), "-p", "team-a")
    assert result.exit_code == 2, result.output
    assert "tide: the body is not valid YAML" in result.output
    two = tmp_path / "two.yaml"
    two.write_text(MANIFEST + "---\n" + MANIFEST)
    result = tide("submit", "-f", str(two), "-p", "team-a")
    assert result.exit_code == 2 and "one PyTorchJob manifest per request; this body has 2" in result.output
    empty = runner.invoke(app, ["submit", "-f", "-", "-p", "team-a"], input="")
    assert empty.exit_code == 2 and "tide: standard input is empty" in empty.output
    fine = runner.invoke(app, ["submit", "-f", "-", "-p", "team-a"], input=MANIFEST)
    assert fine.exit_code == 0 and "Submitted job echo" in fine.output


@pytest.mark.usefixtures("bridge")
def test_list_takes_one_status_and_refuses_two_rather_than_keep_the_last() -> None:
    _seed()
    two = tide("list", "--status", "running", "--status", "pending")
    assert two.exit_code == 2
    assert "tide: --status takes one status, got running, pending" in two.output
    assert tide("list", "--status", "pending", "--status", "pending").exit_code == 0
    unknown = tide("list", "--status", "running", "--status", "done")
    assert unknown.exit_code == 2 and "--status must be one of" in unknown.output


@pytest.mark.usefixtures("bridge")
def test_a_job_is_found_in_any_project_when_the_default_one_has_none() -> None:
    _seed()
    assert tide("project", "create", "team-c", "--deserved", "0").exit_code == 0
    tide("submit-dist", "pytorch", "--name", "big", "-p", "team-b", "--", "sleep", "100")
    assert tide("config", "project", "team-a").exit_code == 0
    found = tide("describe", "job", "big")
    assert found.exit_code == 0, found.output
    assert "Job:        team-b/big" in found.output
    assert tide("describe", "job", "big", "-p", "team-a").exit_code == 3  # -p: only there
    tide("submit-dist", "pytorch", "--name", "big", "-p", "team-c", "--", "sleep", "100")
    two = tide("describe", "job", "big")
    assert two.exit_code == 2
    assert (
        "jobs named 'big' are in projects team-b, team-c (none in the default project team-a)" in two.output
    )
    assert "give -p PROJECT" in two.output
    tide("submit-dist", "pytorch", "--name", "big", "-p", "team-a", "--", "sleep", "100")
    assert "Job:        team-a/big" in tide("describe", "job", "big").output  # the default project first
    unknown = tide("describe", "job", "bgi")
    assert unknown.exit_code == 3 and "no job 'bgi' in any project; did you mean big?" in unknown.output


@pytest.mark.usefixtures("bridge")
def test_errors_name_the_flags_typed_not_the_apis_fields() -> None:
    _seed()
    submit = ("submit-dist", "pytorch", "--name", "x", "-p", "team-a")
    gpus = tide(*submit, "-g", "-1", "--", "true")
    assert gpus.exit_code == 2
    assert "tide: -g/--gpu -1: must be at least 1" in gpus.output and "gpus_per_replica" not in gpus.output
    sizes = tide(*submit, "--workers", "5", "--max-replicas", "2", "--", "true")
    assert sizes.exit_code == 2
    assert "--workers 5 starts 6 replicas (the master and 5 workers), above --max-replicas 2" in sizes.output
    assert "min_replicas" not in sizes.output
    below = tide(*submit, "--workers", "0", "--min-replicas", "2", "--", "true")
    assert (
        below.exit_code == 2
        and "--workers 0 starts 1 replica (the master alone), below --min-replicas 2" in below.output
    )
    year = tide(*submit, "--expected-duration", "400d", "--", "true")
    assert year.exit_code == 2 and "tide: --expected-duration 400d: at most a year (365d)" in year.output
    name = tide(
        "submit-dist", "pytorch", "--name", "Bad", "-p", "team-a", "--priority", "9999999", "--", "true"
    )
    assert "tide: --name: 'Bad' is not a valid name" in name.output
    assert "; --priority 9999999: must be at most 1000000" in name.output
    bounds = tide(*submit, "--min-replicas", "3", "--max-replicas", "2", "--", "true")
    assert bounds.exit_code == 2 and "--min-replicas (3) is above --max-replicas (2)" in bounds.output
    runtime = tide("project", "create", "team-c", "--min-runtime", "45d")
    assert runtime.exit_code == 2
    assert "tide: --min-runtime 45d: must be at most 30d" in runtime.output
    assert "2592000" not in runtime.output and "min_runtime_seconds" not in runtime.output
    limit = tide("project", "update", "team-a", "--limit", "1")
    assert limit.exit_code == 2 and "tide: --limit (1) would be below --deserved (2)" in limit.output
    nowhere = tide("submit-dist", "pytorch", "--name", "x", "-p", "nosuch", "--", "true")
    assert nowhere.exit_code == 3
    assert "see `tide project list`" in nowhere.output and "GET /api" not in nowhere.output


@pytest.mark.usefixtures("bridge")
def test_values_typer_rejects_get_the_same_one_line_message_as_the_ones_tide_checks() -> None:
    for args in (["list", "--limit", "-1"], ["list", "--nope"], ["describe", "job"]):
        result = tide(*args)
        assert result.exit_code == 2, result.output
        lines = result.output.splitlines()
        assert len(lines) == 1 and lines[0].startswith("tide: "), result.output
    limit = tide("list", "--limit", "-1")
    assert "'--limit': -1 is not in the range 0<=x<=10000 (see `tide list --help`)" in limit.output
    assert "tide: --status must be one of" in tide("list", "--status", "done").output
    assert "Usage" in tide("project").output  # a bare group still shows its help


@pytest.mark.usefixtures("bridge")
def test_project_delete_names_its_active_jobs_with_dots_only_when_there_are_more() -> None:
    _seed()
    for name in ("big", "notebook"):
        tide("submit-dist", "pytorch", "--name", name, "-p", "team-b", "--", "sleep", "100")
    two = tide("project", "delete", "team-b")
    assert two.exit_code == 2 and "still has active jobs (big, notebook): delete them first" in two.output
    for name in ("c", "d"):
        tide("submit-dist", "pytorch", "--name", name, "-p", "team-b", "--", "sleep", "100")
    assert "still has active jobs (big, notebook, c, ...)" in tide("project", "delete", "team-b").output


@pytest.mark.usefixtures("bridge")
def test_tokens_are_revoked_and_a_cancel_says_which_token() -> None:
    _seed()
    secret = tide("token", "create", "team-a", "--name", "ci").output.splitlines()[1]
    tide("token", "create", "team-a", "--name", "ci")
    tide("submit-dist", "pytorch", "--name", "t", "-p", "team-a", "--token", secret, "--", "sleep", "100")
    assert tide("delete", "job", "t", "-p", "team-a", "--token", secret).exit_code == 0
    listed = json.loads(tide("list", "--json").output)
    assert listed[0]["message"] == "deleted by project token 'ci' (ID 1)"
    events = tide("events").output
    assert "[]" not in events and "team-a/t  deleted by project token 'ci' (ID 1)" in events
    twice = tide("token", "delete", "team-a", "ci")
    assert twice.exit_code == 2 and "give the ID (1, 2)" in twice.output
    deleted = tide("token", "delete", "team-a", "1")
    assert deleted.exit_code == 0 and "Deleted token ci (ID 1) of project team-a" in deleted.output
    assert tide("list", "--token", secret).exit_code == 5
    assert tide("token", "delete", "team-a", "1").exit_code == 3
    assert tide("token", "delete", "team-a", "ci").exit_code == 0  # the other one, now the only one named so


@pytest.mark.usefixtures("bridge")
def test_config_project_checks_the_project_exists(tmp_path: Path) -> None:
    _seed()
    nosuch = tide("config", "project", "nosuch")
    assert nosuch.exit_code == 3 and "no project named 'nosuch'" in nosuch.output
    assert not (tmp_path / "config" / "tide" / "config.json").exists()
    assert tide("config", "project", "later", "--no-check").exit_code == 0
    assert "later" in tide("config", "show").output


@pytest.mark.usefixtures("bridge")
def test_logs_of_a_pending_job_say_it_is_pending_and_why() -> None:
    _seed()
    tide("submit-dist", "pytorch", "--name", "wide", "-p", "team-a", "-g", "9", "--", "true")
    result = tide("logs", "wide")
    assert result.exit_code == 3
    assert "tide: job team-a/wide is pending, so it has no output yet: " in result.output
    assert "has it started" not in result.output and "--follow` waits for it" in result.output


@pytest.mark.usefixtures("bridge")
def test_describe_quotes_the_command_as_a_shell_would() -> None:
    _seed()
    script = "for i in 1 2 3; do echo $i; done"
    tide("submit-dist", "pytorch", "--name", "loop", "-p", "team-a", "--", "sh", "-c", script, "[x]")
    wait_for(lambda: "loop" in tide("list").output, what="loop to be listed")
    described = tide("describe", "job", "loop")
    assert "Command:    sh -c 'for i in 1 2 3; do echo $i; done' '[x]'" in described.output


def test_logs_follow_waits_for_a_pending_job_to_start(
    bridge: ASGIBridge, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed()
    client = local_client(bridge, ADMIN)
    run = ("submit-dist", "pytorch", "-p", "team-a", "--interactive")
    tide(*run, "--name", "hog", "-g", "2", "--", "sleep", "100")  # all of its quota
    wait_for(lambda: client.job("team-a", "hog").status == "running", what="hog to run")
    tide(*run, "--name", "next", "--", "sleep", "100")
    naps: list[float] = []

    def nap(_: float) -> None:  # first the hog makes room, then the job followed ends
        naps.append(_)
        if len(naps) == 1:
            client.delete_job("team-a", "hog")
            wait_for(lambda: client.job("team-a", "next").status == "running", what="next to run")
        else:
            client.delete_job("team-a", "next")

    monkeypatch.setattr(jobs, "time", SimpleNamespace(sleep=nap))
    followed = tide("logs", "next", "--follow")
    assert followed.exit_code == 0, followed.output
    assert (
        "Job team-a/next is pending: " in followed.output and "Waiting for it to start..." in followed.output
    )
    assert "replica 0 of team-a/next" in followed.output
