"""``GET /cluster`` at 81,920 GPUs (10,240 nodes x 8) while jobs are submitted all the time.

Two modes:

``build`` (in process, no HTTP): a store (a SQLite file, or with ``--db postgres`` a scratch PostgreSQL
database) written straight with ``--nodes`` nodes of 8 GPUs, 800 projects in 40 departments and
``--jobs`` jobs; every node full of running replicas (8, 4+4, 4+2+2 or 4+2+1+1 GPUs), the other jobs
pending. Times ``--builds`` builds of ``/cluster``'s answer (``api.server.routes.cluster``): the whole
answer and, where the tree builds it in parts, the projects' rows and the answer with the other parts kept
(what a submit costs); ``--profile`` adds cProfile's top functions.

``live``: ``tide serve --executor memory`` on ``--nodes`` x 8 GPUs (the whole loop, database and API),
800 projects in 40 departments, ``--fill`` gang jobs of 8 replicas (1, 2, 4 or 8 GPUs each: 2,800 of them
fill 10,240 nodes, the last ones wait) submitted and placed, until the nodes stay as they are for 3 s; then
for ``--seconds`` ``--clients`` clients submit one-GPU jobs back to back to a project of no quota (they
wait: the cluster is full and they may take nothing; the engine writes their notes) while one poller
reads ``GET /cluster`` whole (no ETag) one read after the other: its p50 / p99, the reads and submits
made, the body's size; and before, its p50 over 5 s with no submits (``idle_p50_ms``: answered from
memory, what sending the body costs). ``--tree`` runs the service of another checkout (side by side: a
base commit).

    .venv/bin/python bench/cluster_read.py build --profile
    .venv/bin/python bench/cluster_read.py live --db postgres [--tree /work/wt/cluster-base]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from livekit import AUTH, Connection, scratch_database, serve
from sqlalchemy import insert

from api.server.cache import _view_of
from api.server.routes import cluster
from api.server.schemas import ClusterPublic
from scheduler.store.db import Database
from scheduler.store.migrate import upgrade
from scheduler.store.models import DepartmentRow, JobRow, NodeRow, ProjectRow, ReplicaRow

GPUS_PER_NODE = 8
PROJECTS = 800
DEPARTMENTS = 40
DESERVED = 100
LAYOUTS = ((8,), (4, 4), (4, 2, 2), (4, 2, 1, 1))  # replicas' GPUs on one full node
JSON_HEADERS = {**AUTH, "Content-Type": "application/json"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


@contextmanager
def database_url(db: str, postgres: str) -> Iterator[str]:
    with ExitStack() as stack:
        if db == "postgres":
            yield stack.enter_context(scratch_database(postgres)).replace(
                "postgresql://", "postgresql+psycopg://"
            )
        else:
            directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="tide-cluster-"))
            yield f"sqlite+pysqlite:///{Path(directory) / 'tide.db'}"


def seed(url: str, nodes: int, jobs: int) -> Any:
    """The store of the ``build`` mode (see the module); the ``Database``."""
    db = Database(url)
    upgrade(db)
    now = time.time()
    with db.write() as session:
        session.execute(
            insert(DepartmentRow),
            [
                {
                    "id": d + 1,
                    "name": f"d{d}",
                    "deserved_gpus": DESERVED * PROJECTS // DEPARTMENTS,
                    "created_at": now,
                }
                for d in range(DEPARTMENTS)
            ],
        )
        session.execute(
            insert(ProjectRow),
            [
                {
                    "id": p + 1,
                    "name": f"p{p}",
                    "deserved_gpus": DESERVED,
                    "over_quota_weight": 1 + p % 3,
                    "department_id": p % DEPARTMENTS + 1,
                    "created_at": now,
                    "usage_gpu_seconds": 3600.0 * (p % 7),
                }
                for p in range(PROJECTS)
            ],
        )
        session.execute(
            insert(NodeRow),
            [{"name": f"node-{n}", "gpus": GPUS_PER_NODE, "state": "ready"} for n in range(nodes)],
        )
        replicas: list[dict[str, Any]] = []
        placed: Counter[int] = Counter()
        job = 0
        for n in range(nodes):
            first = 0
            for size in LAYOUTS[n % len(LAYOUTS)]:
                j = job % jobs
                replicas.append(
                    {
                        "job_id": j + 1,
                        "index": placed[j],
                        "node": f"node-{n}",
                        "gpus": size,
                        "gpu_ids": list(range(first, first + size)),
                        "desired": "run",
                        "status": "running",
                        "pid": 100_000 + len(replicas),
                        "created_at": now,
                        "started_at": now,
                    }
                )
                placed[j] += 1
                first += size
                job += 1
        session.execute(
            insert(JobRow),
            [
                {
                    "id": j + 1,
                    "project_id": j % PROJECTS + 1,
                    "name": f"j{j}",
                    "status": "running" if placed[j] else "pending",
                    "workers": max(0, placed[j] - 1),
                    "min_replicas": max(1, placed[j]),
                    "max_replicas": max(1, placed[j]),
                    "gpus_per_replica": 1 + j % 8,
                    "priority": 0,
                    "command": ["train"],
                    "env": {},
                    "interactive": False,
                    "grace_period": 30.0,
                    "created_at": now,
                    "submitted_at": now,
                    "restarts": 0,
                    "generation": 0,
                }
                for j in range(jobs)
            ],
        )
        session.execute(insert(ReplicaRow), replicas)
    return db


def build_mode(args: argparse.Namespace) -> None:
    class Engine:
        is_leader = True

    with database_url(args.db, args.postgres) as url:
        started = time.perf_counter()
        db = seed(url, args.nodes, args.jobs)
        print(
            f"seeded {args.nodes} nodes, {args.jobs} jobs ({args.db}) in {time.perf_counter() - started:.1f} s"
        )

        class Svc:
            pass

        svc: Any = Svc()
        svc.db, svc.engine = db, Engine()
        parts = getattr(cluster, "base_part", None)  # this tree: three parts; a base's: one build

        def whole() -> bytes:
            if parts is None:
                built: bytes = cluster._cluster(svc)
                return built
            base = _view_of(parts(svc), 0, 0.0)
            rows = _view_of(cluster.rows_part(svc, base), 0, 0.0)
            return bytes(cluster._cluster(svc, base, rows).body)

        body = whole()
        ClusterPublic.model_validate_json(body)  # the answer is the schema's
        wholes: list[float] = []
        rows: list[float] = []
        answers: list[float] = []
        profile = cProfile.Profile()
        for _ in range(args.builds):
            if args.profile:
                profile.enable()
            t = time.perf_counter()
            whole()
            wholes.append(time.perf_counter() - t)
            if parts is not None:
                base = _view_of(parts(svc), 0, 0.0)
                t = time.perf_counter()
                kept = _view_of(cluster.rows_part(svc, base), 0, 0.0)
                rows.append(time.perf_counter() - t)
                t = time.perf_counter()
                cluster._cluster(svc, base, kept)
                answers.append(time.perf_counter() - t)
            if args.profile:
                profile.disable()
        line = f"whole answer median {statistics.median(wholes) * 1e3:.1f} ms"
        if rows:
            line += (
                f"; with the base kept, the projects' rows {statistics.median(rows) * 1e3:.1f} ms and the"
                f" answer from both kept parts {statistics.median(answers) * 1e3:.1f} ms"
            )
        print(f"{line}; {len(body) / 1024:.0f} KiB; load average {os.getloadavg()[0]:.2f}")
        db.dispose()
    if args.profile:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(30)


async def post(connection: Connection, path: str, body: dict[str, Any]) -> int:
    status, _, _ = await connection.request("POST", path, JSON_HEADERS, json.dumps(body).encode())
    return status


async def setup(port: int, fill: int, statuses: Counter[int]) -> None:
    connection = await Connection.open(port)
    try:
        for d in range(DEPARTMENTS):
            body = {"name": f"d{d}", "deserved_gpus": DESERVED * PROJECTS // DEPARTMENTS}
            statuses[await post(connection, "/api/v1/departments", body)] += 1
        for p in range(PROJECTS):
            body = {"name": f"p{p}", "deserved_gpus": DESERVED, "department": f"d{p % DEPARTMENTS}"}
            statuses[await post(connection, "/api/v1/projects", body)] += 1
        statuses[await post(connection, "/api/v1/projects", {"name": "q", "deserved_gpus": 0})] += 1
    finally:
        connection.close()

    async def client(c: int) -> None:
        connection = await Connection.open(port)
        try:
            for j in range(c, fill, 16):
                gpus = (1, 2, 4, 8)[j % 4]
                body = {"name": f"f{j}", "workers": 7, "gpus_per_replica": gpus, "command": ["train"]}
                statuses[await post(connection, f"/api/v1/projects/p{j % PROJECTS}/jobs", body)] += 1
        finally:
            connection.close()

    await asyncio.gather(*(client(c) for c in range(16)))


async def placed(port: int, wanted: int, timeout: float) -> int:
    """Waits until ``wanted`` GPUs are allocated (or ``timeout``); the GPUs allocated."""
    connection = await Connection.open(port)
    deadline = time.monotonic() + timeout
    allocated = 0
    try:
        while time.monotonic() < deadline:
            status, _, content = await connection.request("GET", "/api/v1/cluster", AUTH)
            if status == 200:
                allocated = json.loads(content)["allocated_gpus"]
                if allocated >= wanted:
                    break
            await asyncio.sleep(1.0)
        return allocated
    finally:
        connection.close()


async def settled(port: int, timeout: float) -> None:
    """Waits until the nodes are the same in two reads 3 s apart (reclaims between projects are over)."""
    connection = await Connection.open(port)
    deadline = time.monotonic() + timeout
    last = None
    try:
        while time.monotonic() < deadline:
            _, _, content = await connection.request("GET", "/api/v1/cluster", AUTH)
            nodes = json.loads(content)["nodes"]
            if nodes == last:
                return
            last = nodes
            await asyncio.sleep(3.0)
    finally:
        connection.close()


async def measure(port: int, seconds: float, clients: int, statuses: Counter[int]) -> dict[str, Any]:
    stop = time.monotonic() + seconds
    submits = 0

    async def submitter(c: int) -> None:
        nonlocal submits
        connection = await Connection.open(port)
        try:
            k = 0
            while time.monotonic() < stop:
                body = {"name": f"s{c}-{k}", "gpus_per_replica": 1, "command": ["train"]}
                statuses[await post(connection, "/api/v1/projects/q/jobs", body)] += 1
                submits += 1
                k += 1
        finally:
            connection.close()

    async def poller() -> tuple[list[float], int]:
        connection = await Connection.open(port)
        times, size = [], 0
        try:
            while time.monotonic() < stop:
                started = time.perf_counter()
                status, _, content = await connection.request("GET", "/api/v1/cluster", AUTH)
                times.append(time.perf_counter() - started)
                statuses[status] += 1
                size = len(content)
            return times, size
        finally:
            connection.close()

    load = os.getloadavg()[0]
    (times, size), *_ = await asyncio.gather(poller(), *(submitter(c) for c in range(clients)))
    return {
        "cluster_p50_ms": round(statistics.median(times) * 1e3, 1),
        "cluster_p99_ms": round(percentile(times, 0.99) * 1e3, 1),
        "reads": len(times),
        "submits_per_s": round(submits / seconds, 1),
        "cluster_kib": round(size / 1024),
        "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],
    }


def live_mode(args: argparse.Namespace) -> None:
    statuses: Counter[int] = Counter()
    with ExitStack() as stack:
        url = None if args.db == "sqlite" else stack.enter_context(scratch_database(args.postgres))
        port, _pid = stack.enter_context(
            serve(url, nodes=args.nodes, gpus_per_node=GPUS_PER_NODE, cycle_period=1.0, tree=args.tree)
        )
        started = time.perf_counter()
        asyncio.run(setup(port, args.fill, statuses))
        wanted = sum(8 * (1, 2, 4, 8)[j % 4] for j in range(args.fill))
        target = int(0.95 * min(wanted, args.nodes * GPUS_PER_NODE))  # gangs of whole nodes leave gaps
        allocated = asyncio.run(placed(port, target, args.fill_timeout))
        asyncio.run(settled(port, args.fill_timeout))
        setup_s = time.perf_counter() - started
        idle = asyncio.run(measure(port, 5.0, 0, statuses))  # nothing changes: answered from memory
        row = asyncio.run(measure(port, args.seconds, args.clients, statuses))
        row["idle_p50_ms"] = idle["cluster_p50_ms"]
    row = {
        "tree": args.tree or "this",
        "database": args.db,
        "nodes": args.nodes,
        "allocated_before": allocated,
        "setup_s": round(setup_s, 1),
        **row,
        "http_statuses": {str(k): v for k, v in sorted(statuses.items())},
    }
    print(json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("build", "live"))
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--nodes", type=int, default=10240)
    parser.add_argument("--jobs", type=int, default=40960, help="build: jobs in the store")
    parser.add_argument("--builds", type=int, default=5, help="build: builds timed")
    parser.add_argument("--profile", action="store_true", help="build: cProfile's top 30")
    parser.add_argument("--fill", type=int, default=2800, help="live: gang jobs submitted before measuring")
    parser.add_argument("--fill-timeout", type=float, default=300.0)
    parser.add_argument("--seconds", type=float, default=30.0, help="live: the measured window")
    parser.add_argument("--clients", type=int, default=16, help="live: clients submitting in the window")
    parser.add_argument("--tree", help="live: run the service of this checkout (side by side)")
    args = parser.parse_args()
    build_mode(args) if args.mode == "build" else live_mode(args)


if __name__ == "__main__":
    main()
