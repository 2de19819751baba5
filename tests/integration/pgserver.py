"""A private PostgreSQL server that a test may stop and start again (the shared one must stay up).

``PrivateServer`` runs ``initdb`` into a temporary directory and ``postgres`` on a free loopback port with
its socket in that directory, using the server binaries of this machine (``TIDE_TEST_PG_BINDIR``, else
``pg_ctl`` on ``PATH``, else the newest ``/usr/lib/postgresql/*/bin``). PostgreSQL refuses to run as root,
so under root it runs as the ``postgres`` user (``runuser``), which owns the directory. ``stop()`` is
``pg_ctl stop -m fast``: every session is ended as in a real restart, and new connections are refused until
``start()``. ``find_bindir()`` returns None when no server binaries are installed.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from scheduler.elastic.agent.ports import free_port


def find_bindir() -> Path | None:
    """Where ``initdb``, ``pg_ctl`` and ``postgres`` live, or None."""
    candidates = [os.environ.get("TIDE_TEST_PG_BINDIR", "")]
    found = shutil.which("pg_ctl")
    candidates.append(str(Path(found).parent) if found else "")
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _version(p.parent.name))
    candidates += [str(p) for p in reversed(versions)]
    for candidate in filter(None, candidates):
        path = Path(candidate)
        if all((path / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return path
    return None


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


class PrivateServer:
    """One PostgreSQL cluster of our own; ``url`` reaches its ``postgres`` database over TCP."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="tide-pg-"))
        self.data = self.root / "data"
        self.user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        if self.user is not None:
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if self.user is not None else []
        subprocess.run([*prefix, *argv], check=True, capture_output=True, timeout=60)

    def init(self) -> PrivateServer:
        initdb = str(self.bindir / "initdb")
        self._run(initdb, "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
        return self

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.root / "server.log")
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            log,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self) -> None:
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def close(self) -> None:
        if (self.data / "postmaster.pid").is_file():
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
