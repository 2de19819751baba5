"""The tours in README.md and docs/cli.md are the output of this test: it runs their commands on the real
app in process (the seed scenario: one node of 4 GPUs; the bigger cluster: 40 nodes of 8, 60 jobs submitted
first, unshown; the in-memory executor), at 80 columns, and compares with what the docs show, so the docs
cannot drift from the CLI.

What must vary is normalised on both sides before comparing: clock times, ages and durations, work lost
in GPU-time, and layout (compared word by word: a table's columns are as wide as its widest cell). ``TIDE_UPDATE_TOUR=1`` rewrites the docs' blocks
from the real output instead (CONTRIBUTING.md, "The tours").

A block is a fenced block of ``$ command`` lines, each followed by its output and ``[exit N]`` when the
command fails. ``$ ... tide serve ... &`` starts the service (its line must be ``SERVE``), ``$ kill %1``
stops it; every other command is a ``tide`` command line, run once the scheduler has settled.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from servicekit import ADMIN, settings_for, wait_for
from test_cli_commands import tide

from api.client.cli import context
from api.server.app import create_app
from api.server.testing import ASGIBridge, local_client
from api.shared.paths import ADMIN_TOKEN_FILE, SERVER_FILE

ROOT = Path(__file__).resolve().parents[2]
SERVE = (
    "TIDE_NODES=1 TIDE_GPUS_PER_NODE=4 tide serve --port 8765 --cycle-period 0.5 --grace-period 2 "
    "--settle-time 2 &"
)
PORT = 8765  # the port the docs show; the test's server is said to listen there
UPDATE = os.environ.get("TIDE_UPDATE_TOUR") == "1"
BIG = "On a bigger cluster `tide list` stops at 50 jobs"
TOURS = [
    ("README.md", "## Two-minute tour (CLI, seed scenario)\n"),
    ("docs/cli.md", "## Two-minute tour\n"),
    ("docs/cli.md", BIG),
]


def block(text: str, anchor: str) -> tuple[int, int]:
    """The first fenced block after ``anchor``: (offset of its first line, offset of its closing fence)."""
    start = text.index("\n```", text.index(anchor)) + 1
    first = text.index("\n", start) + 1
    return first, text.index("```\n", first)


def commands(lines: str) -> list[str]:
    return [line[2:] for line in lines.splitlines() if line.startswith("$ ")]


@dataclass
class Tour:
    """The service the tour's commands talk to, found as a user's CLI finds its local ``tide serve``."""

    home: Path
    port: int
    bridge: ASGIBridge | None = None
    out: list[str] = field(default_factory=list)

    def serve(self, nodes: int = 1) -> None:
        """Start the service (``nodes`` of 8 GPUs, else the seed scenario's one node of 4)."""
        data = self.home / ".local" / "share" / "tide"
        data.mkdir(parents=True, exist_ok=True)
        (data / SERVER_FILE).write_text(json.dumps({"url": f"http://127.0.0.1:{self.port}"}))
        (data / ADMIN_TOKEN_FILE).write_text(ADMIN)
        gpus = 4 if nodes == 1 else 8
        settings = settings_for(data, None, nodes=nodes, gpus_per_node=gpus, grace_period=0.2)
        self.bridge = ASGIBridge(create_app(settings))
        bridge = self.bridge
        context.use_client_factory(lambda target: local_client(bridge, target.token))

    def stop(self) -> None:
        context.use_client_factory(None)  # the CLI now really connects, to a port nothing listens on
        if self.bridge is not None:
            self.bridge.close()
            self.bridge = None

    def run(self, line: str) -> None:
        self.out.append(f"$ {line}")
        if "tide serve" in line:
            assert line == SERVE, f"the tour's server line must read {SERVE!r}: this test starts that service"
            self.serve()
            return
        if line.split("#", maxsplit=1)[0].strip() == "kill %1":
            self.stop()
            return
        self.settle()
        argv = shlex.split(line, comments=True)
        assert argv[0] == "tide", f"a tour command is a tide command: {line!r}"
        result = tide(*argv[1:])
        text = result.output.replace(str(self.home), "~").replace(f":{self.port}", f":{PORT}")
        self.out += text.rstrip("\n").splitlines()
        if result.exit_code:
            self.out.append(f"[exit {result.exit_code}]")

    def big(self) -> None:
        """The bigger cluster's tour: 40 nodes of 8 GPUs; team-a runs 38 jobs of 8 GPUs, team-b 12 of 1 GPU
        and 10 of 8 that wait (set up here, not shown)."""
        self.serve(nodes=40)
        for project, deserved in (("team-a", "304"), ("team-b", "12")):
            assert tide("project", "create", project, "--deserved", deserved).exit_code == 0
        for index in range(60):
            project, gpus = ("team-a", "8") if index < 38 else ("team-b", "1" if index < 50 else "8")
            submit = (
                "submit-dist",
                "pytorch",
                "--name",
                f"j{index}",
                "-p",
                project,
                "-g",
                gpus,
                "--",
                "true",
            )
            assert tide(*submit).exit_code == 0
            if index in (37, 49):
                self.settle()

    def settle(self) -> None:
        """Wait until every job runs (all its replicas) or has ended or been told why it waits, two reads in
        a row."""
        if self.bridge is None:
            return
        client = local_client(self.bridge, ADMIN)
        seen: list[object] = []

        def still() -> bool:
            jobs = client.jobs()
            state = [(j.name, j.status, j.replicas_now, [r.status for r in j.replicas]) for j in jobs]
            settled = all(
                (j.status != "pending" or j.pending_reason)
                and (j.status != "running" or all(r.status == "running" for r in j.replicas))
                for j in jobs
            )
            same = bool(seen) and seen[-1] == state
            seen.append(state)
            time.sleep(0.05)
            return settled and same

        try:
            wait_for(still, what="the scheduler to settle")
        finally:
            client.close()


NORMAL = [
    (r"\b\d\d:\d\d:\d\d\b", "hh:mm:ss"),  # clock times
    (r"~\d+(\.\d+)? GPU-\w+", "~N GPU-time"),  # work lost, which depends on how long a job ran
    (r"\b\d+(\.\d+)? ?(ms|s|min|m|h|d)\b", "N"),  # ages and durations
]


def _timeless(line: str) -> str:
    for pattern, replacement in NORMAL:
        line = re.sub(pattern, replacement, line)
    return line


def normal(lines: list[str]) -> list[str]:
    """The words of ``lines`` with what must vary replaced: a table's columns are as wide as its widest cell,
    so a wider age moves a column and where a reason wraps, never the order of the words."""
    text = "\n".join(lines)
    for pattern, replacement in NORMAL:
        text = re.sub(pattern, replacement, text)
    return text.split()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(("doc", "heading"), TOURS)
def test_the_tour_shows_what_the_cli_prints(
    doc: str, heading: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = ROOT / doc
    text = path.read_text()
    first, end = block(text, heading)
    shown = text[first:end].rstrip("\n").splitlines()
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("COLUMNS", "80")
    for name in (
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "TIDE_DATA_DIR",
        "TIDE_URL",
        "TIDE_TOKEN",
        "TIDE_PROJECT",
    ):
        monkeypatch.delenv(name, raising=False)
    tour = Tour(home, free_port())
    try:
        if heading == BIG:
            tour.big()
        for line in commands(text[first:end]):
            tour.run(line)
    finally:
        tour.stop()
    if UPDATE:  # a block that differs only in its times keeps them: no churn in the docs' history
        if [_timeless(line) for line in tour.out] != [_timeless(line) for line in shown]:
            path.write_text(text[:first] + "\n".join(tour.out) + "\n" + text[end:])
        return
    assert normal(tour.out) == normal(shown), (
        f"{doc}'s tour ({heading!r}) no longer shows what the CLI prints; it prints this (run "
        f"TIDE_UPDATE_TOUR=1 .venv/bin/python -m pytest {Path(__file__).relative_to(ROOT)} to write it there):\n"
        + "\n".join(tour.out)
    )
