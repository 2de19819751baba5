"""Attacks on the service and what stops them (docs/security.md), each through the real app over HTTP.

A project token reads no secret (token hashes, the admin token, env values, other projects' logs), creates
no token and touches no other project's job; commands run as argv, never through a shell (real processes);
names of every kind are validated; bodies and log reads are bounded; tokens are stored hashed; CORS is off;
``tide serve`` refuses to listen beyond loopback with a guessable token.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from servicekit import ADMIN, RunningService, wait_for
from sqlalchemy import select
from typer.testing import CliRunner

from api.client.cli.main import app
from api.client.rest import TideAPIError, TideClient
from api.server.auth import new_project_token
from api.server.serve import _refuse_weak_tokens_beyond_loopback, is_loopback
from api.server.settings import Settings
from scheduler.store.db import Database
from scheduler.store.models import TokenRow

JOB = {"command": ["sleep", "600"]}
SECRET_VALUE = "hunter2-env-secret"


def _status(call: Callable[[], object]) -> int:
    with pytest.raises(TideAPIError) as info:
        call()
    return info.value.status_code


@pytest.fixture
def svc(make_service: Callable[..., RunningService]) -> RunningService:
    return make_service(None)  # SQLite in the data dir: the test reads its rows and bytes


@dataclass
class Teams:
    admin: TideClient
    b: TideClient  # with b's project token
    a_secret: str
    b_secret: str


@pytest.fixture
def teams(svc: RunningService) -> Teams:
    """Projects a and b with a token each, and a job of a carrying a secret env value."""
    admin = svc.client()
    admin.create_project({"name": "a", "deserved_gpus": 2})
    admin.create_project({"name": "b", "deserved_gpus": 2})
    a_secret = admin.create_token("a", "ci").token
    b_secret = admin.create_token("b", "ci").token
    assert a_secret and b_secret
    admin.submit("a", {"name": "train", "env": {"API_KEY": SECRET_VALUE}, **JOB})
    return Teams(admin, svc.client(b_secret), a_secret, b_secret)


def test_a_project_token_reads_no_secret(svc: RunningService, teams: Teams) -> None:
    b, a_secret = teams.b, teams.a_secret
    assert _status(lambda: b.tokens("a")) == 403
    assert _status(lambda: b.tokens("b")) == 403  # not even its own project's token list
    assert _status(lambda: b.logs("a", "train")) == 403  # a job's output may print its secrets
    assert b.job("a", "train").env_names == ["API_KEY"]
    headers = {"Authorization": f"Bearer {teams.b_secret}"}
    readable = [
        "/api/v1/jobs",
        "/api/v1/projects/a/jobs/train",
        "/api/v1/cluster",
        "/api/v1/events",
        "/metrics",
    ]
    readable += ["/api/v1/projects", "/openapi.json", "/healthz", "/readyz"]
    for path in readable:
        answer = httpx.get(f"{svc.url}{path}", headers=headers)
        assert answer.status_code == 200, path
        for secret in (ADMIN, a_secret, hashlib.sha256(a_secret.encode()).hexdigest(), SECRET_VALUE):
            assert secret not in answer.text, (path, secret)


def test_a_project_token_creates_no_token_and_leaves_other_projects_alone(teams: Teams) -> None:
    admin, b = teams.admin, teams.b
    wait_for(lambda: admin.job("a", "train").status == "running", what="a's job to run")
    assert _status(lambda: b.create_token("b")) == 403
    assert _status(lambda: b.create_token("a")) == 403
    assert _status(lambda: b.delete_job("a", "train")) == 403
    assert _status(lambda: b.submit("a", {"name": "intruder", **JOB})) == 403
    assert _status(lambda: b.update_project("b", {"deserved_gpus": 4})) == 403
    assert _status(lambda: b.delete_project("a")) == 403
    assert _status(lambda: b.create_department({"name": "mine", "deserved_gpus": 1})) == 403
    assert admin.job("a", "train").status == "running"
    assert [j.name for j in admin.jobs(project="a")] == ["train"]
    assert b.submit("b", {"name": "own", **JOB}).name == "own"  # its own project: allowed


def test_tokens_are_stored_hashed(svc: RunningService, teams: Teams) -> None:
    a_secret = teams.a_secret
    db = Database(svc.settings.resolved_database_url())
    try:
        with db.read() as session:
            rows = session.scalars(select(TokenRow)).all()
            hashes = {row.token_hash for row in rows}
    finally:
        db.dispose()
    assert hashlib.sha256(a_secret.encode()).hexdigest() in hashes and len(rows) == 2
    files = [p for p in svc.settings.data_dir.iterdir() if p.name.startswith("tide.db")]
    assert files and not any(a_secret.encode() in p.read_bytes() for p in files)  # nowhere in the file
    assert new_project_token() != new_project_token() and len(new_project_token()) > 40


def test_commands_run_as_argv_never_through_a_shell(
    make_service: Callable[..., RunningService], tmp_path: Path
) -> None:
    service = make_service(None, executor="local", cycle_period=0.1)
    client = service.client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    marks = [tmp_path / f"mark{i}" for i in range(4)]
    words = ["echo", f"$(touch {marks[0]})", f"`touch {marks[1]}`", ";", "touch", str(marks[2]), "|", "$HOME"]
    client.submit("a", {"name": "echo", "command": words})
    client.submit("a", {"name": "meta", "command": [f"sh-metachar; touch {marks[3]}"]})
    wait_for(lambda: client.job("a", "echo").status == "succeeded", timeout=30, what="echo to finish")
    output = client.logs("a", "echo")
    assert " ".join(words[1:]) in output  # echo got every word verbatim: no substitution, no split
    failed = wait_for(
        lambda: (j := client.job("a", "meta")).status == "failed" and j, timeout=30, what="fail"
    )
    assert "not found" in (failed.message or "") or failed.replicas[0].exit_code  # type: ignore[union-attr]
    assert not any(mark.exists() for mark in marks)


def test_names_of_every_kind_are_validated(svc: RunningService) -> None:
    admin = svc.client()
    admin.create_project({"name": "a", "deserved_gpus": 2})
    bad_jobs = [
        {"name": "../etc", **JOB},
        {"name": "a" * 64, **JOB},
        {"name": "ok", "env": {"A=B": "v"}, **JOB},
        {"name": "ok", "env": {"": "v"}, **JOB},
        {"name": "ok", "env": {"A B": "v"}, **JOB},
        {"name": "ok", "env": {"TIDE_TOKEN": "v"}, **JOB},
        {"name": "ok", "command": ["sleep", "1\x00"]},
    ]
    for body in bad_jobs:
        with pytest.raises(TideAPIError) as info:
            admin.submit("a", body)
        assert info.value.status_code == 422 and info.value.detail, body
    assert "environment variable name" in _detail(lambda: admin.submit("a", bad_jobs[2]))
    assert _status(lambda: admin.create_project({"name": "Team_A", "deserved_gpus": 1})) == 422
    assert _status(lambda: admin.create_department({"name": "r&d", "deserved_gpus": 1})) == 422
    assert _status(lambda: admin.create_token("a", "my token")) == 422


def _detail(call: Callable[[], object]) -> str:
    with pytest.raises(TideAPIError) as info:
        call()
    return info.value.detail


def test_log_reads_are_bounded(make_service: Callable[..., RunningService]) -> None:
    service = make_service(None, executor="local", cycle_period=0.1)
    client = service.client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    command = [sys.executable, "-c", "import sys; sys.stdout.write(('y' * 99 + '\\n') * 30000)"]
    client.submit("a", {"name": "chatty", "command": command})
    wait_for(lambda: client.job("a", "chatty").status == "succeeded", timeout=30, what="the job to end")
    assert len(client.logs("a", "chatty").encode()) <= 1 << 20  # 3 MB written, at most 1 MiB read
    assert client.logs("a", "chatty", tail=5).count("\n") == 5
    headers = {"Authorization": f"Bearer {ADMIN}"}
    too_many = httpx.get(f"{service.url}/api/v1/projects/a/jobs/chatty/logs?tail=1000000", headers=headers)
    assert too_many.status_code == 422 and "tail" in too_many.json()["detail"]


def test_request_bodies_are_bounded(svc: RunningService) -> None:
    headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    svc.client().create_project({"name": "a", "deserved_gpus": 2})
    env = {f"V{i}": "x" * 30_000 for i in range(40)}  # 1.2 MB of JSON: over the 1 MiB default
    big = httpx.post(
        f"{svc.url}/api/v1/projects/a/jobs", json={"name": "big", "env": env, **JOB}, headers=headers
    )
    assert big.status_code == 413 and "at most" in big.json()["detail"]


def test_cors_is_off(svc: RunningService) -> None:
    origin = {"Origin": "https://evil.example"}
    read = httpx.get(f"{svc.url}/api/v1/projects", headers={"Authorization": f"Bearer {ADMIN}", **origin})
    assert read.status_code == 200 and "access-control-allow-origin" not in read.headers
    preflight = {**origin, "Access-Control-Request-Method": "DELETE"}
    answer = httpx.options(f"{svc.url}/api/v1/projects/a", headers=preflight)
    assert "access-control-allow-origin" not in answer.headers and answer.status_code >= 400


def test_serve_refuses_a_guessable_token_beyond_loopback(tmp_path: Path) -> None:
    runner = CliRunner()
    argv = ["serve", "--data-dir", str(tmp_path), "--host", "0.0.0.0", "--executor", "local"]
    weak = runner.invoke(app, argv, env={"TIDE_ADMIN_TOKEN": "changeme"})
    assert weak.exit_code == 2 and "refusing to listen on 0.0.0.0" in weak.output
    assert "at least 32" in weak.output
    metrics = runner.invoke(app, argv, env={"TIDE_ADMIN_TOKEN": "x" * 40, "TIDE_METRICS_TOKEN": "scrape"})
    assert metrics.exit_code == 2 and "TIDE_METRICS_TOKEN" in metrics.output
    assert not (tmp_path / "server.json").exists()  # refused before serving anything
    for host in ("127.0.0.1", "127.0.0.9", "::1", "[::1]", "localhost"):
        assert is_loopback(host), host
        _refuse_weak_tokens_beyond_loopback(Settings(data_dir=tmp_path, host=host), "changeme")  # allowed
    for host in ("0.0.0.0", "::", "10.1.2.3", "tide.example.com"):
        assert not is_loopback(host), host
    generated = new_project_token()  # as long as a generated admin token: accepted everywhere
    _refuse_weak_tokens_beyond_loopback(Settings(data_dir=tmp_path, host="0.0.0.0"), generated)


def test_serve_keeps_the_memory_executor_on_this_machine(tmp_path: Path) -> None:
    argv = ["serve", "--data-dir", str(tmp_path), "--host", "0.0.0.0", "--executor", "memory"]
    refused = CliRunner().invoke(app, argv, env={"TIDE_ADMIN_TOKEN": "x" * 40, "COLUMNS": "200"})
    assert refused.exit_code == 2 and "memory executor runs nothing" in refused.output
    assert "listen on 127.0.0.1, not 0.0.0.0" in refused.output
    assert not (tmp_path / "server.json").exists()
