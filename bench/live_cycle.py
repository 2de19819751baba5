"""Where a live cycle's time goes at cluster scale: each phase of ``Engine._cycle``, in process.

The engine with the in-memory executor on a fresh SQLite file (or, with ``--db postgres``, a scratch
PostgreSQL database, dropped at the end), ``--nodes`` x 8 GPUs, 101 projects and
``--jobs`` jobs of ``bench/live_scale.py``'s mix written straight into the store; then ``--cycles`` cycles,
each timed whole and by phase (``sync_nodes``, ``observe``, ``record_observations``,
``release_taken_nodes``, ``read_snapshot`` (the snapshot kept in memory, read again where it changed),
``plan_cycle``, ``persist_decisions``, ``stop_unwanted``,
``launch_waiting``, ``persist_notes``). After the first cycle the heap is settled as in ``tide serve``'s engine process
(``api.server.engine.host.tune_engine_process``). The first cycle starts everything that fits; the last ones are a settled, full
cluster with thousands of jobs waiting; the last line gives their medians (cycle, cycle over ``plan_cycle``,
the snapshot's read as a share of the cycle, the persist phase (``persist_decisions`` and ``persist_notes`` with their transactions), and the
first cycle's persist phase: the fill, thousands of starts). ``--profile`` adds cProfile's top functions over the
last 3 cycles. ``--churn N`` makes the settled cycles those of a busy cluster: before each cycle from the
second on, ``N`` running jobs end (their replicas exit 0) and ``N`` new ones are submitted, so each cycle
starts jobs, writes their events and moves places in line. ``--statements`` adds where the persist phase's
time went, statement by statement (SQL text cut short: time, executions, rows as the driver counts them), in the first cycle (the fill)
and in the settled ones. No HTTP and no second process: what ``bench/live_scale.py``'s cycle figures are made
of.

    .venv/bin/python bench/live_cycle.py                    # 1,280 nodes, 5,120 jobs, 10 cycles
    .venv/bin/python bench/live_cycle.py --nodes 320 --jobs 1280 --profile
    .venv/bin/python bench/live_cycle.py --db postgres      # a scratch database on 127.0.0.1:5432
    .venv/bin/python bench/live_cycle.py --db postgres --churn 20 --statements
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
from sqlalchemy import event, select

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
    "persist_decisions",
    "persist_notes",
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


class Statements:
    """The SQL statements run while ``on``: seconds, executions and rows by statement (its text cut short)."""

    def __init__(self, db: Database, engine: Engine, *, counting: bool) -> None:
        self.on = False
        self.spent: dict[str, list[float]] = {}
        self.persisted: list[float] = []  # each cycle's persist phase (its transaction whole), seconds
        self._started = 0.0
        phase_done = engine.metrics.phase_done

        def phase(name: str, seconds: float) -> None:
            phase_done(name, seconds)
            if name == "persist":
                self.persisted.append(seconds)

        def counted(write: Callable[..., Any]) -> Callable[..., Any]:
            def run(*args: Any, **kwargs: Any) -> Any:
                self.on = counting
                try:
                    return write(*args, **kwargs)
                finally:
                    self.on = False

            return run

        for name in ("persist_decisions", "persist_notes"):
            setattr(loop, name, counted(getattr(loop, name)))
        engine.metrics.phase_done = phase  # type: ignore[method-assign]

        @event.listens_for(db.engine, "before_cursor_execute")
        def _before(*_: Any) -> None:
            self._started = time.perf_counter()

        @event.listens_for(db.engine, "after_cursor_execute")
        def _after(
            _conn: Any, cursor: Any, statement: str, parameters: Any, _context: Any, many: bool
        ) -> None:
            if self.on:
                took = time.perf_counter() - self._started
                rows = len(parameters) if many else max(getattr(cursor, "rowcount", 0) or 0, 0)
                entry = self.spent.setdefault(" ".join(statement.split())[:100], [0.0, 0, 0])
                entry[0], entry[1], entry[2] = entry[0] + took, entry[1] + 1, entry[2] + rows

    def report(self, title: str, cycles: int, persist: float) -> None:
        total = sum(v[0] for v in self.spent.values())
        print(
            f"{title}: persist phase {persist * 1e3 / cycles:.1f} ms a cycle, of which SQL"
            f" {total * 1e3 / cycles:.1f} ms (statements: ms a cycle, executions, rows as the driver counts them)"
        )
        for statement, (took, runs, rows) in sorted(self.spent.items(), key=lambda kv: -kv[1][0])[:12]:
            print(f"  {took * 1e3 / cycles:8.1f} {runs / cycles:7.1f} {rows / cycles:8.0f}  {statement}")
        self.spent.clear()


def churn(db: Database, executor: FakeExecutor, count: int, step: int) -> None:
    """``count`` running jobs end (every replica exits 0) and ``count`` new ones are submitted."""
    running = sorted(
        {(r.spec.project, r.spec.job) for r in executor.records.values() if r.observation.running}
    )
    for project, job in running[:count]:
        for record in list(executor.records.values()):
            spec = record.spec
            if (spec.project, spec.job) == (project, job) and record.observation.running:
                executor.finish(project, job, spec.index, 0)
    with db.write() as session:
        ids = dict(session.execute(select(ProjectRow.name, ProjectRow.id)).all())
        now = time.time()
        for k, (project, body) in enumerate(job_bodies(count, PROJECTS, seed=step + 1)):
            session.add(
                new_job(ids[project], schemas.JobCreate.model_validate(body | {"name": f"c{step}-{k}"}), now)
            )


def summary(settled: list[tuple[float, ...]], statements: Statements) -> None:
    """The medians over the settled cycles (and their statements, if counted)."""
    if not settled:
        return
    ratio = statistics.median(c / p for c, p, *_ in settled)
    share = statistics.median((a + b) / c for c, _, a, b, _ in settled)
    print(
        f"settled cycles {SETTLED_FROM}-{SETTLED_FROM + len(settled) - 1}: median cycle {statistics.median(c[0] for c in settled):.0f} ms,"
        f" cycle / plan_cycle {ratio:.2f}, snapshot read / cycle {share:.1%},"
        f" persist {statistics.median(c[4] for c in settled):.1f} ms (the first cycle's: {statements.persisted[0] * 1e3:.0f} ms)"
    )
    if statements.spent:
        statements.report(
            f"settled cycles {SETTLED_FROM}-{SETTLED_FROM + len(settled) - 1}",
            len(settled),
            sum(c[4] for c in settled) / 1e3,
        )


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1280)
    parser.add_argument("--jobs", type=int, default=5120)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--profile", action="store_true", help="cProfile's top 25 over the last 3 cycles")
    parser.add_argument(
        "--churn", type=int, default=0, help="jobs that end and are submitted before each cycle"
    )
    parser.add_argument("--statements", action="store_true", help="the persist phase's time by SQL statement")
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    return parser.parse_args()


def main() -> None:
    args = arguments()
    spent: dict[str, float] = {}
    timing(spent)
    with ExitStack() as stack:
        if args.db == "postgres":
            url = stack.enter_context(scratch_database(args.postgres))
        else:
            directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="tide-cycle-"))
            url = f"sqlite+pysqlite:///{Path(directory) / 'tide.db'}"
        db, engine = seeded(url, args.nodes, args.jobs)
        executor = engine.executor
        assert isinstance(executor, FakeExecutor)
        statements = Statements(db, engine, counting=args.statements)
        profile = cProfile.Profile()
        settled: list[tuple[float, ...]] = []
        print(
            f"{args.nodes} x 8 GPUs, {args.jobs} jobs, {args.db}; ms per cycle, then its 4 costliest phases"
            f" (load average {os.getloadavg()[0]:.2f})"
        )
        for cycle in range(args.cycles):
            if cycle > 0 and args.churn:
                churn(db, executor, args.churn, cycle)
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
                settled.append(
                    (
                        took,
                        *(spent.get(n, 0.0) * 1e3 for n in ("plan_cycle", READ[0], READ[1])),
                        statements.persisted[-1] * 1e3,
                    )
                )
            if args.statements and cycle == 0:
                statements.report("cycle 0 (the fill)", 1, statements.persisted[-1])
            if args.statements and cycle == SETTLED_FROM - 1:
                statements.spent.clear()
            top = sorted(spent.items(), key=lambda kv: -kv[1])[:4]
            print(f"cycle {cycle:2d} {took:8.0f}  " + "  ".join(f"{k} {v * 1e3:.0f}" for k, v in top))
        engine.close()
        db.dispose()
    summary(settled, statements)
    if args.profile:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
