"""Preemption notice through the engine: a reclaimed or preempted replica gets SIGUSR1 before its SIGTERM,
inside its grace period.

Story: on one 4-GPU node team a (no quota, ``preemption_notice_seconds`` 2) borrows every GPU; team b, which
deserves them, submits. The engine reclaims a's GPUs (R2): a's replicas are told first (SIGUSR1), their
SIGTERM comes 2 s later, and a replica that ignores SIGTERM is still killed when the grace period ends, as
it would be without a notice. A release that is not a reclaim (a lowered limit) gives no notice.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from servicekit import kill_leftovers, wait_for
from sqlalchemy import select
from test_cli_commands import cli_bridge, tide

from scheduler.core import Config, Node
from scheduler.engine.loop import Engine, EngineSettings
from scheduler.executors.base import Executor
from scheduler.executors.fake import FakeExecutor
from scheduler.executors.local import LocalExecutor
from scheduler.store.db import Database
from scheduler.store.migrate import upgrade
from scheduler.store.models import EventRow, JobRow, ProjectRow, ReplicaRow

START = 1_800_000_000.0
NOTICE = 2


class Loop:
    """The engine on a real database; a fake clock the test moves, or the real one."""

    def __init__(self, db: Database, executor: Executor, *, grace: float, real_clock: bool = False) -> None:
        self.db, self.now, self.executor = db, START, executor
        settings = EngineSettings(grace_period=grace, core=Config(settle_seconds=0), check_invariants=True)
        clock = time.time if real_clock else (lambda: self.now)
        self.engine = Engine(db, executor, settings, clock=clock)

    def cycle(self, after: float = 0.1) -> None:
        self.now += after
        self.engine.tick()
        assert self.engine.violations == []

    def submit(
        self, project: str, name: str, replicas: tuple[int, int], gpus: int, command: list[str]
    ) -> None:
        low, high = replicas
        with self.db.write() as session:
            owner = session.scalars(select(ProjectRow).where(ProjectRow.name == project)).one()
            session.add(
                JobRow(
                    project=owner, name=name, status="pending", workers=high - 1, min_replicas=low,
                    max_replicas=high, gpus_per_replica=gpus, command=command, env={},
                    created_at=self.now, submitted_at=self.now, restarts=0, generation=0,
                )
            )  # fmt: skip

    def events(self, job: str) -> list[EventRow]:
        with self.db.read() as session:
            return list(session.scalars(select(EventRow).where(EventRow.job == job).order_by(EventRow.id)))

    def replicas(self, job: str) -> list[ReplicaRow]:
        with self.db.read() as session:
            query = (
                select(ReplicaRow).join(ReplicaRow.job).where(JobRow.name == job).order_by(ReplicaRow.index)
            )
            return list(session.scalars(query))


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    upgrade(database)
    with database.write() as session:
        session.add(
            ProjectRow(
                name="a", deserved_gpus=0, created_at=0.0, fair_share_gpus=0, preemption_notice_seconds=NOTICE
            )
        )
        session.add(ProjectRow(name="b", deserved_gpus=4, created_at=1.0, fair_share_gpus=0))
    yield database
    database.dispose()


def test_a_reclaim_tells_the_borrowers_replicas_first_and_sends_sigterm_once_the_notice_ran(
    db: Database,
) -> None:
    fake = FakeExecutor((Node("node-0", 4),))
    loop = Loop(db, fake, grace=10)
    loop.submit("a", "sweep", (2, 2), 2, ["sleep", "1"])  # a master and a worker, 2 GPUs each
    loop.cycle()
    loop.cycle()
    assert [r.status for r in loop.replicas("sweep")] == ["running", "running"]
    loop.submit("b", "owner", (1, 1), 4, ["sleep", "1"])
    loop.cycle()
    evict = [e for e in loop.events("sweep") if e.kind == "evict"]
    assert evict and evict[0].cause == "reclaim"
    assert "notice: SIGUSR1 2 s before SIGTERM" in evict[0].reason
    assert (evict[0].details or {})["notice_seconds"] == NOTICE
    # both replicas are told at once, the master too (its SIGTERM still comes last, R5); no SIGTERM yet
    master, worker = loop.replicas("sweep")
    assert sorted(fake.notified) == sorted([master.id, worker.id])
    assert not any(o.stopping for o in fake.observe().values())
    loop.cycle(after=1.0)
    assert not any(o.stopping for o in fake.observe().values())  # 1.1 s after the notice: still told only
    loop.cycle(after=1.0)  # 2.1 s: the worker's SIGTERM; the master waits for it to be gone (R5)
    assert fake.notified.count(master.id) == 1 and fake.notified.count(worker.id) == 1
    for _ in range(5):
        loop.cycle()
    assert loop.replicas("sweep") == []
    assert [r.status for r in loop.replicas("owner")] == ["running"]
    loop.engine.close()


def test_a_release_that_is_not_a_reclaim_gives_no_notice(db: Database) -> None:
    fake = FakeExecutor((Node("node-0", 4),))
    loop = Loop(db, fake, grace=10)
    loop.submit("a", "sweep", (1, 4), 1, ["sleep", "1"])
    loop.cycle()
    loop.cycle()
    assert len(loop.replicas("sweep")) == 4
    with db.write() as session:
        session.scalars(select(ProjectRow).where(ProjectRow.name == "a")).one().limit_gpus = 2
    loop.cycle()
    shrink = [e for e in loop.events("sweep") if e.kind == "shrink"]
    assert shrink and shrink[0].cause == "limit" and "notice" not in shrink[0].reason
    assert fake.notified == []
    loop.cycle()
    assert len(loop.replicas("sweep")) == 2  # stopped at once, as before
    loop.engine.close()


RECORDS_SIGNALS = """
import os, signal, sys, time
out = open(sys.argv[1], "a", buffering=1)
def note(signum, _frame):
    out.write(f"{signal.Signals(signum).name} {time.time()}\\n")
signal.signal(signal.SIGUSR1, note)
signal.signal(signal.SIGTERM, note)  # noted, then ignored: only the SIGKILL ends it
out.write(f"up {time.time()} {os.getpid()}\\n")
while True:
    time.sleep(0.05)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.slow
def test_a_real_replica_gets_sigusr1_two_seconds_before_sigterm_and_sigkill_at_the_grace(
    db: Database, tmp_path: Path
) -> None:
    grace = 5.0
    local = LocalExecutor(tmp_path / "data", (Node("node-0", 4),))
    loop = Loop(db, local, grace=grace, real_clock=True)
    signals = tmp_path / "signals.txt"
    script = tmp_path / "records.py"
    script.write_text(RECORDS_SIGNALS)
    try:
        loop.submit("a", "sweep", (1, 1), 4, [sys.executable, str(script), str(signals)])
        wait_for(lambda: (loop.cycle(), signals.exists())[1], what="a's replica to start")
        pid = int(signals.read_text().split()[2])
        loop.submit("b", "owner", (1, 1), 4, ["sleep", "30"])
        killed_at = None
        deadline = time.time() + grace + 5
        while time.time() < deadline and killed_at is None:
            loop.engine.tick()
            time.sleep(0.05)
            if not _alive(pid):
                killed_at = time.time()
        assert killed_at is not None, signals.read_text()
        got = dict(line.split()[:2] for line in signals.read_text().splitlines())
        usr1, term = float(got["SIGUSR1"]), float(got["SIGTERM"])
        gap, kill = term - usr1, killed_at - usr1
        print(f"SIGUSR1 -> SIGTERM {gap:.2f} s, SIGUSR1 -> SIGKILL {kill:.2f} s (grace {grace:g} s)")
        # the notice, then SIGTERM (as fine as the loop looks); the process stamps each signal as it handles
        # it, and the SIGUSR1's handling may come a few milliseconds after it was sent
        assert NOTICE - 0.05 <= gap < NOTICE + 1.5
        assert grace - 0.1 <= kill < grace + 1.5  # the SIGKILL when it would have come without a notice
        reason = next(e.reason for e in loop.events("sweep") if e.kind == "evict")
        assert "notice: SIGUSR1 2 s before SIGTERM" in reason
        wait_for(lambda: (loop.engine.tick(), loop.replicas("owner")[0].status == "running")[1], what="b")
    finally:
        loop.engine.close()
        kill_leftovers(tmp_path / "data")


def test_projects_and_departments_take_a_preemption_notice_by_rest_and_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cli_bridge(tmp_path, monkeypatch) as bridge:
        out = tide("department", "create", "research", "--deserved", "4", "--preemption-notice", "1m")
        assert out.exit_code == 0 and "preemption notice 1m before SIGTERM" in out.output, out.output
        assert tide("project", "create", "inherits", "-q", "1", "-d", "research").exit_code == 0
        out = tide("project", "create", "own", "-q", "1", "-d", "research", "--preemption-notice", "20s")
        assert out.exit_code == 0 and "preemption notice 20s before SIGTERM" in out.output, out.output
        assert tide("project", "create", "plain", "-q", "1").exit_code == 0

        listing = tide("project", "list").output
        assert "NOTICE" in listing
        rows = {line.split()[0]: line.split() for line in listing.splitlines() if line.strip()}
        assert (rows["inherits"][-2], rows["own"][-2], rows["plain"][-2]) == ("1m", "20s", "-")
        assert "NOTICE" in tide("department", "list").output

        out = tide("project", "update", "own", "--preemption-notice", "off")  # none, despite research's
        assert out.exit_code == 0 and "preemption notice" not in out.output, out.output
        out = tide("project", "update", "own", "--preemption-notice", "inherit")
        assert out.exit_code == 0 and "preemption notice 1m" in out.output, out.output
        bad = tide("project", "update", "own", "--preemption-notice", "1.5")
        assert bad.exit_code == 2 and "whole seconds" in bad.output, bad.output
        bad = tide("project", "update", "own", "--preemption-notice", "soon")
        assert bad.exit_code == 2 and "not a duration" in bad.output, bad.output

        with httpx.Client(transport=bridge, base_url="http://tide") as http:
            headers = {"Authorization": "Bearer test-admin-token"}
            made = http.post(
                "/api/v1/projects",
                json={"name": "rest", "deserved_gpus": 1, "preemption_notice_seconds": 30},
                headers=headers,
            )
            assert made.status_code == 201, made.text
            body = made.json()
            assert (body["preemption_notice_seconds"], body["effective_preemption_notice_seconds"]) == (
                30,
                30,
            )
            for wrong, words in (
                (-1, "greater than or equal to 0"),
                (2.5, "valid integer"),
                (86_401, "less"),
            ):
                answer = http.patch(
                    "/api/v1/projects/rest", json={"preemption_notice_seconds": wrong}, headers=headers
                )
                assert answer.status_code == 422, answer.text
                assert "preemption_notice_seconds" in answer.text and words in answer.text, answer.text
            cleared = http.patch(
                "/api/v1/projects/rest", json={"preemption_notice_seconds": None}, headers=headers
            )
            assert cleared.json()["effective_preemption_notice_seconds"] == 0
            dept = http.patch(
                "/api/v1/departments/research", json={"preemption_notice_seconds": 45}, headers=headers
            )
            assert dept.json()["preemption_notice_seconds"] == 45
            inherits = http.get("/api/v1/projects/inherits", headers=headers).json()
            assert (
                inherits["preemption_notice_seconds"],
                inherits["effective_preemption_notice_seconds"],
            ) == (
                None,
                45,
            )
            negative = http.post(
                "/api/v1/departments",
                json={"name": "x", "deserved_gpus": 0, "preemption_notice_seconds": -5},
                headers=headers,
            )
            assert negative.status_code == 422 and "greater than or equal to 0" in negative.text
