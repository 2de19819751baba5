"""``tide serve`` as a user runs it: a real process on a free port, on the embedded defaults.

It prints where the API and its docs are and the admin token it generated (stored 0600 in the data dir,
where the CLI's ``local_server`` finds it); it answers authenticated requests; it stops on SIGTERM; killed
with SIGKILL and started again, it adopts the replicas it had started (same pids, none started twice); and
it refuses a database written by a newer Tide with a clear message.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from servicekit import alive, answers, free_port, kill_leftovers, running_pids, serve_process, wait_for
from sqlalchemy import text
from typer.testing import CliRunner

from api.client.cli.main import app
from api.client.rest import TideClient
from api.shared.paths import local_server
from scheduler.store.db import Database, sqlite_url
from scheduler.store.migrate import upgrade


def _stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=20)
    return output


def test_serve_prints_where_it_is_and_its_token(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = serve_process(tmp_path, port, capture=True)
    try:
        wait_for(lambda: answers(url), timeout=30, what="tide serve to answer")
        found_url, token = local_server(tmp_path)
        assert found_url == url and token
        assert (tmp_path / "admin-token").stat().st_mode & 0o777 == 0o600
        with TideClient(url, token) as client:
            assert client.cluster().total_gpus == 2
    finally:
        output = _stop(process)
    assert process.returncode in (0, -signal.SIGTERM), output  # uvicorn re-raises the signal it handled
    assert f"Tide API:      {url}/api/v1" in output and f"API docs:      {url}/docs" in output
    assert f"{token}  (generated now" in output
    again = serve_process(tmp_path, port, capture=True)
    wait_for(lambda: answers(url), timeout=30, what="the second start")
    assert "stored in" in _stop(again)


@pytest.mark.slow
def test_serve_killed_with_sigkill_and_restarted_adopts_its_processes(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = serve_process(tmp_path, port, capture=True)
    try:
        wait_for(lambda: answers(url), timeout=30, what="tide serve to answer")
        _, token = local_server(tmp_path)
        with TideClient(url, token) as client:
            client.create_project({"name": "a", "deserved_gpus": 2})
            client.submit("a", {"name": "train", "workers": 1, "command": ["sleep", "600"]})
            before = wait_for(lambda: running_pids(client, "a", "train", 2), what="2 replicas")
        process.kill()  # no shutdown at all
        process.communicate(timeout=10)
        assert all(alive(pid) for pid in before)  # type: ignore[attr-defined]
        process = serve_process(tmp_path, port, capture=True)
        wait_for(lambda: answers(url), timeout=30, what="the restarted service")
        with TideClient(url, token) as client:
            wait_for(lambda: client.health().cycles >= 3, what="cycles after the restart")
            assert running_pids(client, "a", "train", 2) == before
            assert client.job("a", "train").status == "running"
            client.delete_job("a", "train")
            wait_for(lambda: not any(alive(pid) for pid in before), timeout=10, what="the replicas to stop")
    finally:
        _stop(process)
        kill_leftovers(tmp_path)


def test_serve_refuses_a_database_from_a_newer_tide(tmp_path: Path) -> None:
    db = Database(sqlite_url(tmp_path))
    upgrade(db)
    with db.write() as session:
        session.execute(text("UPDATE alembic_version SET version_num = 'from_the_future'"))
    db.dispose()
    result = CliRunner().invoke(app, ["serve", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "newer version of Tide" in result.output


def test_serve_help_lists_every_flag() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200)
    assert result.exit_code == 0
    for flag in (
        "--host",
        "--port",
        "--database-url",
        "--data-dir",
        "--executor",
        "--nodes",
        "--gpus-per-node",
        "--cycle-period",
        "--grace-period",
        "TIDE_DATABASE_URL",
    ):
        assert flag in result.output
