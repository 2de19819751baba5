"""Every ``tide`` command a researcher types, through the real app in process (``ASGIBridge``).

Output is checked for content; exit codes follow docs/cli.md (0 ok, 2 bad input, 3 not found, 4
unreachable, 5 auth).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from click.testing import Result
from servicekit import ADMIN, settings_for, wait_for
from typer.testing import CliRunner

from api.client.cli import admin, context, jobs, target
from api.client.cli.main import app
from api.client.rest import TideClient
from api.server.app import create_app
from api.server.testing import ASGIBridge, local_client

runner = CliRunner()


def tide(*args: str) -> Result:
    return runner.invoke(app, list(args))


@contextmanager
def cli_bridge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **overrides: object) -> Iterator[ASGIBridge]:
    """The app in process (service settings ``overrides``), and the CLI talking to it with the admin token."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("TIDE_DATA_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("TIDE_TOKEN", ADMIN)
    for name in ("TIDE_URL", "TIDE_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    bridge = ASGIBridge(create_app(settings_for(tmp_path, None, **overrides)))
    context.use_client_factory(lambda target: local_client(bridge, target.token))
    try:
        yield bridge
    finally:
        context.use_client_factory(None)
        bridge.close()


@pytest.fixture
def bridge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ASGIBridge]:
    with cli_bridge(tmp_path, monkeypatch) as bridge:
        yield bridge


def _seed() -> None:
    assert tide("project", "create", "team-a", "--deserved", "2").exit_code == 0
    assert tide("project", "create", "team-b", "--deserved", "2").exit_code == 0


@pytest.mark.usefixtures("bridge")
def test_projects_and_departments_round_trip() -> None:
    created = tide("department", "create", "research", "--deserved", "4")
    assert created.exit_code == 0, created.output
    assert "Created department research" in created.output
    result = tide("project", "create", "team-a", "--deserved", "2", "-d", "research")
    assert result.exit_code == 0, result.output
    assert "Created project team-a: deserved 2" in result.output
    listed = tide("project", "list")
    assert "team-a" in listed.output and "research" in listed.output
    as_json = json.loads(tide("project", "list", "--json").output)
    assert as_json[0]["name"] == "team-a" and as_json[0]["deserved_gpus"] == 2
    updated = tide("project", "update", "team-a", "--deserved", "3", "--limit", "4")
    assert "deserved 3" in updated.output and "limit 4" in updated.output
    assert "team-a" in tide("department", "list").output
    assert "deserved 6" in tide("department", "update", "research", "--deserved", "6").output
    assert json.loads(tide("department", "list", "--json").output)[0]["projects"] == ["team-a"]
    assert tide("project", "update", "team-a").exit_code == 2
    assert "Deleted project team-a" in tide("project", "delete", "team-a").output
    assert "Deleted department research" in tide("department", "delete", "research").output
    assert "No projects" in tide("project", "list").output


@pytest.mark.usefixtures("bridge")
def test_server_errors_are_shown_as_written_with_exit_codes() -> None:
    _seed()
    duplicate = tide("project", "create", "team-a", "--deserved", "1")
    assert duplicate.exit_code == 2
    assert "already exists" in duplicate.output or "team-a" in duplicate.output
    assert "Traceback" not in duplicate.output
    missing = tide("project", "delete", "nope")
    assert missing.exit_code == 3 and "nope" in missing.output
    bad = tide("project", "create", "Bad_Name", "--deserved", "1")
    assert bad.exit_code == 2 and "tide:" in bad.output
    wrong = tide("project", "list", "--token", "wrong")
    assert wrong.exit_code == 5 and "tide login" in wrong.output


@pytest.mark.usefixtures("bridge")
def test_submit_list_describe_delete() -> None:
    _seed()
    submitted = tide(
        "submit-dist", "pytorch", "--name", "train", "-p", "team-a", "--workers", "3",
        "--min-replicas", "2", "--max-replicas", "4", "-g", "1", "-e", "LR=0.1",
        "--", "python", "train.py", "--epochs", "3",
    )  # fmt: skip
    assert submitted.exit_code == 0, submitted.output
    assert "Submitted job train to project team-a: 2..4 replicas" in submitted.output
    assert "tide logs train -p team-a --follow" in submitted.output
    wait_for(lambda: "4/2/4" in tide("list").output, what="train to run at 4 replicas")
    listed = tide("list", "-p", "team-a")
    assert "team-a" in listed.output and "train" in listed.output and "running" in listed.output
    jobs = json.loads(tide("list", "--json").output)
    assert jobs[0]["name"] == "train" and jobs[0]["allocated_gpus"] == 4
    described = tide("describe", "job", "train")
    assert described.exit_code == 0, described.output
    assert "team-a/train" in described.output and "python train.py --epochs 3" in described.output
    assert "master" in described.output and "worker" in described.output
    assert "start" in described.output
    assert json.loads(tide("describe", "job", "train", "--json").output)["env_names"] == ["LR"]
    deleted = tide("delete", "job", "train")
    assert deleted.exit_code == 0 and "Deleted job team-a/train" in deleted.output


@pytest.mark.usefixtures("bridge")
def test_a_shrink_is_explained_in_list_describe_and_events(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    _seed()
    tide("submit-dist", "pytorch", "--name", "a", "-p", "team-a", "--workers", "3", "--min-replicas", "1",
         "--", "sleep", "100")  # fmt: skip
    wait_for(lambda: "4/1/4" in tide("list").output, what="a to take the cluster")
    tide("submit-dist", "pytorch", "--name", "b", "-p", "team-b", "--workers", "1", "--", "sleep", "100")
    wait_for(lambda: "2/2/2" in tide("list").output, what="b to get its quota")
    events = tide("events")
    assert "shrink" in events.output and "team-a/a" in events.output
    assert any(e["kind"] == "shrink" for e in json.loads(tide("events", "--json").output))
    cluster = tide("cluster")
    assert "GPUs: 4 total, 4 allocated, 0 free" in cluster.output
    assert "team-b" in cluster.output and "node" in cluster.output.lower()
    assert json.loads(tide("cluster", "--json").output)["total_gpus"] == 4
    for table in (tide("list"), cluster, tide("project", "list")):
        assert "\x1b[" not in table.output  # no colour when not a terminal
        assert max(len(line) for line in table.output.splitlines()) <= 80, table.output
    assert "fair share" in tide("list").output  # a long reason wraps inside its column


@pytest.mark.usefixtures("bridge")
def test_a_job_allowed_powers_of_two_runs_at_two_of_three_free_gpus_and_says_so() -> None:
    """R16: team-b holds 1 of 4 GPUs; train may run at 1, 2 or 4 replicas, so it takes 2 of the 3 free."""
    _seed()
    tide("submit-dist", "pytorch", "--name", "small", "-p", "team-b", "--", "sleep", "100")
    wait_for(lambda: "1/1/1" in tide("list").output, what="small to run")
    submitted = tide(
        "submit-dist", "pytorch", "--name", "train", "-p", "team-a", "--min-replicas", "1", "--max-replicas", "4",
        "--allowed-replicas", "powers-of-two", "--", "sleep", "100",
    )  # fmt: skip
    assert submitted.exit_code == 0, submitted.output
    assert "1..4 (only 1, 2, 4) replicas" in submitted.output
    wait_for(lambda: "2/1/4" in tide("list").output, what="train to run at 2 replicas")
    described = tide("describe", "job", "train")
    assert "Sizes:      only 1, 2, 4 replicas" in described.output
    assert "allowed sizes 1, 2, 4" in described.output  # why it does not take the third free GPU
    odd = tide("submit-dist", "pytorch", "--name", "odd", "-p", "team-a", "--min-replicas", "2", "--max-replicas",
               "7", "--allowed-replicas", "step:2", "--", "true")  # fmt: skip
    assert odd.exit_code == 2 and "--max-replicas (7) is not" in odd.output and "2, 4, 6" in odd.output
    typo = tide(
        "submit-dist", "pytorch", "--name", "x", "-p", "team-a", "--allowed-replicas", "1,two", "--", "true"
    )
    assert typo.exit_code == 2 and "1,2,4,8, or step:N, or powers-of-two" in typo.output


@pytest.mark.usefixtures("bridge")
def test_unknown_job_suggests_close_names_and_bad_input_is_refused() -> None:
    _seed()
    tide("submit-dist", "pytorch", "--name", "train-big", "-p", "team-a", "--", "sleep", "100")
    unknown = tide("describe", "job", "train-bgi")
    assert unknown.exit_code == 3
    assert "did you mean train-big" in unknown.output
    assert tide("logs", "nope").exit_code == 3
    no_args = tide("submit-dist", "pytorch", "--name", "x", "-p", "team-a")
    assert no_args.exit_code == 2 and "after --" in no_args.output
    bad_env = tide("submit-dist", "pytorch", "--name", "x", "-p", "team-a", "-e", "NOEQUALS", "--", "true")
    assert bad_env.exit_code == 2 and "KEY=VALUE" in bad_env.output
    never = tide("submit-dist", "pytorch", "--name", "x", "-p", "team-a", "-g", "2000", "--", "true")
    assert never.exit_code == 2 and "tide:" in never.output and "1024" in never.output


@pytest.mark.usefixtures("bridge")
def test_a_job_bigger_than_todays_cluster_is_accepted_with_a_warning() -> None:
    """Nodes come and go: the job waits for them, and the submitter is told at once what it would need."""
    _seed()
    wide = tide("submit-dist", "pytorch", "--name", "wide", "-p", "team-a", "-g", "9", "--", "true")
    assert wide.exit_code == 0 and "Submitted job wide" in wide.output
    assert "Warning: does not fit today's cluster: no schedulable node has 9 GPUs" in wide.output
    assert "it would need a node of 9 GPUs" in wide.output
    fits = tide("submit-dist", "pytorch", "--name", "fits", "-p", "team-a", "--", "sleep", "100")
    assert fits.exit_code == 0 and "Warning" not in fits.output


@pytest.mark.usefixtures("bridge")
def test_logs_of_a_replica() -> None:
    _seed()
    tide("submit-dist", "pytorch", "--name", "train", "-p", "team-a", "--workers", "1", "--", "sleep", "100")
    wait_for(lambda: "2/2/2" in tide("list").output, what="train to run")
    master = tide("logs", "train", "--tail", "5")
    assert master.exit_code == 0, master.output
    assert "replica 0 of team-a/train" in master.output
    worker = tide("logs", "train", "-p", "team-a", "--replica", "1")
    assert "replica 1 of team-a/train" in worker.output


@pytest.mark.usefixtures("bridge")
def test_login_config_and_default_project(tmp_path: Path) -> None:
    _seed()
    set_default = tide("config", "project", "team-b")
    assert "Default project: team-b" in set_default.output
    tide("submit-dist", "pytorch", "--name", "mine", "--", "sleep", "100")
    assert json.loads(tide("list", "--json").output)[0]["project"] == "team-b"
    login = tide("login", "http://tide.local", "--token", ADMIN)
    assert login.exit_code == 0, login.output
    path = tmp_path / "config" / "tide" / "config.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    saved = json.loads(path.read_text())
    assert saved == {"project": "team-b", "url": "http://tide.local", "token": ADMIN}
    shown = tide("config", "show")
    assert ADMIN not in shown.output and "team-b" in shown.output


@pytest.mark.usefixtures("bridge")
def test_token_create_gives_a_working_project_token() -> None:
    _seed()
    created = tide("token", "create", "team-a", "--name", "ci")
    assert created.exit_code == 0, created.output
    secret = created.output.splitlines()[1]
    assert secret.startswith("tide_p_")
    assert "team-a" in tide("project", "list", "--token", secret).output
    refused = tide("project", "create", "c", "--deserved", "1", "--token", secret)
    assert refused.exit_code == 5
    listed = tide("token", "list", "team-a")
    assert "ci" in listed.output and secret not in listed.output
    assert json.loads(tide("token", "list", "team-a", "--json").output)[0]["token"] is None


def test_server_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    data = tmp_path / "data"
    data.mkdir()
    (data / "server.json").write_text(json.dumps({"url": "http://127.0.0.1:9"}))
    (data / "admin-token").write_text("local-admin\n")
    monkeypatch.setenv("TIDE_DATA_DIR", str(data))
    for name in ("TIDE_URL", "TIDE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    local = target.resolve(None, None)
    assert (local.url, local.token) == ("http://127.0.0.1:9", "local-admin")
    (data / "server.json").write_text("{half")
    assert target.resolve(None, None) == target.Target(
        "http://127.0.0.1:8000", None, f"the local server's data dir {data}"
    )
    target.save_config({"url": "http://cfg:1", "token": "cfg-token"})
    assert target.resolve(None, None).token == "cfg-token"
    monkeypatch.setenv("TIDE_URL", "http://env:2")
    monkeypatch.setenv("TIDE_TOKEN", "env-token")
    assert (target.resolve(None, None).url, target.resolve(None, None).token) == (
        "http://env:2",
        "env-token",
    )
    assert target.resolve("http://flag:3", "flag-token") == target.Target(
        "http://flag:3", "flag-token", "--url"
    )


def test_unreachable_server_says_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("TIDE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("TIDE_URL", raising=False)
    result = tide("list", "--url", "http://127.0.0.1:9")
    assert result.exit_code == 4
    assert "cannot reach the Tide server at http://127.0.0.1:9 (from --url)" in result.output
    assert "tide serve" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    "command",
    [["submit-dist", "pytorch"], ["list"], ["describe", "job"], ["logs"], ["delete", "job"],
     ["project", "create"], ["project", "update"], ["project", "delete"], ["project", "list"],
     ["department", "create"], ["department", "update"], ["department", "list"], ["department", "delete"], ["cluster"], ["events"], ["token", "create"], ["token", "list"],
     ["login"], ["config", "project"]],
)  # fmt: skip
def test_every_command_has_help_with_an_example(command: list[str]) -> None:
    result = tide(*command, "--help")
    assert result.exit_code == 0
    assert "Example: tide" in result.output


def test_events_follow_prints_new_decisions_and_stops_quietly_on_ctrl_c(
    bridge: ASGIBridge, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed()
    client = local_client(bridge, ADMIN)
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 1:
            client.submit("team-b", {"name": "late", "command": ["sleep", "100"]})
            wait_for(lambda: client.job("team-b", "late").status == "running", what="late to start")
        else:
            raise KeyboardInterrupt

    monkeypatch.setattr(admin, "time", SimpleNamespace(sleep=nap))
    followed = tide("events", "--follow")
    assert followed.exit_code == 130
    assert "start  team-b/late [0]" in followed.output and "Traceback" not in followed.output


def test_logs_follow_stops_when_the_job_ends(bridge: ASGIBridge, monkeypatch: pytest.MonkeyPatch) -> None:
    _seed()
    client = local_client(bridge, ADMIN)
    tide("submit-dist", "pytorch", "--name", "short", "-p", "team-a", "--interactive", "--", "sleep", "100")
    wait_for(lambda: client.job("team-a", "short").status == "running", what="short to run")
    assert json.loads(tide("describe", "job", "short", "--json").output)["interactive"] is True
    monkeypatch.setattr(jobs, "time", SimpleNamespace(sleep=lambda _: client.delete_job("team-a", "short")))
    followed = tide("logs", "short", "--follow")
    assert followed.exit_code == 0, followed.output
    assert followed.output.count("replica 0 of team-a/short") == 1


def test_an_answer_that_is_not_tides_api_is_an_error_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))

    def not_tide(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"hello": "world"})

    transport = httpx.MockTransport(not_tide)
    context.use_client_factory(
        lambda target: TideClient(http=httpx.Client(transport=transport, base_url=target.url))
    )
    try:
        result = tide("cluster", "--url", "http://elsewhere:1")
    finally:
        context.use_client_factory(None)
    assert result.exit_code == 1
    assert "not Tide's API" in result.output and "Traceback" not in result.output


@pytest.mark.usefixtures("bridge")
def test_submit_can_wait_until_the_job_runs_or_say_why_not() -> None:
    _seed()
    waited = tide("submit-dist", "pytorch", "--name", "w", "-p", "team-a", "--workers", "1", "--wait", "10",
                  "--", "sleep", "100")  # fmt: skip
    assert waited.exit_code == 0, waited.output
    assert "Job w is running with 2 replica(s), 2 GPU(s)." in waited.output
    blocked = tide("submit-dist", "pytorch", "--name", "big", "-p", "team-a", "--workers", "3", "--interactive",
                   "--wait", "0.5", "--", "sleep", "100")  # fmt: skip
    assert blocked.exit_code == 0, blocked.output
    assert "Still pending after 0.5 s:" in blocked.output


def _rows(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.lstrip().startswith("team-")]


def test_a_big_cluster_lists_jobs_in_pages_and_summarises_its_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """40 nodes of 8 GPUs, 60 jobs: team-a's 38 whole-node jobs and team-b's 12 one-GPU ones run, team-b's
    10 whole-node jobs wait. ``tide list`` shows 50 and says how to see the rest; ``tide cluster`` sums the
    nodes up unless asked for every one."""
    monkeypatch.setenv("COLUMNS", "200")
    with cli_bridge(tmp_path, monkeypatch, nodes=40, gpus_per_node=8) as bridge:
        client = local_client(bridge, ADMIN)
        client.create_project({"name": "team-a", "deserved_gpus": 304})
        client.create_project({"name": "team-b", "deserved_gpus": 12})
        for i in range(60):
            project, gpus = ("team-a", 8) if i < 38 else ("team-b", 1 if i < 50 else 8)
            client.submit(project, {"name": f"j{i:02d}", "gpus_per_replica": gpus, "command": ["train"]})
        wait_for(lambda: client.cluster().allocated_gpus == 316, what="50 jobs to run on 316 GPUs")

        listed = tide("list")
        assert listed.exit_code == 0, listed.output
        assert len(_rows(listed.output)) == 50
        assert listed.output.rstrip().endswith(
            "showing 50 of 60 jobs; --limit 0 for all, --offset 50 for the next"
        )
        assert len(_rows(tide("list", "--limit", "0").output)) == 60
        assert "showing" not in tide("list", "--limit", "0").output
        rest = tide("list", "--offset", "55")
        assert rest.output.rstrip().endswith("showing 5 of 60 jobs (from 56); --limit 0 for all")
        pending = tide("list", "--status", "pending", "--limit", "4")
        assert len(_rows(pending.output)) == 4 and "showing 4 of 10 jobs" in pending.output
        as_json = tide("list", "-p", "team-b", "--status", "running", "--limit", "3", "--json")
        found = json.loads(as_json.stdout)
        assert [(j["project"], j["name"], j["status"]) for j in found] == [
            ("team-b", f"j{i}", "running") for i in (38, 39, 40)
        ]
        assert "showing 3 of 12 jobs" in as_json.stderr
        every = tide("list", "--json")  # a script gets every job unless it asks for a page
        assert len(json.loads(every.stdout)) == 60 and "showing" not in every.stderr
        for bad, says in (
            (["--limit", "-1"], "--limit"),
            (["--limit", "many"], "--limit"),
            (["--offset", "-5"], "--offset"),
            (["--status", "done"], "--status must be one of pending, running, succeeded, failed, cancelled"),
        ):
            refused = tide("list", *bad)
            assert refused.exit_code == 2 and says in refused.output, (bad, refused.output)

        summary = tide("cluster")
        assert summary.exit_code == 0, summary.output
        assert "Nodes: 40 (40 ready); 39 full, 1 partly used" in summary.output
        assert "Most free GPUs (where the next replicas fit), top 1:" in summary.output
        assert "40 nodes: tide cluster --nodes (or tide node list) lists them all." in summary.output
        assert "team-a" in summary.output and summary.output.count("node-") == 1  # only the roomy node
        every = tide("cluster", "--nodes")
        assert sum(line.lstrip().startswith("node-") for line in every.output.splitlines()) == 40
        assert tide("cluster", "--all").output == every.output


def test_quotas_beyond_the_cluster_or_a_department_are_warned_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """4 GPUs; research (4) and team-b (2) add up to 6: accepted, with a warning on the REST answers and one
    line from the CLI after create, update and list; so is a department whose projects' quotas exceed its
    own, on its answers and its projects'."""
    with cli_bridge(tmp_path, monkeypatch, nodes=1, gpus_per_node=4):
        assert tide("department", "create", "research", "--deserved", "4").stderr == ""
        fine = tide("project", "create", "team-a", "--deserved", "2", "-d", "research")
        assert fine.exit_code == 0 and fine.stderr == ""
        over = tide("project", "create", "team-b", "--deserved", "2")
        assert over.exit_code == 0, over.output
        cluster = (
            "quotas add up to 6 GPUs (departments and projects without one), more than the 4 schedulable: "
            "fair shares cut each in proportion, so none is guaranteed in full"
        )
        assert over.stderr == f"warning: {cluster}\n"
        listed = tide("project", "list", "--json")
        assert [p["warnings"] for p in json.loads(listed.stdout)] == [[cluster], [cluster]]
        assert tide("project", "list").stderr == f"warning: {cluster}\n"
        dept = (
            "the quotas of department research's projects add up to 5 GPUs, more than its quota of 4: their "
            "fair shares are cut in proportion"
        )
        both = f"warning: {cluster}; {dept}\n"
        assert tide("project", "update", "team-a", "--deserved", "5").stderr == both
        assert tide("department", "list").stderr == both
        assert tide("project", "update", "team-b", "--deserved", "0").stderr == ""  # not in research
        assert tide("department", "list").stderr == f"warning: {dept}\n"
        fixed = tide("project", "update", "team-a", "--deserved", "4")
        assert fixed.exit_code == 0 and fixed.stderr == ""
