"""``tide serve`` and its PostgreSQL: a database that is not up yet is waited for, then refused with a
reason (exit 2); each process's pool opens at most ``--database-pool`` connections.

The wait, with the database coming up meanwhile, runs in test_deploy.py's quick start; here the bound.
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from pathlib import Path

import psycopg
from sqlalchemy import text
from typer.testing import CliRunner

from api.client.cli.main import app
from scheduler.elastic.agent.ports import free_port
from scheduler.store.db import POOL_CONNECTIONS, Database


def test_serve_waits_for_the_database_then_gives_up_with_the_reason(tmp_path: Path) -> None:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith(("TIDE_", "KUBE"))}
    env.update(TIDE_DATA_DIR=str(tmp_path / "data"), TIDE_ADMIN_TOKEN="database-wait-test-token")
    nobody = f"postgresql://postgres@127.0.0.1:{free_port()}/test"  # nothing listens there
    began = time.monotonic()
    result = CliRunner().invoke(app, ["serve", "--database-url", nobody, "--database-wait", "3"], env=env)
    waited = time.monotonic() - began
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert (
        "tide: the database does not answer yet (try 1; again in 2.0 s, giving up after 3 s)" in result.output
    )
    assert re.search(r"\(try 2; again in \d\.\d s, giving up after 3 s\)", result.output), result.output
    assert "tide: cannot reach the database (waited 3 s, --database-wait): " in result.output
    assert 3 <= waited < 20


def test_a_database_opens_at_most_its_pool(pg_url: str) -> None:
    name = f"tide_pool_{uuid.uuid4().hex[:8]}"
    db = Database(f"{pg_url}&application_name={name}", pool=3)
    seen: list[int] = []

    def hold() -> None:
        with db.read() as session:
            session.execute(text("SELECT pg_sleep(0.3)"))

    def count() -> int:
        conninfo = pg_url.split("?", maxsplit=1)[0].replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(conninfo) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,))
            return int(row.fetchone()[0])  # type: ignore[index]

    try:
        threads = [threading.Thread(target=hold) for _ in range(8)]
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            seen.append(count())
            time.sleep(0.05)
        assert max(seen) == 3  # 8 readers at once, 3 connections: the others waited for one
    finally:
        db.dispose()
    # tide serve's two processes, two pods: inside PostgreSQL's default max_connections (100)
    assert 2 * 2 * POOL_CONNECTIONS <= 100
