"""Fixtures for the browser tests: Debian's Chromium driven by Playwright, and a real ``tide serve``.

``chromium`` makes sure ``/usr/bin/chromium`` exists, installing Debian's package when it does not (the tests
run as root on the project's machines); it never runs ``playwright install``, which downloads a browser build
from outside the package registries. When Chromium or Playwright cannot be had, the tests skip with the
reason, unless ``CI`` is set: then they fail loudly. ``serve`` runs ``tide serve`` as a subprocess on a free
port with the local executor, or the in-memory one for a big cluster (``tide``: on 4 nodes of 1 GPU); ``page`` opens a fresh browser context and records
console errors and page errors; ``shots`` is the directory screenshots go to (``test-output/browser/`` at
the repository root, or ``$TIDE_TEST_OUTPUT``), printed so a person can look at them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from integration.debian import ensure
from integration.servicekit import answers, free_port, kill_leftovers, wait_for
from playwright.sync_api import sync_playwright
from serveargv import serve_argv

from api.client.rest import TideClient

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
TOKEN = "dashboard-test-admin-token"


@pytest.fixture(scope="session")
def chromium() -> Path:
    return ensure("chromium", str(CHROMIUM))


@pytest.fixture(scope="module")
def browser(chromium: Path) -> Iterator[Any]:
    # Module scope, not session: Playwright's sync API leaves its event loop marked running in this thread
    # until it stops, so later tests that call asyncio.run() would fail.
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(chromium), args=["--no-sandbox", "--headless"]
        )
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def shots() -> Path:
    where = Path(os.environ.get("TIDE_TEST_OUTPUT", ROOT / "test-output")) / "browser"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    print(f"\nbrowser screenshots: {where}", file=sys.stderr)
    return where


@dataclass
class Tide:
    """A running ``tide serve``: its URL, admin token, data directory and an API client."""

    url: str
    data_dir: Path
    process: subprocess.Popen[str]
    token: str = TOKEN
    clients: list[TideClient] = field(default_factory=list)

    def client(self) -> TideClient:
        client = TideClient(self.url, self.token)
        self.clients.append(client)
        return client


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Tide]]:
    """Start ``tide serve`` (local executor, or ``executor="memory"``: replicas are records, no processes) with
    ``nodes`` of ``gpus`` GPUs and further ``options``; stopped after the test."""
    started: list[Tide] = []

    def start(nodes: int = 4, gpus: int = 1, *options: str, executor: str = "local") -> Tide:
        port = free_port()
        data_dir = tmp_path / f"data-{len(started)}"
        env = {
            k: v for k, v in os.environ.items() if not k.startswith("TIDE_")
        }  # no outside settings leak in
        env |= {"TIDE_DATA_DIR": str(data_dir), "TIDE_ADMIN_TOKEN": TOKEN}
        argv = serve_argv(port)
        argv += ["--executor", executor, "--nodes", str(nodes), "--gpus-per-node", str(gpus)]
        argv += ["--cycle-period", "0.1", "--grace-period", "30", "--settle-time", "0", *options]
        log = tmp_path / f"serve-{len(started)}.log"
        with log.open("w") as out:
            process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        server = Tide(url=f"http://127.0.0.1:{port}", data_dir=data_dir, process=process)
        started.append(server)
        wait_for(lambda: answers(server.url) or process.poll() is not None, timeout=300, what="tide serve")
        assert process.poll() is None, log.read_text()
        return server

    yield start
    for server in started:
        for client in server.clients:
            client.close()
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
        kill_leftovers(server.data_dir)


@pytest.fixture
def tide(serve: Callable[..., Tide]) -> Tide:
    """The seed scenario's cluster: 4 nodes of 1 GPU."""
    return serve(nodes=4, gpus=1)


@dataclass
class Console:
    """What the page said on its console that a person would call an error."""

    errors: list[str] = field(default_factory=list)


@pytest.fixture
def page(browser: Any) -> Iterator[tuple[Any, Console]]:
    context = browser.new_context(viewport={"width": 1440, "height": 900}, device_scale_factor=1)
    opened = context.new_page()
    console = Console()
    opened.on("console", lambda m: console.errors.append(m.text) if m.type == "error" else None)
    opened.on("pageerror", lambda e: console.errors.append(f"uncaught: {e}"))
    yield opened, console
    context.close()
