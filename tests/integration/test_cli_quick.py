"""The quick path (``tide version``, ``tide list --json`` without typer or httpx) prints what the full CLI
prints, and hands every other command line to it.

Both paths run on the same command lines against a real service on a free port (uvicorn in a thread, the
in-memory executor): the quick one through ``quick.run``, the full one through the typer app over httpx.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import MISSING, fields
from pathlib import Path

import pytest
from servicekit import ADMIN, RunningService, settings_for, wait_for
from test_cli_light import _probe
from typer.testing import CliRunner

from api.client import rest
from api.client.cli import quick
from api.client.cli.main import build
from api.client.client_types import JobPublic, ReplicaPublic

Outcome = tuple[int, str, str]  # exit code, stdout, stderr


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    """Three running jobs in two projects, and one pending."""
    data = tmp_path_factory.mktemp("quick")
    running = RunningService(settings_for(data, None)).start()
    client = running.client()
    for name in ("team-a", "team-b"):
        client.create_project({"name": name, "deserved_gpus": 2})
    for project, name, gpus in (("team-a", "one", 1), ("team-a", "two", 1), ("team-b", "three", 2)):
        client.submit(project, {"name": name, "command": ["sleep", "60"], "gpus_per_replica": gpus})
    client.submit("team-b", {"name": "later", "command": ["sleep", "60"], "gpus_per_replica": 4})

    def settled() -> bool:  # every replica seen running too: the two paths below read the same answers
        jobs = client.jobs(status="running")
        return len(jobs) == 3 and all(
            r.status == "running" for j in jobs for r in client.job(j.project, j.name).replicas
        )

    wait_for(settled, timeout=20, what="three jobs to run")
    yield running
    running.stop()


@pytest.fixture
def env(service: RunningService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunningService:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("TIDE_DATA_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("TIDE_URL", service.url)
    monkeypatch.setenv("TIDE_TOKEN", ADMIN)
    for name in ("TIDE_PROJECT", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    return service


def quick_path(capsys: pytest.CaptureFixture[str], *args: str) -> Outcome | None:
    capsys.readouterr()
    code = quick.run(list(args))
    out, err = capsys.readouterr()
    return None if code is None else (code, out, err)


def full_path(*args: str) -> Outcome:
    result = CliRunner().invoke(build(), list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["list", "--json"],
        ["list", "--json", "-p", "team-a"],
        ["list", "--project=team-b", "--json"],
        ["list", "--json", "--status", "running"],
        ["list", "--json", "--status=pending", "-p", "team-b"],
        ["list", "--json", "--limit", "2"],  # cut short: the closing line on stderr
        ["list", "--json", "--limit=1", "--offset=1"],
        ["list", "--json", "--offset", "3"],
        ["list", "--json", "--limit", "0", "--offset", "10"],  # nothing left
        ["list", "--json", "-p", "team-a", "-p", "team-b"],  # the last one wins, as in typer
        ["list", "--json", "--status", "running", "--status=running"],  # one status, given twice
        ["version"],
    ],
)
def test_the_quick_path_prints_what_the_full_cli_prints(
    env: RunningService, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    quick_outcome = quick_path(capsys, *args)
    assert quick_outcome is not None, "the quick path handed it over"
    assert quick_outcome == full_path(*args)
    assert quick_outcome[0] == 0


def test_the_jobs_it_prints_are_the_servers(env: RunningService, capsys: pytest.CaptureFixture[str]) -> None:
    outcome = quick_path(capsys, "list", "--json", "--limit", "2")
    assert outcome is not None
    _, out, err = outcome
    assert [(job["project"], job["name"]) for job in json.loads(out)] == [
        ("team-a", "one"),
        ("team-a", "two"),
    ]
    assert err == "showing 2 of 4 jobs; --limit 0 for all, --offset 2 for the next\n"


@pytest.mark.parametrize(
    "args", [["list", "--json"], ["list", "--json", "--offset", "1"], ["list", "--json", "-p", "team-b"]]
)
def test_both_paths_walk_the_servers_pages_for_every_job(
    env: RunningService, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """Pages of 1 job: 4 requests (from --offset 1: the offset, then the cursor), every job once, in order."""
    monkeypatch.setattr(quick, "WALK_PAGE", 1)
    monkeypatch.setattr(rest, "WALK_PAGE", 1)
    quick_outcome = quick_path(capsys, *args)
    assert quick_outcome is not None and quick_outcome == full_path(*args)
    code, out, err = quick_outcome
    every = [(j.project, j.name) for j in env.client().jobs(None if "-p" not in args else "team-b")]
    skipped = 1 if "--offset" in args else 0
    assert (code, err) == (0, "showing 3 of 4 jobs (from 2); --limit 0 for all\n" if skipped else "")
    assert [(job["project"], job["name"]) for job in json.loads(out)] == every[skipped:]


@pytest.mark.parametrize(
    "args",
    [
        ["list"],  # a table: rich's
        ["list", "--help"],
        ["list", "--json", "--status", "sleeping"],
        ["list", "--json", "--status", "running", "--status", "pending"],  # the full CLI refuses two
        ["list", "--json", "--limit", "-1"],
        ["list", "--json", "--limit", "10001"],
        ["list", "--json", "--limit", "many"],
        ["list", "--json", "--offset"],
        ["list", "--json", "-p"],
        ["list", "--json", "-p", "--limit", "2"],
        ["list", "--json", "--wide"],
        ["list", "--json", "extra"],
        ["list", "--json", "-pteam-a"],
        ["version", "--help"],
        ["describe", "job", "one", "--json"],
        ["--help"],
        [],
    ],
)
def test_every_other_command_line_goes_to_the_full_cli(
    env: RunningService, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    assert quick_path(capsys, *args) is None


def test_an_error_answer_goes_to_the_full_cli_which_says_it(
    env: RunningService, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDE_TOKEN", "not-a-token")
    assert quick_path(capsys, "list", "--json") is None
    code, _, err = full_path("list", "--json")
    assert code == 5 and "check --token" in err
    monkeypatch.setenv("TIDE_TOKEN", ADMIN)
    assert quick_path(capsys, "list", "--json", "-p", "nobody") is None
    code, _, err = full_path("list", "--json", "-p", "nobody")
    assert code == 3 and "nobody" in err


@pytest.mark.parametrize(
    "setting",
    [
        {"TIDE_URL": "https://127.0.0.1:1"},  # certificates are httpx's
        {"HTTP_PROXY": "http://127.0.0.1:1"},  # and so are proxies
        {"all_proxy": "http://127.0.0.1:1"},
        {"TIDE_URL": "http://127.0.0.1:notaport"},
    ],
)
def test_https_proxies_and_odd_urls_go_to_the_full_cli(
    env: RunningService,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    setting: dict[str, str],
) -> None:
    for name, value in setting.items():
        monkeypatch.setenv(name, value)
    assert quick_path(capsys, "list", "--json") is None


def test_an_unreachable_server_gets_the_full_clis_message_and_exit_code(
    env: RunningService, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDE_URL", "http://127.0.0.1:9")
    outcome = quick_path(capsys, "list", "--json")
    assert outcome is not None
    assert outcome == full_path("list", "--json")
    assert (
        outcome[0] == 4 and "cannot reach the Tide server at http://127.0.0.1:9 (from TIDE_URL)" in outcome[2]
    )


class _Answers(http.server.BaseHTTPRequestHandler):
    body = b"[]"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def other_server() -> Iterator[Callable[[bytes], str]]:
    """A server that is not Tide's: it answers every GET with 200 and the body given."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def answering(body: bytes) -> str:
        _Answers.body = body
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield answering
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    "body",
    [
        b"<html>a proxy's page</html>",
        b'{"detail": "not a list"}',
        b'[{"name": "x"}]',
        b'[{"project": "a", "name": "x", "replicas": [{"index": 0}]}]',
    ],
)
def test_an_answer_that_is_not_tides_goes_to_the_full_cli_which_says_it(
    env: RunningService,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    other_server: Callable[[bytes], str],
    body: bytes,
) -> None:
    monkeypatch.setenv("TIDE_URL", other_server(body))
    assert quick_path(capsys, "list", "--json") is None
    code, _, err = full_path("list", "--json")
    assert code == 1 and "is not Tide's API" in err


def test_the_fields_it_checks_are_those_every_job_answer_has() -> None:
    def required(cls: type) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)

    assert required(JobPublic) == quick.JOB_FIELDS
    assert required(ReplicaPublic) == quick.REPLICA_FIELDS


def test_the_tide_command_answers_through_the_quick_path_without_typer_or_httpx(
    env: RunningService, tmp_path: Path
) -> None:
    args = ("list", "--json", "-p", "team-b", "--url", env.url, "--token", ADMIN)
    probe = _probe(tmp_path, ["typer", "click", "httpx", "rich"], *args)
    assert (probe["code"], probe["loaded"]) == (0, [])
    assert [job["name"] for job in json.loads(str(probe["out"]))] == ["three", "later"]
