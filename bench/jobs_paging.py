"""GET /jobs and GET /cluster at cluster scale on PostgreSQL: what a read costs when the server pages the jobs.

Creates a database of its own on the PostgreSQL at ``--postgres`` (dropped at the end), starts ``tide serve``
on it (the in-memory executor, ``--nodes`` x ``--gpus-per-node`` GPUs), creates ``--projects`` projects in
``--departments`` departments over REST and writes ``--jobs`` jobs through the store (the submit route's own
``new_job``; bench/live_scale.py measures submitting over REST), waits until the loop has placed them (95 %
of the GPUs allocated, or ``--fill-timeout``), then times each read ``--samples`` times. Before each read it
sends a write (a token deletion that finds nothing: the API counts every write), so every read is built
afresh from the database rather than served from the view cache: the cost a dashboard's poll pays after a
change. ``--base TREE`` runs the same against another checkout first (say a worktree of the commit before
paging), side by side in one run; reads that checkout does not know are left out there.

Columns: the read, then per service the median and p90 latency (ms) and the answer's size. ``all pages``
walks every page of 5,000 (what ``tide list --json`` does now) and counts the time of all its requests.

    .venv/bin/python bench/jobs_paging.py [--base /work/wt/base] [--nodes 10240] [--jobs 40960]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from livekit import AUTH, scratch_database, serve
from sqlalchemy import select

from api.server import schemas
from api.server.services.jobs import new_job
from scheduler.store.db import Database
from scheduler.store.models import ProjectRow

PAGED = "paged"  # the reads only a service that pages on the server answers as asked


@dataclass(frozen=True)
class Read:
    label: str
    path: str
    needs: str | None = None


READS = [
    Read("GET /jobs (no parameters)", "/jobs"),
    Read("GET /jobs?limit=100 (dashboard's first page)", "/jobs?limit=100"),
    Read("GET /jobs?limit=100&cursor=... (halfway)", "CURSOR", PAGED),
    Read("GET /jobs?project=p3&limit=100", "/jobs?project=p3&limit=100"),
    Read("GET /jobs?waiting=true&order=line&limit=5", "/jobs?waiting=true&order=line&limit=5", PAGED),
    Read("GET /jobs?status=pending&order=line&limit=100", "/jobs?status=pending&order=line&limit=100", PAGED),
    Read("GET /cluster", "/cluster"),
    Read("all pages of 5,000 (tide list --json)", "WALK", PAGED),
]


def job_body(i: int) -> dict[str, object]:
    """As tests/browser/test_dashboard_scale.py: 1, 2, 4 or 8 GPUs a replica; every other one elastic."""
    gpus, workers = (1, 2, 4, 8)[i % 4], i % 3
    body: dict[str, object] = {
        "name": f"j{i}",
        "workers": workers,
        "gpus_per_replica": gpus,
        "command": ["x"],
    }
    if i % 2:
        body |= {"min_replicas": 1, "max_replicas": workers + 3}
    return body


def fill(client: httpx.Client, url: str, args: argparse.Namespace) -> None:
    per = args.projects // args.departments
    for d in range(args.departments):
        client.post("/departments", json={"name": f"d{d}", "deserved_gpus": per * 10}).raise_for_status()
    for p in range(args.projects):
        body = {"name": f"p{p}", "deserved_gpus": 10, "department": f"d{p // per}"}
        client.post("/projects", json=body).raise_for_status()
    db = Database(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with db.write() as session:
            ids = dict(session.execute(select(ProjectRow.name, ProjectRow.id)).all())
            now = time.time()
            for i in range(args.jobs):
                job = schemas.JobCreate.model_validate(job_body(i))
                session.add(new_job(ids[f"p{i % args.projects}"], job, now + i * 1e-4))
    finally:
        db.dispose()


def allocated(client: httpx.Client) -> int:
    return int(client.get("/cluster").json()["allocated_gpus"])


def timed(client: httpx.Client, path: str) -> tuple[float, int, httpx.Response]:
    client.delete("/projects/p0/tokens/999999999")  # a write: the next read is built afresh
    started = time.perf_counter()
    answer = client.get(path)
    took = time.perf_counter() - started
    answer.raise_for_status()
    return took, len(answer.content), answer


def walk(client: httpx.Client) -> tuple[float, int, httpx.Response]:
    client.delete("/projects/p0/tokens/999999999")
    took, size, path = 0.0, 0, "/jobs?limit=5000"
    while True:
        started = time.perf_counter()
        answer = client.get(path)
        took += time.perf_counter() - started
        answer.raise_for_status()
        size += len(answer.content)
        after = answer.headers.get("x-next-cursor")
        if after is None:
            return took, size, answer
        path = f"/jobs?limit=5000&cursor={after}"


def measure(tree: str | None, args: argparse.Namespace) -> dict[str, tuple[float, float, int] | None]:
    service = {"nodes": args.nodes, "gpus_per_node": args.gpus_per_node, "tree": tree, "start_timeout": 300}
    with scratch_database(args.postgres) as url, serve(url, **service) as (port, _):
        root = f"http://127.0.0.1:{port}/api/v1"
        with httpx.Client(base_url=root, headers=AUTH, timeout=300) as client:
            fill(client, url, args)
            total, deadline = args.nodes * args.gpus_per_node, time.monotonic() + args.fill_timeout
            while allocated(client) < 0.95 * total and time.monotonic() < deadline:
                time.sleep(2)
            print(f"  {tree or 'this tree'}: {allocated(client):,} of {total:,} GPUs allocated", flush=True)
            return reads(client, args)


def reads(client: httpx.Client, args: argparse.Namespace) -> dict[str, tuple[float, float, int] | None]:
    found: dict[str, tuple[float, float, int] | None] = {}
    paged = "x-next-cursor" in client.get("/jobs?limit=1").headers
    mid, seen = None, 0
    while paged and seen < args.jobs // 2:  # the page halfway down starts after half the jobs
        step = min(10_000, args.jobs // 2 - seen)
        answer = client.get(f"/jobs?limit={step}" + (f"&cursor={mid}" if mid else ""))
        mid, seen = answer.headers.get("x-next-cursor"), seen + step
    for read in READS:
        if read.needs == PAGED and not paged:
            found[read.label] = None
            continue
        times, size = [], 0
        for _ in range(args.samples):
            if read.path == "WALK":
                took, size, _ = walk(client)
            else:
                path = f"/jobs?limit=100&cursor={mid}" if read.path == "CURSOR" else read.path
                took, size, _ = timed(client, path)
            times.append(took * 1e3)
        times.sort()
        found[read.label] = (statistics.median(times), times[int(0.9 * (len(times) - 1))], size)
        print(f"    {read.label:48} {cell(found[read.label])}", flush=True)
    return found


def cell(figures: tuple[float, float, int] | None) -> str:
    if figures is None:
        return f"{'-':>9} {'-':>9} {'-':>10}"
    p50, p90, size = figures
    return f"{p50:9.1f} {p90:9.1f} {size / 1024:8.0f} K"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--postgres", default=os.environ.get("TIDE_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
    )
    parser.add_argument("--nodes", type=int, default=10_240)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=40_960)
    parser.add_argument("--projects", type=int, default=800)
    parser.add_argument("--departments", type=int, default=40)
    parser.add_argument("--samples", type=int, default=11)
    parser.add_argument("--fill-timeout", type=float, default=300)
    parser.add_argument("--base", help="another checkout to measure first, side by side")
    args = parser.parse_args()
    runs = [("base", args.base), ("this tree", None)] if args.base else [("this tree", None)]
    results = {name: measure(tree, args) for name, tree in runs}
    print(
        f"\n{args.nodes:,} nodes x {args.gpus_per_node} GPUs, {args.jobs:,} jobs, {args.projects} projects, "
        f"PostgreSQL; each read after a write (built afresh), {args.samples} samples"
    )
    head = "".join(f" | {name:^30}" for name, _ in runs)
    print(f"{'read':48}{head}")
    print(f"{'':48}" + " | " + " | ".join(f"{'p50 ms':>9} {'p90 ms':>9} {'size':>10}" for _ in runs))
    for read in READS:
        print(f"{read.label:48}" + "".join(" | " + cell(results[name][read.label]) for name, _ in runs))
    print(f"load average: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
