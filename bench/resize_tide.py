"""The ``tide`` strategy of ``bench/resize.py``: resizes decided by a real Tide service, not by the bench.

Contract: ``TideJob`` implements ``resize.Job`` on top of ``tide serve`` (the local executor, 4 virtual
GPUs, 1 per node, settle time 0, started once by the constructor and stopped at exit). The job is project
a's elastic ``torchrun`` job (min 2, max 4; a deserves 2, so it borrows b's 2 GPUs when b is idle).
``resize(2)`` makes project b claim its 2 GPUs (a 2-replica ``sleep`` job), ``resize(4)`` deletes b's job;
both wait for a's ``shrink``/``grow`` event and set ``decided_at`` to its time, so a resize is timed from
Tide's decision. ``prepare(n)`` waits (outside the timed window, at most 120 s) until the service's pool
holds ``n`` warm launchers. ``start(n)`` submits a's job afresh (from step 0); at ``n == 2`` b claims first. ``close``
deletes both jobs and waits until every process of them is gone. Logs: every replica of a's job writes to
``DATA/logs/a/train/replica-I.log``, where the bench's ``LogWatcher`` reads the JSON step lines.
"""

from __future__ import annotations

import atexit
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy" / "examples"))
from demo import TOKEN, start_service, stop_service, wait_healthy

from api.client.rest import TideAPIError, TideClient
from scheduler.elastic.agent.ports import free_port

BIG, SMALL = 4, 2
A_JOB, B_JOB = "train", "claim"


class TideJob:
    """Project a's torchrun job under a real Tide; project b's claims make Tide resize it."""

    def __init__(self, name: str, cfg: Any, *, script: Path) -> None:
        self.name, self.cfg, self.script = name, cfg, script
        self.data = cfg.workdir / name / "data"
        self.logs = self.data / "logs" / "a" / A_JOB
        self.logs.mkdir(parents=True)
        self.ckpt = (
            cfg.workdir / name / "ckpt"
        )  # one for every round: steps go on, as in the other strategies
        port = free_port()
        self.service = start_service(self.data, port, settle=0.0, grace=cfg.grace_s)
        atexit.register(stop_service, self.service, self.data)
        self.client = TideClient(f"http://127.0.0.1:{port}", TOKEN)
        wait_healthy(self.client, self.service)
        self.client.create_project({"name": "a", "deserved_gpus": 2})
        self.client.create_project({"name": "b", "deserved_gpus": 2})
        self.current = 0
        self.stop_s: float | None = None
        self.decided_at: float | None = None

    @property
    def size(self) -> int:
        return self.current

    def start(self, n: int) -> None:
        self.prepare(n)  # a job's first launch takes launchers from the pool too
        if n < BIG:
            self._claim()
        command = ["torchrun", str(self.script), "--steps", "10000000", "--ckpt-every", str(self.cfg.ckpt_every),
                   "--step-time", str(self.cfg.step_time), "--ckpt-dir", str(self.ckpt)]  # fmt: skip
        job = {
            "name": A_JOB,
            "workers": BIG - 1,
            "min_replicas": SMALL,
            "max_replicas": BIG,
            "command": command,
        }
        self.client.submit("a", job)
        self.current = n

    def prepare(self, n: int) -> None:
        """Outside the timed window, as the other warm strategies: let the service's pool of warm launchers
        refill (it does once every launch formed), so that a resize seconds after the previous one is not
        timed against launchers still importing torch. Bounded; a cold pool only makes the figure worse."""
        pool = self.data / "replicas" / "pool"
        if not pool.is_dir():
            return  # made at the service's first torchrun launch
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self._warm_idle(pool) < n:
            time.sleep(0.2)

    @staticmethod
    def _warm_idle(pool: Path) -> int:
        return sum(1 for warm in pool.glob("*.warm") if not warm.with_suffix(".spec").exists())

    def resize(self, n: int) -> None:
        since = time.time() - 1.0
        if n < self.current:
            self._claim()
        else:
            self._delete("b", B_JOB)
        kind = "shrink" if n < self.current else "grow"
        self.decided_at = self._decision(kind, since)
        self.current = n

    def close(self) -> None:
        self._delete("a", A_JOB)
        self._delete("b", B_JOB)
        deadline = time.monotonic() + self.cfg.grace_s + 30
        while time.monotonic() < deadline and (self._gpus("a") or self._gpus("b") or self._processes()):
            time.sleep(0.2)
        self.current = 0

    def _claim(self) -> None:
        self.client.submit("b", {"name": B_JOB, "workers": 1, "command": ["sleep", "100000"]})

    def _delete(self, project: str, job: str) -> None:
        try:
            self.client.delete_job(project, job)
        except TideAPIError as error:
            if error.status_code != 404:
                raise

    def _decision(self, kind: str, since: float) -> float | None:
        deadline = time.monotonic() + self.cfg.timeout_s
        while time.monotonic() < deadline:
            for event in self.client.events(project="a", job=A_JOB, since=since):
                if event.kind == kind:
                    return event.time.timestamp()
            time.sleep(0.05)
        return None

    def _gpus(self, project: str) -> int:
        return self.client.project(project).allocated_gpus

    def _processes(self) -> bool:
        marker = f"TIDE_CHECKPOINT_DIR={self.data}".encode()
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and marker in (proc / "environ").read_bytes():
                    return True
            except OSError:
                continue
        return False
