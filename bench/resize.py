"""Resize latency of an elastic torchrun job: Tide's coordinated restart against torchrun's own resize.

Contract: ``python bench/resize.py`` runs, for each strategy, one job of ``deploy/examples/train_elastic.py``
under real torchrun agents on 127.0.0.1 (one agent per replica, one CPU worker each) and resizes it
4 -> 2 -> 4 ``--repeats`` times. A resize's latency is from the resize action (the first signal sent, or the
first process started) to the first training step logged at the new world size (the ``time`` of that JSON
line); steps lost are the steps logged before that point beyond the step the new group resumed from; the
pause is the time between the last step logged before that point and that first step (training stood
still for that long: a Kubernetes grow keeps training while its new pods start).
It prints a table (median, min, max per strategy and direction) on stdout, progress on stderr, or with
``--json`` one JSON object: ``shrink_p50_s``, ``grow_p50_s``, ``lost_steps_max`` (for the strategy Tide
uses, ``--chosen``), ``native_shrink_p50_s``, ``native_grow_p50_s`` (torchrun's own path, default settings),
and every strategy's figures under ``strategies``. A p50 is null when no resize of that kind completed.
Every wait is bounded (``--timeout``); a resize that does not complete is counted as failed, the job is
killed and restarted from its checkpoint, and the run goes on. Every process is started in its own
session and killed by process group at the end, also on Ctrl-C. Scratch files live in a temporary
directory that is deleted unless ``--keep``.

Strategies (each is a ``Job``: ``start(n)``, ``prepare(n)`` outside the timed window, ``resize(n)``,
``close()``; a future ``Job`` driving Tide's REST API only has to implement these and write logs where the
``LogWatcher`` reads them):

* ``coordinated``: Tide's resize. SIGTERM every agent (the script checkpoints and exits 0), wait for them to
  exit, start the new set as a fresh rendezvous of exactly N (``--nnodes=N:N``, new run id, new port),
  configured by ``scheduler.elastic.environment.torchrun_env``.
* ``coordinated-warm``: the same, with agents taken from a pool of processes that already imported
  ``torch.distributed.run`` (an executor-side optimisation; the pool is refilled outside the timed window).
* ``coordinated-fork``: the same, with pre-started launchers that also fork the workers from a preloaded,
  single-threaded fork server, so no process in the timed window imports torch (``WARM_FORK_AGENT``).
* ``native-tuned``: torchrun's own membership change (SIGTERM the highest-index agents to shrink, start new
  agents to grow; ``--nnodes=2:4``) with the settings of ``torchrun_env`` (keep-alive 1 s x 3, last call 3 s,
  own worker store).
* ``native-default``: the same with torchrun's defaults (only the rendezvous address, ids and restarts).
* ``tide``: resizes driven through Tide itself: a ``tide serve`` (local executor, 4 virtual GPUs of 1 node
  each) runs the job as project a's ``torchrun`` job (min 2, max 4); a shrink is project b claiming 2 GPUs
  (its deserved quota), a grow is b's job being deleted. Latency is from Tide's decision (the time of a's
  ``shrink``/``grow`` event) to the first step at the new world size. ``--json`` reports it as
  ``shrink_p50_s``/``grow_p50_s`` when it ran (``--chosen`` defaults to it then).
* ``tide-kubernetes``: the same through ``tide serve --executor kubernetes`` against the fake API server
  whose kubelet runs each pod as a real process (``bench/resize_kube.py``); the job's pods run Tide's agent
  and resize in place. ``--executor kubernetes`` runs it beside ``tide`` and reports it as Tide's figures
  (the local executor's as ``local_shrink_p50_s``/``local_grow_p50_s``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from scheduler.elastic.agent.ports import free_port  # noqa: E402
from scheduler.elastic.environment import RendezvousTuning, ReplicaLaunch, torchrun_env  # noqa: E402
from scheduler.elastic.launch import run_id_for  # noqa: E402

SCRIPT = ROOT / "deploy" / "examples" / "train_elastic.py"
BIG, SMALL = 4, 2
STRATEGIES = (
    "tide",
    "tide-kubernetes",
    "coordinated",
    "coordinated-warm",
    "coordinated-fork",
    "native-tuned",
    "native-default",
)
# A pre-imported torchrun agent: pays the import now, reads {"env", "argv"} on stdin when it is needed.
WARM_AGENT = """
import json, os, sys
import torch.distributed.run as run
from torch.distributed.elastic.multiprocessing.api import SignalException
print(json.dumps({"event": "warm-ready", "pid": os.getpid()}), flush=True)
spec = json.loads(sys.stdin.readline() or "null")
if spec is None:
    sys.exit(0)
os.environ.update(spec["env"])
try:
    sys.exit(run.main(spec["argv"]))
except SignalException:
    # Stopped by the executor: the agent already closed its workers; skip interpreter teardown.
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(143)
"""

# As WARM_AGENT, and its workers do not import torch either: they are forked (torchrun's function
# entrypoint, start method "forkserver") from a fork server started, single-threaded, before the agent
# starts any thread, with this file preloaded. Forking the agent itself ("fork") deadlocked: its
# keep-alive thread may hold a store lock at fork time (seen: a worker hung in teardown, 1 run in 5).
# It is a module (``tide_fork_launcher``, written next to the job) because the fork server preloads
# modules by name and ``script`` must be importable there; Python 3.11's forkserver does not preload
# ``__main__`` (it never receives the main path). The training script runs unchanged, via runpy.
WARM_FORK_AGENT = """
import json, multiprocessing, os, runpy, signal, sys
import torch, torch.nn, torch.distributed
import torch.distributed.run as run
from multiprocessing import forkserver
from torch.distributed.elastic.multiprocessing import api as mp_api
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.launcher.api import elastic_launch

# The first optimiser a process builds imports torch._dynamo (and sympy): ~1 s; pay it here, once.
torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)

_close = mp_api.MultiprocessContext._close
def _close_releasing_finished(self, death_sig, timeout=30):
    # A worker that returned waits for this event before exiting; torch sets it only on success,
    # so a worker that saved and returned on SIGTERM would sit there until SIGKILL.
    self._worker_finished_event.set()
    _close(self, death_sig, timeout)
mp_api.MultiprocessContext._close = _close_releasing_finished

def script(env, path, *argv):
    os.environ.update(env)  # the fork server predates the replica's env; RANK etc. are already set
    sys.argv = [path, *argv]
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code:
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(code)

def main():
    multiprocessing.set_forkserver_preload([__name__])
    forkserver.ensure_running()
    print(json.dumps({"event": "warm-ready", "pid": os.getpid()}), flush=True)
    spec = json.loads(sys.stdin.readline() or "null")
    if spec is None:
        sys.exit(0)
    os.environ.update(spec["env"])
    args = run.parse_args(spec["argv"])
    config, _, _ = run.config_from_args(args)
    config.start_method = "forkserver"
    try:
        elastic_launch(config, script)(spec["env"], args.training_script, *args.training_script_args)
    except SignalException:
        # Stopped by the executor: the workers are gone (closed above); skip interpreter teardown.
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(143)

"""

Record = dict[str, Any]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass
class Settings:
    workdir: Path
    step_time: float
    ckpt_every: int
    grace_s: float
    timeout_s: float
    settle_steps: int = 5


class Agent:
    """One torchrun agent (a replica) in its own session: killing its group also kills its workers."""

    def __init__(
        self, argv: list[str], env: dict[str, str], logfile: Path, stdin: int = subprocess.DEVNULL
    ) -> None:
        with open(logfile, "ab") as out:
            self.proc = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=stdin, start_new_session=True
            )

    @property
    def stdin(self) -> IO[bytes] | None:
        return self.proc.stdin

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            self.proc.send_signal(sig)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc.stdin:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        self.proc.wait(timeout=10)


def kill_tagged(tag: str) -> int:
    """SIGKILL every process whose environment holds ``TIDE_BENCH_TAG=<tag>...``.

    torchrun starts each worker in a session of its own, so killing an agent's process group misses its
    workers, and a worker whose agent was killed is re-parented away; the tag it inherited still finds it.
    """
    needle, killed = f"TIDE_BENCH_TAG={tag}".encode(), 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            env = (proc / "environ").read_bytes()
        except OSError:
            continue
        if any(var.startswith(needle) for var in env.split(b"\0")):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(proc.name), signal.SIGKILL)
                killed += 1
    return killed


def wait_exit(agents: list[Agent], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(a.alive() for a in agents):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class LogWatcher:
    """Reads the JSON lines every process of a job appends to ``<dir>/*.log`` (complete lines only)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.offsets: dict[Path, int] = {}
        self.records: list[Record] = []

    def poll(self) -> None:
        for path in sorted(self.dir.glob("*.log")):
            with open(path, "rb") as f:
                f.seek(self.offsets.get(path, 0))
                data = f.read()
            end = data.rfind(b"\n") + 1
            self.offsets[path] = self.offsets.get(path, 0) + end
            for line in data[:end].splitlines():
                if line.startswith(b"{"):
                    with contextlib.suppress(ValueError):
                        self.records.append(json.loads(line))

    def steps(self) -> list[Record]:
        return [r for r in self.records if "step" in r and "world_size" in r]

    def wait_for(self, pred: Callable[[Record], bool], timeout: float) -> Record | None:
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            hits = [r for r in self.steps() if pred(r)]
            if hits:
                return min(hits, key=lambda r: float(r["time"]))
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)


class Job(Protocol):
    name: str
    logs: Path
    stop_s: float | None
    decided_at: float | None  # when the resize was decided, if not when ``resize`` was called

    @property
    def size(self) -> int: ...

    def start(self, n: int) -> None: ...
    def prepare(self, n: int) -> None: ...
    def resize(self, n: int) -> None: ...
    def close(self) -> None: ...


class TorchrunJob:
    """Common part: a directory with ``logs/`` and ``ckpt/``, agents by replica index."""

    def __init__(self, name: str, cfg: Settings) -> None:
        self.name, self.cfg = name, cfg
        self.root = cfg.workdir / name
        self.logs, self.ckpt = self.root / "logs", self.root / "ckpt"
        self.logs.mkdir(parents=True)
        self.agents: dict[int, Agent] = {}
        self.retired: list[Agent] = []
        self.generation = 0
        self.spawned = 0
        self.stop_s: float | None = None  # last resize: SIGTERM -> every old agent exited (coordinated)
        self.decided_at: float | None = None
        self.tag = f"{cfg.workdir.name}/{name}/"  # ends with "/": no strategy's tag prefixes another's

    @property
    def size(self) -> int:
        return len(self.agents)

    def tagged(self, env: dict[str, str]) -> dict[str, str]:
        return {**env, "TIDE_BENCH_TAG": f"{self.tag}g{self.generation}/"}

    def argv(self) -> list[str]:
        return [str(SCRIPT), "--steps", "10000000", "--ckpt-every", str(self.cfg.ckpt_every),
                "--step-time", str(self.cfg.step_time), "--ckpt-dir", str(self.ckpt)]  # fmt: skip

    def spawn(self, index: int, env: dict[str, str]) -> Agent:
        self.spawned += 1
        logfile = self.logs / f"g{self.generation}-r{index}-{self.spawned}.log"
        cmd = [sys.executable, "-m", "torch.distributed.run", *self.argv()]
        return Agent(cmd, {**os.environ, **self.tagged(env)}, logfile)

    def start(self, n: int) -> None:
        raise NotImplementedError

    def resize(self, n: int) -> None:
        raise NotImplementedError

    def prepare(self, n: int) -> None:
        # Reap agents let go by an earlier resize (outside the timed window).
        wait_exit(self.retired, self.cfg.grace_s)
        for a in self.retired:
            a.kill()
        self.retired.clear()

    def close(self) -> None:
        everyone = [*self.agents.values(), *self.retired]
        for a in everyone:
            a.signal(signal.SIGTERM)
        wait_exit(everyone, 10)
        for a in everyone:
            a.kill()
        if stray := kill_tagged(self.tag):
            log(f"{self.name}: killed {stray} stray process(es)")
        self.agents.clear()
        self.retired.clear()


class Coordinated(TorchrunJob):
    """Tide's resize: stop every replica gracefully, start N replicas as a fresh rendezvous of exactly N."""

    tuning = RendezvousTuning(shutdown_timeout_s=20)

    def env(self, index: int, n: int, port: int) -> dict[str, str]:
        launch = ReplicaLaunch(
            job=self.name, project="bench", replica_index=index,
            run_id=run_id_for("bench", self.name, self.generation),
            rdzv_host="127.0.0.1", rdzv_port=port, min_nodes=n, max_nodes=n, checkpoint_dir=str(self.ckpt),
            local_addr="127.0.0.1", tuning=self.tuning,
        )  # fmt: skip
        return torchrun_env(launch)

    def start(self, n: int) -> None:
        self.generation += 1
        port = free_port()  # Tide allocates the master's port; a fresh one per launch avoids TIME_WAIT
        self.agents = {i: self.spawn(i, self.env(i, n, port)) for i in range(n)}

    def resize(self, n: int) -> None:
        old = list(self.agents.values())
        t0 = time.monotonic()
        for a in old:
            a.signal(signal.SIGTERM)
        stopped = wait_exit(old, self.cfg.grace_s)
        self.stop_s = time.monotonic() - t0
        if not stopped:
            log(f"{self.name}: agents still alive after {self.cfg.grace_s} s grace, killing them")
        for a in old:
            a.kill()
        if not stopped:  # workers of a killed agent outlive it (own session): find them by their tag
            kill_tagged(f"{self.tag}g{self.generation}/")
        self.start(n)


class CoordinatedWarm(Coordinated):
    """Coordinated, with agents from a pool of processes that already imported torchrun."""

    def __init__(self, name: str, cfg: Settings, fork_workers: bool = False) -> None:
        super().__init__(name, cfg)
        self.pool: list[tuple[Agent, Path]] = []
        if fork_workers:
            (self.root / "tide_fork_launcher.py").write_text(WARM_FORK_AGENT)
            self.cmd = [sys.executable, "-c", "import tide_fork_launcher as m; m.main()"]
        else:
            self.cmd = [sys.executable, "-c", WARM_AGENT]

    def _fill(self, n: int) -> None:
        while len(self.pool) < n:
            self.spawned += 1
            logfile = self.logs / f"warm-{self.spawned}.log"
            env = {**os.environ, "TIDE_BENCH_TAG": f"{self.tag}pool/", "PYTHONPATH": str(self.root)}
            agent = Agent(self.cmd, env, logfile, stdin=subprocess.PIPE)
            self.pool.append((agent, logfile))
        deadline = time.monotonic() + self.cfg.timeout_s
        while not all(b"warm-ready" in f.read_bytes() for _, f in self.pool):
            if time.monotonic() > deadline:
                raise TimeoutError("warm agents did not get ready")
            time.sleep(0.05)

    def prepare(self, n: int) -> None:
        super().prepare(n)
        self._fill(n)

    def start(self, n: int) -> None:
        self._fill(n)  # no-op when prepare() filled the pool; the first start pays the import
        self.generation += 1
        port = free_port()
        self.agents = {}
        for i in range(n):
            agent, _ = self.pool.pop(0)
            spec = {"env": self.tagged(self.env(i, n, port)), "argv": self.argv()}
            assert agent.stdin is not None
            agent.stdin.write((json.dumps(spec) + "\n").encode())
            agent.stdin.flush()
            self.agents[i] = agent

    def close(self) -> None:
        self.retired.extend(a for a, _ in self.pool)
        self.pool.clear()
        super().close()


class Native(TorchrunJob):
    """torchrun's own membership change on one rendezvous of ``--nnodes=2:4``."""

    def __init__(self, name: str, cfg: Settings, tuned: bool) -> None:
        super().__init__(name, cfg)
        self.tuned = tuned
        self.port = 0

    def env(self, index: int) -> dict[str, str]:
        run_id = run_id_for("bench", self.name, self.generation)
        if not self.tuned:  # torchrun's defaults for everything but what a multi-node job must say
            return {"PET_NNODES": f"{SMALL}:{BIG}", "PET_NPROC_PER_NODE": "1", "PET_RDZV_BACKEND": "c10d",
                    "PET_RDZV_ENDPOINT": f"127.0.0.1:{self.port}", "PET_RDZV_ID": run_id,
                    "PET_MAX_RESTARTS": "100"}  # fmt: skip
        launch = ReplicaLaunch(
            job=self.name, project="bench", replica_index=index, run_id=run_id, rdzv_host="127.0.0.1",
            rdzv_port=self.port, min_nodes=SMALL, max_nodes=BIG, checkpoint_dir=str(self.ckpt),
            local_addr="127.0.0.1", max_restarts=100,  # each shrink costs the survivors a restart
        )  # fmt: skip
        return torchrun_env(launch)

    def start(self, n: int) -> None:
        self.generation += 1
        self.port = free_port()
        self.agents = {i: self.spawn(i, self.env(i)) for i in range(n)}

    def resize(self, n: int) -> None:
        current = sorted(self.agents)
        for i in current[n:]:  # shrink: the highest indices go; the rendezvous host (0) stays
            agent = self.agents.pop(i)
            agent.signal(signal.SIGTERM)
            self.retired.append(agent)
        for i in range(len(current), n):  # grow: new agents join the running rendezvous
            self.agents[i] = self.spawn(i, self.env(i))


def make_job(name: str, cfg: Settings) -> Job:
    if name == "tide":
        from resize_tide import TideJob  # noqa: PLC0415 - starts a service; only when asked for

        return TideJob(name, cfg, script=SCRIPT)
    if name == "tide-kubernetes":
        from resize_kube import TideKubeJob  # noqa: PLC0415 - starts a fake cluster and a service

        return TideKubeJob(name, cfg, script=SCRIPT)
    if name == "coordinated":
        return Coordinated(name, cfg)
    if name == "coordinated-warm":
        return CoordinatedWarm(name, cfg)
    if name == "coordinated-fork":
        return CoordinatedWarm(name, cfg, fork_workers=True)
    if name in ("native-tuned", "native-default"):
        return Native(name, cfg, tuned=name == "native-tuned")
    raise SystemExit(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")


@dataclass
class Trial:
    direction: str
    ok: bool
    latency_s: float | None = None
    lost_steps: int | None = None
    stop_s: float | None = None
    pause_s: float | None = None  # training paused: the last step before the resize -> the first after
    note: str = ""


def measure(job: Job, watcher: LogWatcher, target: int, cfg: Settings) -> Trial:
    direction = "shrink" if target < job.size else "grow"
    job.prepare(target)
    job.stop_s = None
    t0 = time.time()
    job.resize(target)
    t0 = job.decided_at if job.decided_at is not None else t0
    remaining = cfg.timeout_s - (time.time() - t0)
    first = watcher.wait_for(lambda r: r["world_size"] == target and r["time"] >= t0, remaining)
    if first is None:
        return Trial(direction, ok=False, note=f"no step at world size {target} within {cfg.timeout_s:.0f} s")
    earlier = [r for r in watcher.steps() if r["time"] < first["time"]]
    before = [int(r["step"]) for r in earlier]
    lost = max(0, max(before, default=0) - (int(first["step"]) - 1))
    last = max((float(r["time"]) for r in earlier), default=None)
    trial = Trial(direction, ok=True, latency_s=float(first["time"]) - t0, lost_steps=lost, stop_s=job.stop_s)
    trial.pause_s = None if last is None else float(first["time"]) - last
    settled = watcher.wait_for(
        lambda r: r["world_size"] == target and int(r["step"]) >= int(first["step"]) + cfg.settle_steps,
        cfg.timeout_s,
    )
    if settled is None:
        trial.note = "did not keep running at the new size"
        trial.ok = False
    return trial


def restart(job: Job, watcher: LogWatcher, n: int, cfg: Settings) -> bool:
    """Start the job fresh at size n (from its checkpoint) and wait until it trains there."""
    job.close()
    t0 = time.time()
    job.start(n)
    first = watcher.wait_for(lambda r: r["world_size"] == n and r["time"] >= t0, cfg.timeout_s)
    if first is None:
        return False
    # trained a few steps: a resize measured now stops a running group, not one still forming (a SIGTERM while
    # a rank is inside init_process_group can leave it there until the shutdown timeout: docs/elastic-resize.md)
    settled = int(first["step"]) + cfg.settle_steps
    return (
        watcher.wait_for(lambda r: r["world_size"] == n and int(r["step"]) >= settled, cfg.timeout_s)
        is not None
    )


def run_round(job: Job, watcher: LogWatcher, cfg: Settings, rnd: int) -> list[Trial]:
    """One shrink 4 -> 2 and one grow 2 -> 4 of a job started fresh (from its checkpoint) at 4."""
    trials: list[Trial] = []
    try:
        if not restart(job, watcher, BIG, cfg):
            log(f"{job.name}: job did not start at world size {BIG}; round {rnd} skipped")
            return trials
        for target in (SMALL, BIG):
            trial = measure(job, watcher, target, cfg)
            trials.append(trial)
            lat = f"{trial.latency_s:.2f} s" if trial.latency_s is not None else "-"
            log(f"{job.name} {trial.direction} #{rnd}: {lat}, lost {trial.lost_steps} {trial.note}")
            if not trial.ok and (target == BIG or not restart(job, watcher, target, cfg)):
                break
    finally:
        job.close()
    return trials


@dataclass
class Summary:
    n: int = 0
    ok: int = 0
    latencies: list[float] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    stops: list[float] = field(default_factory=list)
    pauses: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        lat = self.latencies
        return {
            "n": self.n,
            "ok": self.ok,
            "p50_s": round(statistics.median(lat), 3) if lat else None,
            "min_s": round(min(lat), 3) if lat else None,
            "max_s": round(max(lat), 3) if lat else None,
            "latencies_s": [round(x, 3) for x in lat],
            "lost_steps_max": max(self.lost) if self.lost else None,
            "stop_p50_s": round(statistics.median(self.stops), 3) if self.stops else None,
            "pause_p50_s": round(statistics.median(self.pauses), 3) if self.pauses else None,
        }


def summarise(trials: list[Trial]) -> dict[str, dict[str, Any]]:
    out: dict[str, Summary] = {"shrink": Summary(), "grow": Summary()}
    for t in trials:
        s = out[t.direction]
        s.n += 1
        if t.ok and t.latency_s is not None:
            s.ok += 1
            s.latencies.append(t.latency_s)
        if t.lost_steps is not None:
            s.lost.append(t.lost_steps)
        if t.ok and t.stop_s is not None:
            s.stops.append(t.stop_s)
        if t.ok and t.pause_s is not None:
            s.pauses.append(t.pause_s)
    return {k: v.as_dict() for k, v in out.items()}


def report(results: dict[str, dict[str, dict[str, Any]]], chosen: str, cfg: Settings) -> dict[str, Any]:
    def p50(strategy: str, direction: str) -> float | None:
        return results.get(strategy, {}).get(direction, {}).get("p50_s")

    lost = [results.get(chosen, {}).get(d, {}).get("lost_steps_max") for d in ("shrink", "grow")]
    lost_known = [x for x in lost if x is not None]
    return {
        "chosen": chosen,
        "shrink_p50_s": p50(chosen, "shrink"),
        "grow_p50_s": p50(chosen, "grow"),
        "shrink_pause_p50_s": results.get(chosen, {}).get("shrink", {}).get("pause_p50_s"),
        "grow_pause_p50_s": results.get(chosen, {}).get("grow", {}).get("pause_p50_s"),
        "local_shrink_p50_s": p50("tide", "shrink"),
        "local_grow_p50_s": p50("tide", "grow"),
        "native_shrink_p50_s": p50("native-default", "shrink"),
        "native_grow_p50_s": p50("native-default", "grow"),
        "native_tuned_shrink_p50_s": p50("native-tuned", "shrink"),
        "native_tuned_grow_p50_s": p50("native-tuned", "grow"),
        "lost_steps_max": max(lost_known) if lost_known else None,
        "strategies": results,
        "settings": {
            "step_time_s": cfg.step_time,
            "ckpt_every": cfg.ckpt_every,
            "timeout_s": cfg.timeout_s,
            "grace_s": cfg.grace_s,
            "replicas": f"{BIG}<->{SMALL}",
            "cpus": os.cpu_count(),
        },
    }


def print_table(results: dict[str, dict[str, dict[str, Any]]]) -> None:
    def fmt(x: float | None) -> str:
        return f"{x:6.2f}" if x is not None else "     -"

    head = ("strategy", "resize", "ok/n", "p50 s", "min s", "max s", "stop s", "pause s", "lost")
    print("{:<18} {:<7} {:>5} {:>6} {:>6} {:>6} {:>6} {:>7} {:>5}".format(*head))
    for name, by_dir in results.items():
        for direction, s in by_dir.items():
            lost = "-" if s["lost_steps_max"] is None else str(s["lost_steps_max"])
            ok_n = f"{s['ok']}/{s['n']}"
            cells = (
                fmt(s["p50_s"]),
                fmt(s["min_s"]),
                fmt(s["max_s"]),
                fmt(s["stop_p50_s"]),
                " " + fmt(s["pause_p50_s"]),
            )
            print(f"{name:<18} {direction:<7} {ok_n:>5} {' '.join(cells)} {lost:>5}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--repeats", type=int, default=5, help="shrinks and grows per strategy")
    p.add_argument("--strategies", default=None, help=f"any of {', '.join(STRATEGIES)} (default: all)")
    p.add_argument(
        "--executor",
        choices=("local", "kubernetes"),
        default=None,
        help="kubernetes: Tide on Kubernetes (fake API server, real processes) beside Tide's local executor, "
        "reported as Tide's figures",
    )
    p.add_argument("--chosen", default=None, help="the strategy reported as Tide's (default: tide if run)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a resize may take before it fails")
    p.add_argument("--grace", type=float, default=30.0, help="seconds between SIGTERM and SIGKILL")
    p.add_argument("--step-time", type=float, default=0.05)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--keep", action="store_true", help="keep the scratch directory (logs, checkpoints)")
    return p.parse_args()


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # clean up on SIGTERM as on Ctrl-C
    workdir = Path(tempfile.mkdtemp(prefix="tide-resize-"))
    cfg = Settings(workdir, args.step_time, args.ckpt_every, args.grace, args.timeout)
    default = "tide,tide-kubernetes" if args.executor == "kubernetes" else ",".join(STRATEGIES)
    names = [s.strip() for s in (args.strategies or default).split(",") if s.strip()]
    trials: dict[str, list[Trial]] = {name: [] for name in names}
    try:
        jobs = {name: make_job(name, cfg) for name in names}
        watchers = {name: LogWatcher(job.logs) for name, job in jobs.items()}
        # Rounds interleave the strategies, so a change in the machine's background load hits all alike.
        for rnd in range(1, args.repeats + 1):
            for name in names:
                trials[name] += run_round(jobs[name], watchers[name], cfg, rnd)
    finally:
        if args.keep:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    results = {name: summarise(t) for name, t in trials.items()}
    preferred = ("tide-kubernetes", "tide") if args.executor == "kubernetes" else ("tide", "tide-kubernetes")
    chosen = args.chosen or next((n for n in preferred if n in names), "coordinated-fork")
    if args.json:
        print(json.dumps(report(results, chosen, cfg)))
    else:
        print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
