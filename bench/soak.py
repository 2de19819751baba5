"""The soak: ``tide serve`` on PostgreSQL for a long run of churn and faults, then an audit that nothing was lost.

Two runs (``--executor``): the memory executor at 1,280 x 8 GPUs (replicas are records), and the local
executor on a small cluster (4 x 4 GPUs) whose replicas are real sleeping processes. Each run gets a private
PostgreSQL server (``tests/integration/pgserver.py``: ``initdb`` into a temporary directory; the machine's
shared server is never stopped) and, for the whole run:

- jobs arrive (a Poisson stream, ``--rate`` a second) and finish (a lifetime each: a ``sleep`` that ends on
  the local executor, a delete on the memory one; some are cancelled early): the mix of ``bench/cycle.py``
  (elastic and rigid, 1-8 GPUs a replica), three priorities, one job in ten interactive, projects in three
  departments, and a project ``owed`` that holds nothing until an R2 probe (below) submits for it;
- faults, in a shuffled round-robin so that each kind comes as often (``--per-kind``, else as many as fit):
  ``service_kill`` (the leading service SIGKILLed, started again), ``leader_takeover`` (a second service
  stands by, the leader is SIGKILLed, the standby must lead), ``db_outage`` (PostgreSQL stopped for 10-30 s,
  ``pg_ctl stop -m fast``), ``node_drain`` / ``node_cordon`` / ``node_lost`` (the node routes; the node is
  uncordoned a fault later), ``replica_kill`` (a replica's process group SIGKILLed; local executor only:
  memory replicas have no process), ``submit_burst`` (500 submits from 8 clients at once) and
  ``bad_requests`` (malformed bodies, unknown names, bad tokens, wrong methods: each must be a 4xx);
- between faults (not right after an outage), an R2 probe: ``owed`` submits a gang of two whole nodes and
  the wait until both replicas run is measured against ``grace + 2 x (cycle period + the loop's mean cycle
  time during the probe) + --r2-slack`` (docs/rules.md R2: grace + one cycle; the second cycle, the cycle's
  own time on a loaded machine and the slack are what the measurement from outside adds).

The auditor (``audit``) runs after every fault and at the end. From the database: no GPU booked twice (a
node's live replicas over its GPUs, or two holding one GPU id), no job lost or duplicated (each accepted
submit is in the database once; nothing is there that was not submitted; a submit whose connection broke
may be either), every plan the loop would make from the persisted state keeps the core's invariants
(``scheduler.core.invariants``). From the executor's own view: on the local executor no orphan process (a
process started under the run's data directory that no service and no live replica owns) and no replica the
database thinks running whose process is gone, both confirmed after an adoption window; on the memory
executor, the service's log shows no start the executor refused because the GPU was held. At the end: no
5xx answer outside the documented 503s of a database outage; every R2 probe within its bound; each service
process's resident memory grew <= 10 % from its warm-up to its last sample. ``--json`` prints the figures.

    .venv/bin/python bench/soak.py --executor memory --minutes 60        # the target run, memory executor
    .venv/bin/python bench/soak.py --executor local --minutes 60         # the target run, real processes
    .venv/bin/python bench/soak.py --executor local --minutes 3 --json   # what the test runs

The figures and the target are in docs/faults.md ("The soak").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "bench", ROOT / "tests" / "integration"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import httpx  # noqa: E402
from cycle import _job, _skewed  # noqa: E402  the job mix of the pure cycle's bench
from livekit import ADMIN, AUTH, Connection, children  # noqa: E402
from pgserver import PrivateServer, find_bindir  # noqa: E402  tests/integration: a server we may stop
from sqlalchemy import text  # noqa: E402

from scheduler.core.cycle import plan_cycle  # noqa: E402
from scheduler.core.invariants import check_invariants  # noqa: E402
from scheduler.core.model import Config  # noqa: E402
from scheduler.elastic.agent.ports import free_port  # noqa: E402
from scheduler.store.db import Database  # noqa: E402
from scheduler.store.mapper import load_snapshot  # noqa: E402

KINDS = (
    "service_kill",
    "leader_takeover",
    "db_outage",
    "node_drain",
    "node_cordon",
    "node_lost",
    "replica_kill",
    "submit_burst",
    "bad_requests",
)
OUTAGES = ("service_kill", "leader_takeover", "db_outage")  # the faults during which the API may be away
VIOLATIONS = (
    "gpu_double_booked",
    "job_lost",
    "job_duplicated",
    "orphan_process",
    "replica_not_running",
    "invariant",
    "r2_bound",
    "http_5xx",
    "bad_request_accepted",
    "rss_growth",
    "not_recovered",
)
LIVE = ("starting", "running", "terminating")  # replica statuses that hold GPUs
JSON_HEADERS = {**AUTH, "Content-Type": "application/json"}
RSS_GROWTH = 0.10


@dataclass(frozen=True)
class Profile:
    executor: str
    nodes: int
    gpus_per_node: int
    projects: int
    deserved: int
    rate: float  # job arrivals a second
    lifetime: tuple[float, float]  # seconds a job lives after its submit
    initial: int  # jobs submitted before the first fault
    cycle_period: float
    grace_period: float
    sizes: tuple[int, ...]  # GPUs a replica
    r2_gpus: int  # GPUs a replica of the R2 probe's 2-replica gang


PROFILES = {
    "memory": Profile("memory", 1280, 8, 30, 300, 8.0, (60.0, 300.0), 1600, 1.0, 0.0, (1, 2, 4, 8), 8),
    # 0.12 arrivals a second is what 16 GPUs finish: at 0.25 the queue grew all run (1,025 waiting after 60
    # minutes), and each engine's memory grew with the jobs it holds, which the memory check cannot tell from
    # a leak. A soak holds a steady state.
    "local": Profile("local", 4, 4, 4, 2, 0.12, (15.0, 60.0), 6, 0.5, 2.0, (1, 2), 2),
}


@dataclass
class Ledger:
    """What the load generator knows: every submit's fate, every answer's status and time."""

    accepted: dict[tuple[str, str], float] = field(default_factory=dict)  # (project, job) -> submit time
    uncertain: set[tuple[str, str]] = field(default_factory=set)  # the connection broke: taken or not
    in_flight: set[tuple[str, str]] = field(default_factory=set)  # sent, not answered yet
    refused: Counter[int] = field(default_factory=Counter)
    answers: list[tuple[float, int, str]] = field(default_factory=list)  # (time, status, what)
    submit_latency: list[float] = field(default_factory=list)
    removed: set[tuple[str, str]] = field(default_factory=set)  # deleted once finished: its record goes
    # a delete whose connection broke may have removed a finished job's record before the answer was sent
    refused_keys: dict[tuple[str, str], int] = field(default_factory=dict)  # a submit refused: its status
    delete_broken: set[tuple[str, str]] = field(default_factory=set)  # a delete whose answer was lost
    transport_errors: int = 0
    deleted: int = 0


@dataclass
class Fault:
    kind: str
    began: float
    ended: float = 0.0
    detail: str = ""


# ------------------------------------------------------------------------------------------------ the auditor


def gpu_double_booked(db: Database) -> list[str]:
    """Nodes whose launched, not exited replicas (a pid and no exit code: what holds GPUs, as the engine
    counts them) hold more GPUs than the node has, or one GPU id twice. A replica placed but not launched
    yet books no GPU id: it waits for its GPUs to be released (the core's invariants judge placements)."""
    found = []
    with db.read() as session:
        sizes = dict(session.execute(text("SELECT name, gpus FROM nodes")).all())
        rows = session.execute(
            text(
                "SELECT r.node, r.gpus, r.gpu_ids, r.id, j.name, r.status FROM replicas r"
                " JOIN jobs j ON j.id = r.job_id WHERE r.pid IS NOT NULL AND r.exit_code IS NULL"
            )
        ).all()
    held: dict[str, int] = Counter()
    holders: dict[str, list[str]] = {}
    ids: dict[str, dict[int, int]] = {}
    for node, gpus, stored, replica, job, status in rows:
        held[node] += gpus
        holders.setdefault(node, []).append(f"{job}#{replica} {status} {gpus}")
        for gpu in (json.loads(stored) if isinstance(stored, str) else stored) or ():
            other = ids.setdefault(node, {}).setdefault(gpu, replica)
            if other != replica:
                found.append(f"GPU {gpu} of {node} is held by replicas {other} and {replica}")
    found += [
        f"node {n} holds {g} GPUs of {sizes.get(n, 0)}: {', '.join(holders[n])}"
        for n, g in held.items()
        if g > sizes.get(n, 0)
    ]
    return found


def jobs_accounted(db: Database, ledger: Ledger) -> tuple[list[str], list[str]]:
    """``(lost, duplicated)``: accepted submits missing from the database, and jobs there twice or never
    submitted (a submit whose connection broke may be either way). The load goes on while this runs: a
    submit answered after the database was read is not judged lost, one sent before it is not unknown."""
    accepted = list(ledger.accepted)  # answered 201 before the read below
    with db.read() as session:
        rows = session.execute(
            text("SELECT p.name, j.name FROM jobs j JOIN projects p ON p.id = j.project_id")
        ).all()
    known = {*ledger.accepted, *ledger.uncertain, *ledger.in_flight}  # sent before the read, or since
    counts = Counter((p, j) for p, j in rows)
    lost = [
        f"{p}/{j} was accepted but is not in the database"
        for p, j in accepted
        if (p, j) not in counts and (p, j) not in ledger.removed and (p, j) not in ledger.delete_broken
    ]
    duplicated = [f"{p}/{j} is in the database {n} times" for (p, j), n in counts.items() if n > 1]
    duplicated += [
        f"{p}/{j} is in the database but was never accepted"
        + (f" (its submit was answered {ledger.refused_keys[p, j]})" if (p, j) in ledger.refused_keys else "")
        for p, j in counts
        if (p, j) not in known
    ]
    return lost, duplicated


def plan_invariants(db: Database, config: Config) -> list[str]:
    """The core's invariants on the plan the loop would make now from the persisted state."""
    with db.read() as session:
        state = load_snapshot(session).state
    now = time.time()
    return check_invariants(state, plan_cycle(state, config, now=now), config, now=now)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] not in "ZX"
    except (OSError, IndexError):
        return False


def _pgid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[2])
    except (OSError, IndexError, ValueError):
        return None


def marked_processes(data_dir: Path) -> list[int]:
    """Live processes started under ``data_dir`` (the services and every replica inherit the variable)."""
    marker = f"\0TIDE_DATA_DIR={data_dir}\0".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            with contextlib.suppress(OSError):
                if marker in b"\0" + (proc / "environ").read_bytes() and _alive(int(proc.name)):
                    found.append(int(proc.name))
    return found


def process_view(db: Database, data_dir: Path, services: Iterable[int]) -> tuple[set[int], set[int]]:
    """``(orphans, gone)``: processes under ``data_dir`` in neither a live service's process group (each
    service runs in one of its own: its API, its engine) nor a live replica's (each replica's process leads
    one); replicas the database has running whose process is gone."""
    with db.read() as session:
        rows = session.execute(
            text("SELECT id, pid, status FROM replicas WHERE status IN ('starting','running','terminating')")
        ).all()
    groups = {pid for _, pid, _ in rows if pid} | set(services)
    orphans = {p for p in marked_processes(data_dir) if _pgid(p) not in groups}
    gone = {rid for rid, pid, status in rows if status == "running" and pid and not _alive(pid)}
    return orphans, gone


@dataclass
class Auditor:
    """The checks of one run; ``check`` after every fault, ``final`` at the end."""

    db_url: str
    ledger: Ledger
    config: Config
    data_dir: Path | None = None  # the local executor's: processes are checked
    window: float = 10.0  # seconds a suspect process finding must last (the adoption window)
    logs: list[Path] = field(default_factory=list)
    found: dict[str, list[str]] = field(default_factory=dict)
    audits: int = 0

    def add(self, kind: str, sentences: Iterable[str]) -> None:
        for sentence in sentences:
            self.found.setdefault(kind, []).append(sentence)

    def check(self, services: Callable[[], list[int]] = list, *, confirm: bool = True) -> None:
        db = Database(self.db_url, pool=2)
        try:
            self.audits += 1
            self.add("gpu_double_booked", gpu_double_booked(db))
            lost, duplicated = jobs_accounted(db, self.ledger)
            self.add("job_lost", lost)
            self.add("job_duplicated", duplicated)
            self.add("invariant", plan_invariants(db, self.config))
            if self.data_dir is not None:
                orphans, gone = process_view(db, self.data_dir, services())
                if confirm and (orphans or gone):
                    time.sleep(self.window)  # what the service adopts or records within the window is fine
                    later_orphans, later_gone = process_view(db, self.data_dir, services())
                    orphans, gone = orphans & later_orphans, gone & later_gone
                self.add(
                    "orphan_process",
                    (f"process {p} is owned by no service or replica" for p in sorted(orphans)),
                )
                self.add(
                    "replica_not_running",
                    (f"replica {r} is running in the database, its process gone" for r in sorted(gone)),
                )
        finally:
            db.dispose()
        for log in self.logs:
            with contextlib.suppress(OSError):
                self.add(
                    "gpu_double_booked",
                    (
                        f"{log.name}: {line.strip()}"
                        for line in log.read_text(errors="replace").splitlines()
                        if "are in use" in line
                    ),
                )
        for kind in list(self.found):  # the same finding seen by two audits counts once
            self.found[kind] = list(dict.fromkeys(self.found[kind]))


def http_5xx(answers: Iterable[tuple[float, int, str]], outages: list[tuple[float, float]]) -> list[str]:
    """5xx answers outside the 503s of a database outage (``outages``: its windows)."""
    return [
        f"{what} answered {code} at {at:.1f}"
        for at, code, what in answers
        if code >= 500 and not (code == 503 and any(a <= at <= b for a, b in outages))
    ]


def rss_growth(samples: dict[str, list[tuple[float, float]]], warmup: float, least: float) -> list[str]:
    """Processes whose resident memory grew more than 10 % from the first sample after ``warmup`` seconds of
    their life to the last; processes that lived less than ``least`` seconds after their warm-up are left out."""
    found = []
    for name, series in samples.items():
        if not series:
            continue
        born = series[0][0]
        warm = [(t, rss) for t, rss in series if t - born >= warmup]
        if len(warm) < 2 or warm[-1][0] - warm[0][0] < least:
            continue
        if warm[-1][1] > warm[0][1] * (1 + RSS_GROWTH):
            found.append(f"{name}: {warm[0][1]:.0f} -> {warm[-1][1]:.0f} MiB")
    return found


# ------------------------------------------------------------------------------------------------ the services


def vm_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Service:
    """One ``tide serve`` process on the run's database and data directory."""

    def __init__(self, run: Run, name: str) -> None:
        self.run, self.name = run, name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = run.data_dir.parent / f"{name}.log"
        profile = run.profile
        env = {**os.environ, "TIDE_ADMIN_TOKEN": ADMIN, "TIDE_DATA_DIR": str(run.data_dir)}
        env.pop("TIDE_DATABASE_URL", None)
        argv = [sys.executable, "-m", "api.client.cli.main", "serve", "--port", str(self.port)]
        argv += ["--log-level", "warning", "--executor", profile.executor, "--database-url", run.pg_url]
        argv += ["--nodes", str(profile.nodes), "--gpus-per-node", str(profile.gpus_per_node)]
        argv += ["--cycle-period", str(profile.cycle_period), "--grace-period", str(profile.grace_period)]
        argv += ["--settle-time", "0", "--eta-every", "0"]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                argv, env=env, stdout=out, stderr=out, cwd=ROOT, start_new_session=True
            )
        self.started = time.monotonic()

    def role(self) -> str | None:
        try:
            return str(httpx.get(f"{self.url}/healthz", timeout=3).json().get("role"))
        except (httpx.HTTPError, ValueError, AttributeError):
            return None

    def pids(self) -> list[int]:
        """The API process and its engine process, while they live."""
        if self.process.poll() is not None:
            return []
        return [self.process.pid, *children(self.process.pid)]

    def engine_pids(self) -> list[int]:
        found = []
        for pid in children(self.process.pid) if self.process.poll() is None else []:
            with contextlib.suppress(OSError):
                if b"api.server.engine.host" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
        return found

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()


async def wait_until(predicate: Callable[[], object], timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await asyncio.to_thread(predicate):
            return True
        await asyncio.sleep(step)
    return False


# ------------------------------------------------------------------------------------------------ the run


class Run:
    def __init__(self, profile: Profile, args: argparse.Namespace, pg: Any) -> None:
        self.profile, self.args, self.pg = profile, args, pg
        self.pg_url = pg.url
        self.rng = random.Random(args.seed)
        self.root = Path(tempfile.mkdtemp(prefix=f"tide-soak-{profile.executor}-"))
        self.data_dir = self.root / "data"
        self.data_dir.mkdir()
        self.ledger = Ledger()
        self.faults: list[Fault] = []
        self.services: list[Service] = []
        self.primary: Service | None = None
        self.names = 0
        self.due: list[tuple[float, str, str]] = []  # (when, project, job) to delete
        self.r2: list[tuple[float, float, bool]] = []  # (wait s, bound s, counted)
        self.cycle_means: list[float] = []  # the loop's mean cycle time during each R2 probe
        self.rss: dict[str, list[tuple[float, float]]] = {}
        self.loads: list[tuple[float, float, float]] = []
        self.to_restore: list[str] = []
        self.stopping = False
        self.started = time.monotonic()
        config = Config(settle_seconds=0.0)
        self.auditor = Auditor(
            pg.url,
            self.ledger,
            config,
            data_dir=self.data_dir if profile.executor == "local" else None,
            window=max(10.0, profile.grace_period + 4 * profile.cycle_period),
        )

    # -- services
    def start_service(self) -> Service:
        service = Service(self, f"service-{len(self.services)}")
        self.services.append(service)
        self.auditor.logs.append(service.log)
        return service

    def service_pids(self) -> list[int]:
        """The live services' API processes: each leads the process group of its API and engine."""
        return [s.process.pid for s in self.services if s.process.poll() is None]

    async def leading(self, service: Service, timeout: float = 120.0) -> bool:
        return await wait_until(lambda: service.role() == "leader", timeout)

    # -- HTTP
    async def request(
        self, connection: list[Connection | None], method: str, path: str, body: Any = None, what: str = ""
    ) -> tuple[int, bytes]:
        """One request to the primary service on a kept connection (opened again after a break); ``-1`` for a
        broken connection or none to open."""
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        try:
            if connection[0] is None:
                assert self.primary is not None
                connection[0] = await asyncio.wait_for(Connection.open(self.primary.port), 5)
            status, _, content = await asyncio.wait_for(
                connection[0].request(method, path, JSON_HEADERS, data), self.args.request_timeout
            )
        except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            if connection[0] is not None:
                connection[0].close()
            connection[0] = None
            self.ledger.transport_errors += 1
            return -1, b""
        self.ledger.answers.append(
            (time.monotonic(), status, what or f"{method} {path.split('?', maxsplit=1)[0]}")
        )
        return status, content

    def job_body(self, interactive_ok: bool = True) -> tuple[str, dict[str, Any], float]:
        profile, rng = self.profile, self.rng
        self.names += 1
        project = f"p{_skewed(rng, profile.projects)}"
        job = _job(rng, project, f"j{self.names}", 0.0)
        gpus = min(job.gpus_per_replica, max(profile.sizes))
        if gpus not in profile.sizes:
            gpus = rng.choice(profile.sizes)
        lifetime = rng.uniform(*profile.lifetime)
        interactive = interactive_ok and rng.random() < 0.1
        body: dict[str, Any] = {
            "name": job.name,
            "workers": job.min_replicas - 1,
            "min_replicas": job.min_replicas,
            "max_replicas": job.min_replicas if interactive else job.max_replicas,
            "gpus_per_replica": gpus,
            "priority": rng.choice((0, 5, 10)),
            "interactive": interactive,
            "command": ["sleep", f"{lifetime:.0f}"],
            "grace_period": profile.grace_period,
        }
        return project, body, lifetime

    async def submit(
        self, connection: list[Connection | None], project: str, body: dict[str, Any], lifetime: float
    ) -> None:
        key = (project, body["name"])
        began = time.perf_counter()
        self.ledger.in_flight.add(key)
        status, _ = await self.request(connection, "POST", f"/api/v1/projects/{project}/jobs", body, "submit")
        if status == 201:
            self.ledger.submit_latency.append(time.perf_counter() - began)
            self.ledger.accepted[key] = time.time()
            self.ledger.in_flight.discard(key)
            if self.profile.executor == "memory" or self.rng.random() < 0.1:  # memory jobs end by a delete
                self.due.append(
                    (time.monotonic() + lifetime * (1 if self.profile.executor == "memory" else 0.5), *key)
                )
        elif status == -1:
            self.ledger.uncertain.add(key)
            self.ledger.in_flight.discard(key)
        else:
            self.ledger.in_flight.discard(key)
            self.ledger.refused[status] += 1
            self.ledger.refused_keys[key] = status

    # -- load
    async def arrivals(self) -> None:
        connection: list[Connection | None] = [None]
        while not self.stopping:
            await asyncio.sleep(self.rng.expovariate(self.profile.rate))
            await self.submit(connection, *self.job_body())

    async def departures(self) -> None:
        connection: list[Connection | None] = [None]
        while not self.stopping:
            now = time.monotonic()
            ready = [d for d in self.due if d[0] <= now]
            self.due = [d for d in self.due if d[0] > now]
            for _, project, job in ready:
                status, _ = await self.request(
                    connection, "DELETE", f"/api/v1/projects/{project}/jobs/{job}", what="delete"
                )
                broken = (project, job) in self.ledger.delete_broken
                if status == 200 or (status == 404 and broken):  # 404: an earlier try did it, its answer lost
                    self.ledger.deleted += 1
                    self.ledger.removed.add((project, job))  # a finished job's delete removes its record
                if status == -1:
                    self.ledger.delete_broken.add((project, job))
                if status in (-1, 503) and not self.stopping:
                    self.due.append((time.monotonic() + 5, project, job))
            await asyncio.sleep(0.5)

    async def sampler(self) -> None:
        while not self.stopping:
            now = time.monotonic()
            for service in self.services:
                for pid in service.pids()[:1] + service.engine_pids():
                    rss = vm_rss_mib(pid)
                    kind = "api" if pid == service.process.pid else "engine"
                    if rss is not None:
                        self.rss.setdefault(f"{service.name} {kind} {pid}", []).append((now, rss))
            self.loads.append(os.getloadavg())
            await asyncio.sleep(self.args.sample_every)

    async def setup(self) -> None:
        profile = self.profile
        connection: list[Connection | None] = [None]
        per = (profile.projects + 2) // 3
        for d in range(3):
            body = {"name": f"d{d}", "deserved_gpus": profile.deserved * per}
            await self.request(connection, "POST", "/api/v1/departments", body)
        for i in range(profile.projects):
            body = {"name": f"p{i}", "deserved_gpus": profile.deserved, "over_quota_weight": 1 + i % 3}
            status, content = await self.request(
                connection, "POST", "/api/v1/projects", {**body, "department": f"d{i % 3}"}
            )
            if status != 201:
                raise SystemExit(f"could not create project p{i}: {status} {content[:200]!r}")
        owed = 2 * profile.r2_gpus
        status, content = await self.request(
            connection, "POST", "/api/v1/projects", {"name": "owed", "deserved_gpus": owed}
        )
        if status != 201:
            raise SystemExit(f"could not create project owed: {status} {content[:200]!r}")
        clients = [[None] for _ in range(8)]

        async def fill(share: list[Connection | None]) -> None:
            for _ in range(profile.initial // 8 + 1):
                await self.submit(share, *self.job_body())

        await asyncio.gather(*(fill(c) for c in clients))

    # -- faults
    def schedule(self) -> list[str]:
        chosen = self.args.faults.split(",") if self.args.faults else KINDS
        kinds = [
            k for k in KINDS if k in chosen and not (k == "replica_kill" and self.profile.executor != "local")
        ]
        if self.args.per_kind:
            rounds = self.args.per_kind
        else:
            rounds = max(
                1, int((self.args.minutes * 60 - self.args.warmup) / (len(kinds) * self.args.fault_every))
            )
        order = []
        for _ in range(rounds):
            shuffled = kinds[:]
            self.rng.shuffle(shuffled)
            order += shuffled
        return order

    async def faults_loop(self) -> None:
        order = self.schedule()
        end = self.started + self.args.minutes * 60
        await asyncio.sleep(max(0.0, self.args.warmup - (time.monotonic() - self.started)))
        for i, kind in enumerate(order):
            left = end - time.monotonic()
            slot = left / (len(order) - i)
            began = time.monotonic()
            await self.restore_nodes()
            fault = Fault(kind, time.monotonic())
            self.faults.append(fault)
            try:
                fault.detail = await getattr(self, kind)()
            except Exception as error:  # a fault that could not be injected is reported, the soak goes on
                fault.detail = f"failed: {type(error).__name__}: {error}"
            fault.ended = time.monotonic()
            if not await self.recovered():
                self.auditor.add("not_recovered", [f"after {kind} the service did not lead within 120 s"])
            audited = time.monotonic()
            known = {k: len(v) for k, v in self.auditor.found.items()}
            await asyncio.to_thread(self.auditor.check, self.service_pids)
            for k, v in self.auditor.found.items():
                for sentence in v[known.get(k, 0) :][:3]:
                    print(f"          violation {k}: {sentence}", file=sys.stderr, flush=True)
            audit_s = time.monotonic() - audited
            await (
                self.restore_nodes()
            )  # R2 with a node away is no guarantee: quotas beyond the cluster are cut
            if kind not in OUTAGES:  # R2's bound holds outside the outages (and the recovery after them)
                await self.r2_probe()
            print(
                f"{fault.began - self.started:7.1f} s  {kind}: {fault.detail}; audit {audit_s:.1f} s;"
                f" R2 {f'{self.r2[-1][0]:.2f} s' if kind not in OUTAGES else 'not probed'};"
                f" violations {sum(map(len, self.auditor.found.values()))}",
                file=sys.stderr,
                flush=True,
            )
            await asyncio.sleep(max(0.0, slot - (time.monotonic() - began)))

    async def recovered(self) -> bool:
        assert self.primary is not None
        primary = self.primary
        return await wait_until(lambda: primary.role() == "leader", 120)

    async def service_kill(self) -> str:
        assert self.primary is not None
        old = self.primary
        await asyncio.to_thread(old.kill)
        self.primary = self.start_service()
        ok = await self.leading(self.primary)
        return f"{old.name} killed; {self.primary.name} led after {time.monotonic() - self.faults[-1].began:.1f} s ({ok})"

    async def leader_takeover(self) -> str:
        assert self.primary is not None
        old, standby = self.primary, self.start_service()
        await wait_until(lambda: standby.role() == "standby", 120)
        killed = time.monotonic()
        await asyncio.to_thread(old.kill)
        self.primary = standby
        ok = await self.leading(standby)
        return f"{old.name} killed; standby {standby.name} led {time.monotonic() - killed:.1f} s later ({ok})"

    async def db_outage(self) -> str:
        seconds = self.rng.uniform(*self.args.outage)
        await asyncio.to_thread(self.pg.stop)
        await asyncio.sleep(seconds)
        await asyncio.to_thread(self.pg.start)
        return f"PostgreSQL stopped for {seconds:.1f} s"

    async def _node(self, action: str, body: Any = None) -> str:
        with self.database() as db, db.read() as session:
            ready = [
                n
                for (n,) in session.execute(
                    text("SELECT name FROM nodes WHERE state = 'ready' ORDER BY name")
                )
            ]
        if len(ready) <= 1:
            return "no node left to take"
        node = self.rng.choice(ready)
        status, _ = await self.request(
            [None], "POST", f"/api/v1/nodes/{node}/{action}", body, f"node {action}"
        )
        if status == 200:
            self.to_restore.append(node)
        return f"{action} {node}: {status}"

    async def node_drain(self) -> str:
        return await self._node("drain", {"grace_seconds": 2})

    async def node_cordon(self) -> str:
        return await self._node("cordon")

    async def node_lost(self) -> str:
        return await self._node("fail")

    async def restore_nodes(self) -> None:
        while self.to_restore:
            node = self.to_restore.pop()
            status, _ = await self.request(
                [None], "POST", f"/api/v1/nodes/{node}/uncordon", None, "node uncordon"
            )
            if status != 200:
                self.to_restore.append(node)
                return

    async def replica_kill(self) -> str:
        with self.database() as db, db.read() as session:
            rows = session.execute(
                text("SELECT id, pid FROM replicas WHERE status = 'running' AND pid IS NOT NULL")
            ).all()
        live = [(rid, pid) for rid, pid in rows if _alive(pid)]
        if not live:
            return "no running replica"
        rid, pid = self.rng.choice(live)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        return f"replica {rid}: process group {pid} SIGKILLed"

    async def submit_burst(self) -> str:
        bodies = [self.job_body(interactive_ok=False) for _ in range(self.args.burst)]
        for _, body, _ in bodies:
            body.update(workers=0, min_replicas=1, max_replicas=1, gpus_per_replica=1)
            body["command"] = ["sleep", str(self.rng.randint(1, 5))]  # the small cluster drains it in minutes

        async def client(share: list[tuple[str, dict[str, Any], float]]) -> None:
            connection: list[Connection | None] = [None]
            for project, body, lifetime in share:
                await self.submit(connection, project, body, min(lifetime, 30.0))

        began = time.monotonic()
        await asyncio.gather(*(client(bodies[i::8]) for i in range(8)))
        taken = sum((project, body["name"]) in self.ledger.accepted for project, body, _ in bodies)
        return f"{taken} of {len(bodies)} accepted in {time.monotonic() - began:.1f} s"

    async def bad_requests(self) -> str:
        """Malformed or unauthorised requests: each must be answered 4xx."""
        with self.database() as db, db.read() as session:  # an active job's name submitted again: a 409
            project, job = session.execute(
                text(
                    "SELECT p.name, j.name FROM jobs j JOIN projects p ON p.id = j.project_id"
                    " WHERE j.status IN ('pending', 'running') ORDER BY j.id LIMIT 1"
                )
            ).one()
        bad: list[tuple[str, str, Any, dict[str, str] | None]] = [
            ("POST", "/api/v1/projects/p0/jobs", b"{not json", None),
            ("POST", "/api/v1/projects/p0/jobs", {"name": "x"}, None),
            ("POST", "/api/v1/projects/p0/jobs", {"name": "Bad Name!", "command": ["a"]}, None),
            (
                "POST",
                "/api/v1/projects/p0/jobs",
                {"name": "neg", "command": ["a"], "gpus_per_replica": -1},
                None,
            ),
            (
                "POST",
                "/api/v1/projects/p0/jobs",
                {"name": "mm", "command": ["a"], "min_replicas": 3, "max_replicas": 2},
                None,
            ),
            ("POST", "/api/v1/projects/nope/jobs", {"name": "x", "command": ["a"]}, None),
            ("POST", f"/api/v1/projects/{project}/jobs", {"name": job, "command": ["a"]}, None),
            ("DELETE", "/api/v1/projects/p0/jobs/never-submitted", None, None),
            ("GET", "/api/v1/jobs?limit=0", None, None),
            ("GET", "/api/v1/jobs?status=bogus", None, None),
            ("POST", "/api/v1/nodes/no-such-node/cordon", None, None),
            ("POST", "/api/v1/nodes/node-0/drain", {"grace_seconds": -1}, None),
            ("POST", "/api/v1/projects", {"name": "p0", "deserved_gpus": 1}, None),
            ("POST", "/api/v1/projects", {"name": "q", "deserved_gpus": -5}, None),
            ("PATCH", "/api/v1/projects/p0", {"deserved_gpus": "many"}, None),
            ("PUT", "/api/v1/projects/p0/jobs", None, None),
            ("GET", "/api/v1/jobs", None, {"Authorization": "Bearer wrong-token"}),
            ("POST", "/api/v1/projects/p0/jobs", b"[" * 5000, None),
            ("POST", "/api/v1/projects/p0/jobs", {"name": "big", "command": ["a"], "workers": 10**9}, None),
            ("GET", f"/api/v1/projects/{project}/jobs/{job}/logs?replica=-3", None, None),
        ]
        accepted, answered = [], Counter()
        for method, path, body, headers in bad:
            status = await self._raw(method, path, body, headers)
            answered[status // 100 if status > 0 else -1] += 1
            if 200 <= status < 300:
                accepted.append(f"{method} {path} answered {status}")
        self.auditor.add("bad_request_accepted", accepted)
        return f"{len(bad)} bad requests: " + ", ".join(f"{k}xx={n}" for k, n in sorted(answered.items()))

    async def _raw(self, method: str, path: str, body: Any, headers: dict[str, str] | None) -> int:
        if headers is None:
            return (await self.request([None], method, path, body, f"bad {method}"))[0]
        assert self.primary is not None
        try:
            async with httpx.AsyncClient(base_url=self.primary.url, timeout=10) as http:
                status = (await http.request(method, path, headers=headers)).status_code
        except httpx.HTTPError:
            return -1
        self.ledger.answers.append((time.monotonic(), status, f"bad {method}"))
        return status

    # -- R2
    async def r2_probe(self) -> None:
        """``owed`` (holding nothing) submits a gang of 2 x ``r2_gpus``; seconds until both run."""
        profile = self.profile
        connection: list[Connection | None] = [None]
        self.names += 1
        name = f"owed{self.names}"
        body = {
            "name": name,
            "workers": 1,
            "gpus_per_replica": profile.r2_gpus,
            "command": ["sleep", "3600"],
            "grace_period": 0,
        }
        cycles_before = await asyncio.to_thread(self.cycle_seconds)
        began = time.monotonic()
        await self.submit(connection, "owed", body, 0.0)
        self.due = [d for d in self.due if d[2] != name]
        ran = False
        while time.monotonic() - began < 60.0:
            status, content = await self.request(
                connection, "GET", f"/api/v1/projects/owed/jobs/{name}", what="r2 poll"
            )
            replicas = json.loads(content).get("replicas", []) if status == 200 else []
            if len(replicas) == 2 and all(r["status"] == "running" for r in replicas):
                ran = True
                break
            await asyncio.sleep(0.05)
        wait = time.monotonic() - began if ran else float("inf")
        cycles_after = await asyncio.to_thread(self.cycle_seconds)
        took, count = (a - b for a, b in zip(cycles_after, cycles_before, strict=True))
        cycle = took / count if count > 0 else profile.cycle_period  # the loop's own time, this machine's
        bound = profile.grace_period + 2 * (profile.cycle_period + cycle) + self.args.r2_slack
        self.cycle_means.append(cycle)
        counted = all(began >= f.ended + self.args.recovery for f in self.faults if f.kind in OUTAGES)
        self.r2.append((wait, bound, counted))
        await self.request(connection, "DELETE", f"/api/v1/projects/owed/jobs/{name}", what="delete")
        await wait_until(self.owed_idle, 30)

    def cycle_seconds(self) -> tuple[float, float]:
        """``tide_cycle_duration_seconds``'s sum and count from the primary's ``/metrics`` (0, 0 if unread)."""
        assert self.primary is not None
        try:
            answer = httpx.get(f"{self.primary.url}/metrics", headers=AUTH, timeout=10)
        except httpx.HTTPError:
            return 0.0, 0.0
        values = {}
        for line in answer.text.splitlines():
            if line.startswith("tide_cycle_duration_seconds_"):
                key, _, value = line.rpartition(" ")
                values[key] = float(value)
        return values.get("tide_cycle_duration_seconds_sum", 0.0), values.get(
            "tide_cycle_duration_seconds_count", 0.0
        )

    def owed_idle(self) -> bool:
        with self.database() as db, db.read() as session:
            held = session.execute(
                text(
                    "SELECT count(*) FROM replicas r JOIN jobs j ON j.id = r.job_id JOIN projects p ON p.id = j.project_id"
                    " WHERE p.name = 'owed' AND r.status IN ('starting','running','terminating')"
                )
            ).scalar()
        return held == 0

    @contextlib.contextmanager
    def database(self) -> Any:
        db = Database(self.pg_url, pool=1)
        try:
            yield db
        finally:
            db.dispose()

    # -- the whole run
    async def main(self) -> dict[str, Any]:
        self.primary = self.start_service()
        if not await self.leading(self.primary, 180):
            raise SystemExit(f"tide serve did not lead; see {self.primary.log}")
        await self.setup()
        tasks = [asyncio.create_task(t) for t in (self.arrivals(), self.departures(), self.sampler())]
        try:
            await self.faults_loop()
            await asyncio.sleep(max(0.0, self.started + self.args.minutes * 60 - time.monotonic()))
            await self.restore_nodes()
        finally:
            self.stopping = True
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(self.args.settle)
        await asyncio.to_thread(self.auditor.check, self.service_pids)
        figures = await asyncio.to_thread(self.figures)
        await self.wind_down()
        return figures

    async def wind_down(self) -> None:
        """Delete every job, stop the services; on the local executor nothing may be left running."""
        connection: list[Connection | None] = [None]
        if self.profile.executor != "local":  # memory replicas are records: nothing can outlive the service
            for service in self.services:
                await asyncio.to_thread(service.stop)
            return
        with self.database() as db, db.read() as session:
            active = session.execute(
                text(
                    "SELECT p.name, j.name FROM jobs j JOIN projects p ON p.id = j.project_id WHERE j.status IN ('pending','running')"
                )
            ).all()
        for project, job in active:
            await self.request(connection, "DELETE", f"/api/v1/projects/{project}/jobs/{job}", what="delete")
        if self.profile.executor == "local":
            services = self.service_pids
            stopped = await wait_until(
                lambda: all(_pgid(p) in services() for p in marked_processes(self.data_dir)), 60, 0.5
            )
            if not stopped:
                self.auditor.add(
                    "orphan_process", ["replica processes outlived the delete of every job by 60 s"]
                )
        for service in self.services:
            await asyncio.to_thread(service.stop)
        if self.profile.executor == "local":
            await asyncio.sleep(2)
            left = marked_processes(self.data_dir)
            self.auditor.add(
                "orphan_process", (f"process {p} outlived the services and every job" for p in left)
            )
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def figures(self) -> dict[str, Any]:
        outages = [(f.began, f.ended + self.args.recovery) for f in self.faults if f.kind in OUTAGES]
        self.auditor.add("http_5xx", http_5xx(self.ledger.answers, outages))
        self.auditor.add(
            "r2_bound",
            (f"R2 probe waited {w:.2f} s > {b:.2f} s" for w, b, counted in self.r2 if counted and w > b),
        )
        warmup = self.args.rss_warmup
        self.auditor.add("rss_growth", rss_growth(self.rss, warmup, self.args.rss_least))
        with self.database() as db, db.read() as session:
            statuses = dict(session.execute(text("SELECT status, count(*) FROM jobs GROUP BY status")).all())
        latency = sorted(self.ledger.submit_latency)
        waits = sorted(w for w, _, counted in self.r2 if counted)
        rss = {
            name: [round(series[0][1]), round(series[-1][1]), round(series[-1][0] - series[0][0])]
            for name, series in self.rss.items()
            if series
        }
        loads = [round(sum(col) / len(col), 2) for col in zip(*self.loads, strict=True)] if self.loads else []
        five = Counter(code for _, code, _ in self.ledger.answers if code >= 500)
        profile = self.profile
        return {
            "executor": profile.executor,
            "cluster": f"{profile.nodes} x {profile.gpus_per_node} GPUs",
            "minutes": round((time.monotonic() - self.started) / 60, 1),
            "faults": {k: sum(f.kind == k for f in self.faults) for k in KINDS},
            "fault_log": [[round(f.began - self.started, 1), f.kind, f.detail] for f in self.faults],
            "violations": {k: len(self.auditor.found.get(k, [])) for k in VIOLATIONS},
            "violation_examples": {k: v[:5] for k, v in self.auditor.found.items() if v},
            "audits": self.auditor.audits,
            "jobs_accepted": len(self.ledger.accepted),
            "jobs_uncertain": len(self.ledger.uncertain),
            "jobs_finished": sum(statuses.get(s, 0) for s in ("succeeded", "failed", "cancelled")),
            "jobs_running": statuses.get("running", 0),
            "jobs_waiting": statuses.get("pending", 0),
            "jobs_by_status": statuses,
            "submits_refused": {str(k): v for k, v in sorted(self.ledger.refused.items())},
            "submit_p50_ms": round(statistics.median(latency) * 1e3, 1) if latency else None,
            "submit_p99_ms": round(latency[min(len(latency) - 1, int(0.99 * len(latency)))] * 1e3, 1)
            if latency
            else None,
            "r2_probes": len(self.r2),
            "r2_waits_s": [round(w, 2) if w != float("inf") else None for w, _, _ in self.r2],
            "r2_counted": len(waits),
            "r2_wait_p50_s": round(statistics.median(waits), 2) if waits else None,
            "r2_wait_max_s": round(waits[-1], 2) if waits else None,
            "r2_bound_max_s": round(max((b for _, b, _ in self.r2), default=0.0), 2),
            "r2_bound_min_s": round(min((b for _, b, _ in self.r2), default=0.0), 2),
            "cycle_mean_during_r2_ms": round(statistics.mean(self.cycle_means) * 1e3)
            if self.cycle_means
            else None,
            "http_answers": len(self.ledger.answers),
            "http_5xx": {str(k): v for k, v in sorted(five.items())},
            "transport_errors": self.ledger.transport_errors,
            "rss_mib_first_last_seconds": rss,
            "load_average_mean": loads,
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
        }


def table(rows: list[dict[str, Any]]) -> str:
    def cell(row: dict[str, Any], key: str) -> str:
        return str(row.get(key))

    def rss(row: dict[str, Any]) -> str:
        parts = [f"{a}->{b}" for name, (a, b, _) in row["rss_mib_first_last_seconds"].items()]
        return ", ".join(parts[:4]) + (" ..." if len(parts) > 4 else "")

    lines: list[tuple[str, ...]] = [
        ("", *(f"{r['executor']} executor" for r in rows)),
        ("cluster", *(r["cluster"] for r in rows)),
        ("minutes", *(cell(r, "minutes") for r in rows)),
    ]
    for kind in KINDS:
        lines.append((f"faults: {kind}", *(str(r["faults"][kind]) for r in rows)))
    for kind in VIOLATIONS:
        lines.append((f"violations: {kind}", *(str(r["violations"][kind]) for r in rows)))
    lines += [
        ("audits", *(cell(r, "audits") for r in rows)),
        ("jobs accepted / uncertain", *(f"{r['jobs_accepted']} / {r['jobs_uncertain']}" for r in rows)),
        (
            "jobs finished / running / waiting",
            *(f"{r['jobs_finished']} / {r['jobs_running']} / {r['jobs_waiting']}" for r in rows),
        ),
        ("submit p50 / p99 ms", *(f"{r['submit_p50_ms']} / {r['submit_p99_ms']}" for r in rows)),
        (
            "R2 probes counted: p50 / max s (bound)",
            *(
                f"{r['r2_counted']}: {r['r2_wait_p50_s']} / {r['r2_wait_max_s']} ({r['r2_bound_min_s']}-{r['r2_bound_max_s']})"
                for r in rows
            ),
        ),
        ("HTTP answers / 5xx", *(f"{r['http_answers']} / {r['http_5xx']}" for r in rows)),
        ("RSS MiB warm-up->end (per process)", *(rss(r) for r in rows)),
        ("load average (mean of 1/5/15 min)", *(str(r["load_average_mean"]) for r in rows)),
    ]
    width = max(len(line[0]) for line in lines) + 2
    cols = [max(len(line[i]) for line in lines) + 2 for i in range(1, len(rows) + 1)]
    return "\n".join(
        line[0].ljust(width) + "".join(c.rjust(cols[i]) for i, c in enumerate(line[1:])) for line in lines
    )


def soak(executor: str, args: argparse.Namespace) -> dict[str, Any]:
    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL server binaries (initdb, pg_ctl): set TIDE_TEST_PG_BINDIR")
    pg = PrivateServer(bindir).init()
    pg.start()
    profile = PROFILES[executor]
    if args.nodes:
        profile = Profile(**{**profile.__dict__, "nodes": args.nodes})
    if args.rate:
        profile = Profile(**{**profile.__dict__, "rate": args.rate})
    run = Run(profile, args, pg)
    try:
        return asyncio.run(run.main())
    finally:
        for service in run.services:
            with contextlib.suppress(Exception):
                service.stop()
        for record in (
            (run.data_dir / "replicas").glob("*.json") if (run.data_dir / "replicas").is_dir() else ()
        ):
            with contextlib.suppress(OSError, ValueError, KeyError):
                os.killpg(int(json.loads(record.read_text())["pid"]), signal.SIGKILL)
        pg.close()
        if not args.keep:
            shutil.rmtree(run.root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--executor", choices=("memory", "local", "both"), default="both")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument(
        "--per-kind", type=int, default=0, help="faults of each kind (default: as many as fit)"
    )
    parser.add_argument(
        "--fault-every", type=float, default=60.0, help="seconds between faults (with no --per-kind)"
    )
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds of load before the first fault")
    parser.add_argument(
        "--faults",
        default="",
        help="the fault kinds to inject, comma-separated (default: all); without service_kill and "
        "leader_takeover one service lives the whole run, so its memory is judged over all of it",
    )
    parser.add_argument(
        "--outage", type=float, nargs=2, default=(10.0, 30.0), help="PostgreSQL outage seconds"
    )
    parser.add_argument("--burst", type=int, default=500, help="submits of a burst")
    parser.add_argument("--nodes", type=int, default=0, help="nodes (default: 1280 memory, 4 local)")
    parser.add_argument("--rate", type=float, default=0.0, help="job arrivals a second")
    parser.add_argument(
        "--r2-slack", type=float, default=2.0, help="seconds of measurement slack on R2's bound"
    )
    parser.add_argument(
        "--recovery", type=float, default=15.0, help="seconds after an outage its 503s may last"
    )
    parser.add_argument("--request-timeout", type=float, default=30.0)
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds between RSS samples")
    parser.add_argument(
        "--rss-warmup", type=float, default=120.0, help="seconds of a process's life before its RSS counts"
    )
    parser.add_argument(
        "--rss-least",
        type=float,
        default=300.0,
        help="seconds after warm-up for a process's RSS to be judged",
    )
    parser.add_argument("--settle", type=float, default=5.0, help="seconds before the final audit")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the data directory and the services' logs")
    parser.add_argument("--json", action="store_true", help="one JSON object per executor, one a line")
    args = parser.parse_args(argv)
    unknown = sorted(set(filter(None, args.faults.split(","))) - set(KINDS))
    if unknown:
        parser.error(f"unknown fault kinds {', '.join(unknown)}: choose from {', '.join(KINDS)}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout still stops what the soak started
    executors = ("memory", "local") if args.executor == "both" else (args.executor,)
    rows = [soak(executor, args) for executor in executors]
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        print(f"tide soak, {os.cpu_count()} cores shared with the load generator and the auditor")
        print(table(rows))
    return 1 if any(sum(r["violations"].values()) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
