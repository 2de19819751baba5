"""Where a live cycle's time goes at cluster scale: each phase of ``Engine._cycle``, in process.

The engine with the in-memory executor on a fresh SQLite file (or, with ``--db postgres``, a scratch
PostgreSQL database, dropped at the end), ``--nodes`` x 8 GPUs, 101 projects and
``--jobs`` jobs of ``bench/live_scale.py``'s mix written straight into the store; then ``--cycles`` cycles,
each timed whole and by phase (``sync_nodes``, ``observe``, ``record_observations``,
``release_taken_nodes``, ``read_snapshot`` (the snapshot kept in memory, read again where it changed),
``plan_cycle``, ``persist_plan``, ``stop_unwanted``,
``launch_waiting``). After the first cycle the heap is settled as in ``tide serve``'s engine process
(``api.server.engine.host.tune_engine_process``). The first cycle starts everything that fits; the last ones are a settled, full
cluster with thousands of jobs waiting; the last line gives their medians (cycle, cycle over ``plan_cycle``,
the snapshot's read as a share of the cycle). ``--profile`` adds cProfile's top functions over the last 3 cycles.
No HTTP and no second process: what ``bench/live_scale.py``'s cycle figures are made of.

    .venv/bin/python bench/live_cycle.py                    # 1,280 nodes, 5,120 jobs, 10 cycles
    .venv/bin/python bench/live_cycle.py --nodes 320 --jobs 1280 --profile
    .venv/bin/python bench/live_cycle.py --db postgres      # a scratch database on 127.0.0.1:5432
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_scale import job_bodies
from livekit import scratch_database
from sqlalchemy import select

from api.server import schemas
from api.server.engine.host import tune_engine_process
from api.server.services.jobs import new_job
from scheduler.core import Config, Node
from scheduler.engine import loop
from scheduler.engine.loop import Engine, EngineSettings
from scheduler.executors.fake import FakeExecutor
from scheduler.store.db import Database
from scheduler.store.migrate import upgrade
from scheduler.store.models import ProjectRow

PHASES = (
    "record_observations",
    "release_taken_nodes",
    "load_snapshot",  # the engine before it kept the snapshot in memory
    "read_snapshot",
    "plan_cycle",
    "persist_plan",
    "stop_unwanted",
    "launch_waiting",
)
PROJECTS = 101
SETTLED_FROM = 3  # the first cycles start everything and write every job's note: not settled yet
READ = ("load_snapshot", "read_snapshot")


def seeded(url: str, nodes: int, jobs: int) -> tuple[Database, Engine]:
    db = Database(url)
    upgrade(db)
    executor = FakeExecutor(tuple(Node(f"node-{i}", 8) for i in range(nodes)))
    engine = Engine(db, executor, EngineSettings(grace_period=0, core=Config(settle_seconds=0)))
    with db.write() as session:
        for i in range(PROJECTS):
            weight = 1 + i % 3
            session.add(
                ProjectRow(
                    name=f"p{i}",
                    deserved_gpus=100,
                    over_quota_weight=weight,
                    created_at=0.0,
                    fair_share_gpus=0,
                )
            )
    with db.write() as session:
        ids = dict(session.execute(select(ProjectRow.name, ProjectRow.id)).all())
        now = time.time()
        for k, (project, body) in enumerate(job_bodies(jobs, PROJECTS)):
            session.add(new_job(ids[project], schemas.JobCreate.model_validate(body), now + k * 1e-4))
    return db, engine


def timing(spent: dict[str, float]) -> None:
    """Wrap the cycle's phases (module functions of ``scheduler.engine.loop``) to add up their seconds."""

    def wrapped(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - started

        return run

    for name in PHASES:
        if hasattr(loop, name):
            setattr(loop, name, wrapped(name, getattr(loop, name)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1280)
    parser.add_argument("--jobs", type=int, default=5120)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--profile", action="store_true", help="cProfile's top 25 over the last 3 cycles")
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    spent: dict[str, float] = {}
    timing(spent)
    with ExitStack() as stack:
        if args.db == "postgres":
            url = stack.enter_context(scratch_database(args.postgres))
        else:
            directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="tide-cycle-"))
            url = f"sqlite+pysqlite:///{Path(directory) / 'tide.db'}"
        db, engine = seeded(url, args.nodes, args.jobs)
        profile = cProfile.Profile()
        settled: list[tuple[float, ...]] = []
        print(
            f"{args.nodes} x 8 GPUs, {args.jobs} jobs, {args.db}; ms per cycle, then its 4 costliest phases"
            f" (load average {os.getloadavg()[0]:.2f})"
        )
        for cycle in range(args.cycles):
            spent.clear()
            profiling = args.profile and cycle >= args.cycles - 3
            if profiling:
                profile.enable()
            started = time.perf_counter()
            engine.tick()
            took = (time.perf_counter() - started) * 1e3
            if cycle == 0:
                tune_engine_process()  # as tide serve's engine process does after its first cycle
            if profiling:
                profile.disable()
            if cycle >= SETTLED_FROM:
                settled.append((took, *(spent.get(n, 0.0) * 1e3 for n in ("plan_cycle", READ[0], READ[1]))))
            top = sorted(spent.items(), key=lambda kv: -kv[1])[:4]
            print(f"cycle {cycle:2d} {took:8.0f}  " + "  ".join(f"{k} {v * 1e3:.0f}" for k, v in top))
        engine.close()
        db.dispose()
    if settled:
        ratio = statistics.median(c / p for c, p, *_ in settled)
        share = statistics.median((a + b) / c for c, _, a, b in settled)
        print(
            f"settled cycles {SETTLED_FROM}-{args.cycles - 1}: median cycle {statistics.median(c[0] for c in settled):.0f} ms,"
            f" cycle / plan_cycle {ratio:.2f}, snapshot read / cycle {share:.1%}"
        )
    if args.profile:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
