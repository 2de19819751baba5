"""``tide serve --log-format json``: a real process whose every log line is one JSON object.

The lines made while a request is handled (uvicorn's access line among them) carry that request's id: the
client's ``X-Request-ID`` when it sent a sane one. ``TIDE_LOG_FORMAT`` does the same as the flag; an
unknown format is refused before anything starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from servicekit import answers, free_port, wait_for
from typer.testing import CliRunner

from api.client.cli.main import app

ADMIN = "a-json-logging-admin-token"


def test_json_logs_one_object_per_line_with_request_ids(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "TIDE_DATA_DIR": str(tmp_path), "TIDE_ADMIN_TOKEN": ADMIN, "TIDE_LOG_FORMAT": "json"}
    env.update(TIDE_NODES="1", TIDE_GPUS_PER_NODE="2", TIDE_EXECUTOR="memory")
    argv = [sys.executable, "-m", "api.client.cli.main", "serve", "--port", str(port), "--log-level", "info"]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: answers(url), timeout=30, what="tide serve to answer")
        headers = {"Authorization": f"Bearer {ADMIN}", "X-Request-ID": "req-json-1"}
        created = httpx.post(
            f"{url}/api/v1/projects", json={"name": "a", "deserved_gpus": 1}, headers=headers
        )
        assert created.status_code == 201 and created.headers["x-request-id"] == "req-json-1"
        headers = {"Authorization": f"Bearer {ADMIN}", "X-Request-ID": "bad id {forged}"}
        assert httpx.get(f"{url}/api/v1/projects", headers=headers).status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert "Tide API:" in out  # the banner is for people, on stdout; the logs are on stderr
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]  # each line parses alone
    assert lines, "no log lines"
    for line in lines:
        assert {"time", "level", "logger", "message"} <= line.keys(), line
        assert line["time"].endswith("+00:00")
    mine = [line for line in lines if line.get("request_id") == "req-json-1"]
    assert any("POST /api/v1/projects" in line["message"] for line in mine), lines
    assert not any("forged" in str(line.get("request_id")) for line in lines)
    assert any(line["logger"].startswith("uvicorn") and "request_id" not in line for line in lines)


def test_an_unknown_log_format_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["serve", "--data-dir", str(tmp_path), "--log-format", "xml"])
    assert result.exit_code == 2 and "use text or json" in result.output
