"""What the live benches share: a scratch PostgreSQL database, ``tide serve`` in a child process, a minimal
keep-alive HTTP client, the server's CPU time and peak memory, and its ``/metrics`` scraped.

Contract: ``serve(database_url, nodes=..., gpus_per_node=...)`` starts ``tide serve`` with the in-memory
executor (no processes: replicas are records) on a free loopback port, waits until it answers and yields
``(port, pid)``; it stops the server on the way out. ``database_url`` None means SQLite in a fresh data
directory. ``Connection`` speaks just enough HTTP/1.1 for Tide's answers (a full client such as httpx costs
several times more CPU per request, and the load generator shares the machine's cores with the server).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
import psycopg

from scheduler.elastic.agent.ports import free_port

sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
from serveargv import serve_argv

ADMIN = "bench-admin-token-" + "x" * 32
AUTH = {"Authorization": f"Bearer {ADMIN}"}


class Connection:
    """One keep-alive HTTP/1.1 connection: enough of the protocol for Tide's answers (Content-Length)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**26)
        return cls(reader, writer)

    async def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes = b""
    ) -> tuple[int, dict[str, str], bytes]:
        lines = [f"{method} {path} HTTP/1.1", "Host: bench", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        answer = {}
        for line in header_lines:
            if line:
                key, _, value = line.partition(":")
                answer[key.strip().lower()] = value.strip()
        length = int(answer.get("content-length", "0"))
        content = await self.reader.readexactly(length) if length else b""
        return int(status_line.split()[1]), answer, content

    def close(self) -> None:
        self.writer.close()


@contextmanager
def scratch_database(base: str) -> Iterator[str]:
    """A PostgreSQL database of its own on the server of ``base``, dropped on the way out."""
    name = f"tide_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield base.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(c) for c in task.read_text().split()]
    return found


def server_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of ``tide serve``'s API process and of its children (the engine process)."""
    return cpu_seconds(pid), sum(cpu_seconds(child) for child in children(pid))


def postgres_cpu() -> float:
    """CPU seconds of every PostgreSQL process on this machine so far (the server and its backends; Linux).
    A backend that ended meanwhile takes its seconds with it, so take it over a phase whose connections last."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError):
            if stat.read_text().split(" (", 1)[1].startswith("postgres)"):
                total += cpu_seconds(int(stat.parent.name))
    return total


def peak_rss_mib(pid: int) -> float:
    """Peak resident memory (VmHWM) of a process and its children together, MiB; 0 once gone."""
    total = 0
    for each in [pid, *children(pid)]:
        with suppress(OSError):
            found = re.search(r"VmHWM:\s+(\d+) kB", Path(f"/proc/{each}/status").read_text())
            total += int(found.group(1)) if found else 0
    return total / 1024


@contextmanager
def serve(
    database_url: str | None,
    *,
    nodes: int,
    gpus_per_node: int,
    cycle_period: float = 1.0,
    extra: tuple[str, ...] = (),
    tree: str | None = None,
    start_timeout: float = 120.0,
) -> Iterator[tuple[int, int]]:
    """``tide serve --executor memory`` on a free port; yields ``(port, pid)`` once it answers. ``tree``: run the
    service of that checkout instead (another commit, side by side: its packages come first on the path)."""
    port = free_port()
    data = tempfile.mkdtemp(prefix="tide-bench-")
    env = {**os.environ, "TIDE_ADMIN_TOKEN": ADMIN, "TIDE_DATA_DIR": data, "TIDE_EXECUTOR": "memory"}
    env.pop("TIDE_DATABASE_URL", None)
    if database_url is not None:
        env["TIDE_DATABASE_URL"] = database_url.replace("postgresql://", "postgresql+psycopg://")
    argv = serve_argv(port)
    argv += ["--nodes", str(nodes), "--gpus-per-node", str(gpus_per_node)]
    argv += ["--cycle-period", str(cycle_period), *extra]
    if tree is not None:
        env["PYTHONPATH"] = tree
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, cwd=tree)
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            with suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("tide serve did not start")
            time.sleep(0.2)
        yield port, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def scrape(port: int) -> dict[str, float]:
    """``/metrics`` as ``{'name{labels}': value}`` (comments left out)."""
    answer = httpx.get(f"http://127.0.0.1:{port}/metrics", headers=AUTH, timeout=30)
    answer.raise_for_status()
    values: dict[str, float] = {}
    for line in answer.text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            values[key] = float(value)
    return values


def histogram(values: dict[str, float], name: str) -> tuple[float, float, list[tuple[float, float]]]:
    """``(sum, count, [(upper bound, cumulative count), ...])`` of a Prometheus histogram without labels."""
    buckets = []
    for key, value in values.items():
        found = re.fullmatch(rf'{name}_bucket\{{le="([^"]+)"\}}', key)
        if found:
            buckets.append((float(found.group(1)), value))
    return values.get(f"{name}_sum", 0.0), values.get(f"{name}_count", 0.0), sorted(buckets)


def labelled_histogram(values: dict[str, float], name: str, label: str) -> tuple[float, float]:
    """``(sum, count)`` of the series of a Prometheus histogram with this one label (``'phase="plan"'``)."""
    return values.get(f"{name}_sum{{{label}}}", 0.0), values.get(f"{name}_count{{{label}}}", 0.0)


def quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """The ``q`` quantile of cumulative ``buckets``, linear inside the bucket (as PromQL's
    ``histogram_quantile``)."""
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return float("nan")
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return lower
