"""The live service under churn: how often running jobs are resized, and how soon again.

Starts ``tide serve --executor memory`` (the whole loop, database and API; replicas are records) on
``--nodes`` x 8 GPUs with ``--projects`` projects (quota 80 % of the GPUs split evenly, weights 1-3), then
for ``--minutes`` submits jobs at a steady rate (Poisson arrivals, seeded): 1-8 GPUs per replica, half of
them elastic (min 1, max 2-4 times the size asked), each with a finite run time (exponential, mean
``--run-seconds``, 60 s to 30 min) counted from its start, after which the load generator deletes it, as a
job that finished would leave. Every project sets ``resize_cost_seconds`` (``--resize-cost``; a service
that does not know the field gets the projects without it). From the service's own events at the end:

- ``resizes_per_job_hour``: grows and shrinks of running jobs per hour that jobs ran (job-hours);
- ``min_resize_interval_s``: the shortest time between two resizes of one job (a start, grow, shrink or
  eviction, then a grow, shrink or eviction), leaving out those for a guarantee (R2: a reclaim for a
  project then below its quota, a consolidation, or a grow of a job whose project is below its quota) and
  for a higher priority of the job's own project (R10); ``inside_settle``: how many such resizes came less than the R18 settle time (ten resize costs)
  after the previous one;
- ``evictions_per_hour``: whole-job evictions per hour of the run;
- ``idle_gpu_pct``: the mean share of GPUs not allocated (``GET /cluster`` every 5 s after the first
  minute) while jobs wait (``pending_gpus`` > 0).

``--baseline DIR`` runs a second service from another checkout (the previous commit) at the same time,
with the same arrivals and run times, and prints both rows: the comparison the two share a machine for.

    .venv/bin/python bench/churn.py --minutes 2                     # this tree alone, a short run
    .venv/bin/python bench/churn.py --baseline /path/to/previous --json
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import math
import random
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from livekit import AUTH, Connection, serve

GPUS_PER_NODE = 8
JSON_HEADERS = {**AUTH, "Content-Type": "application/json"}
SETTLE_RESTARTS = 10  # R18: a job is left alone for ten of its resize costs (Config.settle_restarts)


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float  # seconds after the load starts
    project: str
    body: dict[str, Any]
    run_seconds: float


def arrivals(args: argparse.Namespace) -> list[Arrival]:
    """The same jobs for every service compared: Poisson arrivals over ``--minutes`` (seeded)."""
    rng = random.Random(args.seed)
    out, t, i = [], 0.0, 0
    rate = args.arrivals_per_minute / 60.0
    while True:
        t += rng.expovariate(rate)
        if t >= args.minutes * 60:
            return out
        project = f"p{min(int(rng.paretovariate(1.2)) - 1, args.projects - 1)}"
        gpus = rng.choice([1, 1, 2, 4, 8])
        size = rng.choice([1, 2, 2, 4, 4, 8])
        body: dict[str, Any] = {"name": f"j{i}", "gpus_per_replica": gpus, "command": ["train"]}
        if i % 2 == 0:  # half elastic: starts at 1, grows up to 2-4 times the size asked
            body |= {"min_replicas": 1, "max_replicas": size * rng.choice([2, 3, 4]), "workers": 0}
        else:
            body |= {"workers": size - 1}
        run = min(max(rng.expovariate(1.0 / args.run_seconds), 60.0), 1800.0)
        out.append(Arrival(t, project, body, run))
        i += 1


class Client:
    """A keep-alive connection that opens again when the server closed it (idle for its keep-alive timeout)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.connection: Connection | None = None

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        raw = json.dumps(body).encode() if body is not None else b""
        for attempt in (0, 1):
            if self.connection is None:
                self.connection = await Connection.open(self.port)
            try:
                status, _, content = await self.connection.request(method, path, JSON_HEADERS, raw)
                return status, (json.loads(content) if content else None)
            except (asyncio.IncompleteReadError, ConnectionError):
                self.connection.close()
                self.connection = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


async def request(
    client: Client, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, Any]:
    return await client.request(method, path, body)


async def create_projects(port: int, args: argparse.Namespace) -> tuple[dict[str, int], bool]:
    """The projects, with the resize cost where the service takes it; (quotas, whether it took it)."""
    rng = random.Random(7)
    deserved = int(args.nodes * GPUS_PER_NODE * 0.8) // args.projects
    connection = Client(port)
    quotas, costed = {}, True
    try:
        for i in range(args.projects):
            body: dict[str, Any] = {
                "name": f"p{i}",
                "deserved_gpus": deserved,
                "over_quota_weight": rng.choice([1, 2, 3]),
            }
            if costed:
                status, _ = await request(
                    connection, "POST", "/api/v1/projects", body | {"resize_cost_seconds": args.resize_cost}
                )
                if status == 422:  # a service before resize costs
                    costed = False
            if not costed:
                status, _ = await request(connection, "POST", "/api/v1/projects", body)
            if status != 201:
                raise SystemExit(f"project p{i}: HTTP {status}")
            quotas[f"p{i}"] = deserved
    finally:
        connection.close()
    return quotas, costed


async def drive(
    port: int, jobs: list[Arrival], seconds: float, samples: list[tuple[float, int, int]]
) -> None:
    """For ``seconds``: submit each job at its time; delete it once it ran its run time since its first start
    (read from the service's events); sample the cluster every 5 s. Then stop, leaving what runs running."""
    started = time.monotonic()
    index = {(a.project, a.body["name"]): n for n, a in enumerate(jobs)}

    async def submit() -> None:
        client = Client(port)
        try:
            for job in jobs:
                wait = job.at - (time.monotonic() - started)
                if wait > 0:
                    await asyncio.sleep(wait)
                status, _ = await client.request("POST", f"/api/v1/projects/{job.project}/jobs", job.body)
                if status != 201:
                    raise SystemExit(f"submit {job.body['name']}: HTTP {status}")
        finally:
            client.close()

    async def finish() -> None:
        client, after, first = Client(port), 0, set()
        due: list[tuple[float, int]] = []  # (epoch to delete it at, job number)
        try:
            while True:
                status, page = await client.request("GET", f"/api/v1/events?after_id={after}&limit=10000")
                for e in page if status == 200 else ():
                    after = e["id"]
                    key = (e["project"], e["job"])
                    if e["kind"] == "start" and key in index and key not in first:
                        first.add(key)
                        heapq.heappush(due, (_epoch(e["time"]) + jobs[index[key]].run_seconds, index[key]))
                while due and due[0][0] <= time.time():
                    _, n = heapq.heappop(due)
                    await client.request(
                        "DELETE", f"/api/v1/projects/{jobs[n].project}/jobs/{jobs[n].body['name']}"
                    )
                await asyncio.sleep(2.0)
        finally:
            client.close()

    async def sample() -> None:
        client = Client(port)
        try:
            while True:
                status, cluster = await client.request("GET", "/api/v1/cluster")
                if status == 200:
                    pending = sum(p["pending_gpus"] for p in cluster["projects"])
                    samples.append((time.monotonic() - started, cluster["free_gpus"], pending))
                await asyncio.sleep(5.0)
        finally:
            client.close()

    tasks = [asyncio.create_task(t()) for t in (submit, finish, sample)]
    done, _ = await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
    for task in tasks:
        task.cancel()
    for task in done:
        if task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def events(port: int) -> list[dict[str, Any]]:
    connection = Client(port)
    out: list[dict[str, Any]] = []
    try:
        after = 0
        while True:
            status, page = await request(connection, "GET", f"/api/v1/events?after_id={after}&limit=10000")
            if status != 200 or not page:
                return out
            out += page
            after = page[-1]["id"]
            if len(page) < 10000:
                return out
    finally:
        connection.close()


def figures(
    evs: list[dict[str, Any]], jobs: list[Arrival], quotas: dict[str, int], cost: float, seconds: float
) -> dict[str, Any]:
    gpus = {(a.project, a.body["name"]): a.body["gpus_per_replica"] for a in jobs}
    held: dict[str, int] = defaultdict(int)  # each project's GPUs, replayed from the events
    last: dict[tuple[str, str], float] = {}
    running_since: dict[tuple[str, str], float] = {}
    size: dict[tuple[str, str], int] = defaultdict(int)
    job_seconds, resizes, evictions, intervals, inside = 0.0, 0, 0, [], 0
    settle = max(10.0, SETTLE_RESTARTS * cost)
    end = max((_epoch(e["time"]) for e in evs), default=0.0)
    for e in evs:
        key, t, kind = (e["project"], e["job"]), _epoch(e["time"]), e["kind"]
        g = gpus.get(key, 0)
        n = len(e["replicas"])
        guarantee_or_priority = e.get("cause") in ("preempt", "consolidate")
        if kind == "grow":  # growth owed to its project's guarantee (R2) ignores the settle time
            guarantee_or_priority = held[key[0]] < quotas.get(key[0], 0)
        if e.get("cause") == "reclaim" and e["reason"].startswith("reclaimed for "):
            claimant = e["reason"].split()[2].split("/")[0]
            guarantee_or_priority = held[claimant] < quotas.get(claimant, 0)  # R2: below its quota
        if kind in ("grow", "shrink", "evict") and key in last and not guarantee_or_priority:
            gap = t - last[key]
            intervals.append(gap)
            inside += gap < settle
        if kind in ("grow", "shrink"):
            resizes += 1
        if kind == "evict":
            evictions += 1
        if kind in ("start", "grow"):
            held[key[0]] += n * g
            size[key] += n
            running_since.setdefault(key, t)
        elif kind in ("shrink",):
            held[key[0]] -= n * g
            size[key] -= n
        elif kind in ("evict", "cancel", "finish", "fail"):
            held[key[0]] -= size[key] * g
            size[key] = 0
            if key in running_since:
                job_seconds += t - running_since.pop(key)
        if kind in ("start", "grow", "shrink", "evict"):
            last[key] = t
        elif kind in ("cancel", "finish", "fail"):
            last.pop(key, None)
    job_seconds += sum(end - t for t in running_since.values())
    return {
        "job_hours": round(job_seconds / 3600, 1),
        "resizes": resizes,
        "resizes_per_job_hour": round(resizes / (job_seconds / 3600), 3) if job_seconds else math.nan,
        "min_resize_interval_s": round(min(intervals), 1) if intervals else math.nan,
        "inside_settle": inside,
        "settle_s": settle,
        "evictions": evictions,
        "evictions_per_hour": round(evictions / (seconds / 3600), 1),
    }


async def run_all(args: argparse.Namespace, trees: list[tuple[str, str | None]]) -> list[dict[str, Any]]:
    jobs = arrivals(args)
    rows: list[dict[str, Any]] = []
    with _servers(args, trees) as ports:
        setups = [await create_projects(port, args) for port in ports]
        seconds = args.minutes * 60
        samples: list[list[tuple[float, int, int]]] = [[] for _ in ports]
        await asyncio.gather(*(drive(port, jobs, seconds, s) for port, s in zip(ports, samples, strict=True)))
        for (label, _), port, (quotas, costed), sample in zip(trees, ports, setups, samples, strict=True):
            evs = await events(port)
            if args.events:
                Path(f"{args.events}.{len(rows)}.json").write_text(json.dumps(evs))
            row = {"service": label, "resize_cost_s": args.resize_cost if costed else None, "jobs": len(jobs)}
            row |= figures(evs, jobs, quotas, args.resize_cost if costed else 0.0, seconds)
            total = args.nodes * GPUS_PER_NODE
            busy = [(idle, pending) for t, idle, pending in sample if t >= 60]
            waiting = [idle for idle, pending in busy if pending > 0]
            row["idle_gpu_pct"] = (
                round(100 * sum(waiting) / (len(waiting) * total), 2) if waiting else math.nan
            )
            row["idle_gpu_pct_all"] = (
                round(100 * sum(i for i, _ in busy) / (len(busy) * total), 2) if busy else math.nan
            )
            rows.append(row)
    return rows


class _servers:
    """Start one service per tree (all at once), stop them all on the way out."""

    def __init__(self, args: argparse.Namespace, trees: list[tuple[str, str | None]]) -> None:
        self.managers = [
            serve(
                None,
                nodes=args.nodes,
                gpus_per_node=GPUS_PER_NODE,
                cycle_period=1.0,
                tree=tree,
                start_timeout=900,
            )
            for _, tree in trees
        ]

    def __enter__(self) -> list[int]:
        return [m.__enter__()[0] for m in self.managers]

    def __exit__(self, *exc: object) -> None:
        for m in self.managers:
            m.__exit__(None, None, None)


def table(rows: list[dict[str, Any]]) -> str:
    cols = [
        ("service", "service"),
        ("resize_cost_s", "resize cost s"),
        ("jobs", "jobs"),
        ("job_hours", "job-hours"),
        ("resizes", "resizes"),
        ("resizes_per_job_hour", "resizes / job-hour"),
        ("min_resize_interval_s", "min resize interval s (R2, R10 aside)"),
        ("inside_settle", "inside settle"),
        ("evictions_per_hour", "evictions / h"),
        ("idle_gpu_pct", "idle GPUs % (jobs waiting)"),
    ]
    lines = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(k)) for k, _ in cols) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1280)
    p.add_argument("--projects", type=int, default=100)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--arrivals-per-minute", type=float, default=300.0)
    p.add_argument("--run-seconds", type=float, default=300.0, help="mean run time of a job")
    p.add_argument("--resize-cost", type=float, default=30.0, help="each project's resize_cost_seconds")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--baseline", help="another checkout (the previous commit) to run side by side")
    p.add_argument("--json", action="store_true")
    p.add_argument("--events", help="also write each service's events to EVENTS.0.json, EVENTS.1.json")
    args = p.parse_args()
    trees: list[tuple[str, str | None]] = [("this tree", None)]
    if args.baseline:
        trees.append((f"baseline {Path(args.baseline).name}", str(Path(args.baseline).resolve())))
    rows = asyncio.run(run_all(args, trees))
    if args.json:
        print(json.dumps(rows if len(rows) > 1 else rows[0], indent=2))
    else:
        print(table(rows))


if __name__ == "__main__":
    main()
