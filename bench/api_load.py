"""API load: dashboard pollers and submitters against a real ``tide serve`` on PostgreSQL with 1,000 jobs.

Creates a database of its own on the PostgreSQL at ``--postgres`` (dropped at the end), starts
``tide serve`` on it (the in-memory executor, ``--nodes`` x ``--gpus-per-node`` GPUs), submits ``--jobs``
jobs over 10 projects, then runs two phases, each ``--seconds`` long, and prints a table per phase:

1a. ``--pollers`` concurrent clients, each asking ``GET /api/v1/cluster`` back to back, sending the ETag of
    its last answer as ``If-None-Match`` as the dashboard does (``api/server/dashboard/static/api.js``): the most
    the server answers (with 100 clients always waiting, latency is 100 / throughput);
1b. the same pollers together offering ``--rate`` requests/s (each one every pollers/rate seconds); latency
    counts from when a request was due, so falling behind shows;
2.  the same pollers cycling through the dashboard's three reads (``/cluster``, ``/jobs``,
    ``/events?limit=50``) at ``--dashboard-rate`` reads/s in all (default 150: 100 dashboards polling
    every 2 s), while ``--submitters`` clients submit jobs back to back.

Columns: requests, requests/s, p50 and p99 latency (ms), and how many answered 200, 304 or another status.
The load generator is one process on asyncio with a minimal HTTP/1.1 keep-alive client (a full client such
as httpx costs several times more CPU per request); it shares the machine's cores with the server, so the
server's figures are a lower bound. Targets (docs/observability.md): ``/cluster`` >= 1,000 requests/s with p99 <= 50 ms
under 100 pollers; submits p99 <= 200 ms meanwhile.

    .venv/bin/python bench/api_load.py [--pollers 100] [--seconds 10] [--jobs 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field

import httpx
from livekit import ADMIN, Connection, scratch_database, serve, server_cpu

PROJECTS = 10


@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))

    def add(self, endpoint: str, seconds: float, status: int) -> None:
        self.latencies[endpoint].append(seconds)
        self.statuses[endpoint][status] += 1


async def poller(port: int, paths: list[str], stop: float, stats: Stats, interval: float) -> None:
    """Back to back (``interval`` 0), or one request every ``interval`` seconds: then latency counts from
    when the request was due, so a server that falls behind shows it (no coordinated omission)."""
    connection = await Connection.open(port)
    tags: dict[str, str] = {}
    auth = {"Authorization": f"Bearer {ADMIN}"}
    due = time.perf_counter() + random.uniform(0, interval)
    try:
        turn = 0
        while due < stop:
            path = paths[turn % len(paths)]
            turn += 1
            headers = {**auth, "If-None-Match": tags[path]} if path in tags else auth
            if interval:
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
            started = due if interval else time.perf_counter()
            due = due + interval if interval else time.perf_counter()
            status, answer, _ = await connection.request("GET", "/api/v1" + path, headers)
            stats.add("GET " + path.split("?")[0], time.perf_counter() - started, status)
            if "etag" in answer:
                tags[path] = answer["etag"]
    finally:
        connection.close()


async def submitter(port: int, number: int, stop: float, stats: Stats) -> None:
    connection = await Connection.open(port)
    headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    try:
        sent = 0
        while time.perf_counter() < stop:
            body = {"name": f"load-{number}-{sent}", "command": ["sleep", "600"]}
            sent += 1
            started = time.perf_counter()
            status, _, _ = await connection.request(
                "POST", f"/api/v1/projects/p{sent % PROJECTS}/jobs", headers, json.dumps(body).encode()
            )
            stats.add("POST /projects/{p}/jobs", time.perf_counter() - started, status)
    finally:
        connection.close()


async def phase(
    port: int, pollers: int, paths: list[str], submitters: int, seconds: float, *, rate: float = 0
) -> tuple[Stats, float]:
    """``rate``: requests/s of all pollers together (0: each goes back to back)."""
    stats = Stats()
    started = time.perf_counter()
    stop = started + seconds
    interval = pollers / rate if rate else 0.0
    tasks = [
        poller(port, paths[i % len(paths) :] + paths[: i % len(paths)], stop, stats, interval)
        for i in range(pollers)
    ]
    tasks += [submitter(port, i, stop, stats) for i in range(submitters)]
    await asyncio.gather(*tasks)
    return stats, time.perf_counter() - started


def table(title: str, stats: Stats, elapsed: float, cpu: tuple[float, float]) -> str:
    total = sum(len(v) for v in stats.latencies.values())
    api, engine = cpu
    title += (
        f"; API process CPU {api / elapsed:.0%} of a core, {api / max(total, 1) * 1e3:.2f} ms per request; "
        f"engine process {engine / elapsed:.0%}"
    )
    rows = [
        f"\n{title}",
        f"{'endpoint':<26}{'requests':>10}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'200':>8}{'304':>8}{'other':>8}",
    ]
    for endpoint, values in sorted(stats.latencies.items()):
        ordered = sorted(values)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        codes = stats.statuses[endpoint]
        ok = codes.get(200, 0) + codes.get(201, 0)
        other = sum(n for code, n in codes.items() if code not in (200, 201, 304))
        rows.append(
            f"{endpoint:<26}{len(values):>10}{len(values) / elapsed:>10.0f}{statistics.median(values) * 1e3:>9.1f}"
            f"{p99 * 1e3:>9.1f}{ok:>8}{codes.get(304, 0):>8}{other:>8}"
        )
    return "\n".join(rows)


def load_jobs(port: int, jobs: int) -> None:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}/api/v1", headers=headers, timeout=60) as client:
        for i in range(PROJECTS):
            client.post("/projects", json={"name": f"p{i}", "deserved_gpus": 4}).raise_for_status()
        for i in range(jobs):
            body = {"name": f"job-{i}", "workers": i % 3, "command": ["sleep", "600"]}
            client.post(f"/projects/p{i % PROJECTS}/jobs", json=body).raise_for_status()
        time.sleep(3)  # a few cycles: jobs start, the rest wait with their reasons


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--pollers", type=int, default=100)
    parser.add_argument("--submitters", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=1000.0, help="1b: /cluster requests/s offered")
    parser.add_argument(
        "--dashboard-rate", type=float, default=150.0, help="2: reads/s offered (100 dashboards every 2 s)"
    )
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    args = parser.parse_args()
    with (
        scratch_database(args.postgres) as database,
        serve(database, nodes=args.nodes, gpus_per_node=args.gpus_per_node) as (port, pid),
    ):
        load_jobs(port, args.jobs)
        print(
            f"tide serve on PostgreSQL, {args.jobs} jobs, {args.nodes}x{args.gpus_per_node} GPUs, "
            f"{os.cpu_count()} cores shared with the load generator"
        )

        def run(title: str, paths: list[str], submitters: int, rate: float) -> None:
            before = server_cpu(pid)
            stats, elapsed = asyncio.run(
                phase(port, args.pollers, paths, submitters, args.seconds, rate=rate)
            )
            after = server_cpu(pid)
            cpu = (after[0] - before[0], after[1] - before[1])
            print(table(f"{title}, {elapsed:.1f} s", stats, elapsed, cpu))

        run(f"1a: {args.pollers} pollers on GET /cluster, back to back", ["/cluster"], 0, 0)
        run(
            f"1b: {args.pollers} pollers on GET /cluster, {args.rate:.0f}/s offered",
            ["/cluster"],
            0,
            args.rate,
        )
        paths = ["/cluster", "/jobs", "/events?limit=50"]
        title = f"2: {args.pollers} dashboards ({args.dashboard_rate:.0f} reads/s offered) + {args.submitters} submitters"
        run(title, paths, args.submitters, args.dashboard_rate)


if __name__ == "__main__":
    main()
