"""The seed scenario with real torchrun training, end to end through a real Tide service (``make demo``).

What it does: starts ``tide serve`` with 4 virtual GPUs (4 nodes x 1, local executor) in a scratch
directory; project a (deserves 2) runs ``torchrun train_elastic.py`` as an elastic job (min 2, max 4) and
borrows all 4 GPUs; once it trains at world size 4, project b (deserves 2) claims 2 GPUs with a job that
waits (until ``--b-seconds`` passed and a trained 10 steps at world size 2); a shrinks to 2 (a coordinated restart from its checkpoint), b runs and finishes, a grows back to 4
and training completes. It polls the REST API and a's training log (the master's JSON step lines), then
prints a timeline of decisions and world sizes and writes a PNG chart (GPUs per project, a's world size)
next to the service's data. ``--json FILE`` also writes everything it observed, for tests.

Usage (from the repository root): ``.venv/bin/python deploy/examples/demo.py [--out DIR] [--steps N]``.
Exit status 0 when a's job succeeded and b's did, 1 otherwise. The service and every process it started
are stopped at the end, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from api.client.rest import TideClient  # noqa: E402
from scheduler.elastic.agent.ports import free_port  # noqa: E402

SCRIPT = ROOT / "deploy" / "examples" / "train_elastic.py"
TOKEN = "tide-demo-admin-token"
A, B = ("a", "train"), ("b", "eval")
WAIT_FOR_FILE = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.2)"


@dataclass
class Sample:
    """One look at the service: seconds since the demo started, GPUs per project, a's master replica."""

    t: float
    gpus: dict[str, int]
    status: dict[str, str]
    master: dict[str, Any] | None


@dataclass
class Observed:
    started_at: float
    samples: list[Sample] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, str] = field(default_factory=dict)
    chart: str = ""


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", type=Path, help="directory for the service's data and the chart (default: temp)")
    p.add_argument("--steps", type=int, default=400, help="a's total training steps")
    p.add_argument("--step-time", type=float, default=0.1, help="extra seconds per training step")
    p.add_argument("--b-seconds", type=float, default=15.0, help="how long b's job runs at least")
    p.add_argument("--timeout", type=float, default=230.0, help="give up after this many seconds")
    p.add_argument("--json", type=Path, help="write what was observed to this file")
    return p.parse_args()


def start_service(
    data_dir: Path, port: int, *, settle: float = 3.0, grace: float = 20.0
) -> subprocess.Popen[bytes]:
    """``tide serve`` with 4 virtual GPUs (4 nodes x 1) and the local executor, in a session of its own."""
    tide = Path(sys.executable).parent / "tide"
    argv = [str(tide), "serve", "--executor", "local", "--nodes", "4", "--gpus-per-node", "1",
            "--port", str(port), "--data-dir", str(data_dir), "--cycle-period", "0.5",
            "--grace-period", f"{grace:g}", "--settle-time", f"{settle:g}", "--log-level", "warning"]  # fmt: skip
    log = (data_dir / "service.log").open("ab")
    env = {**os.environ, "TIDE_ADMIN_TOKEN": TOKEN}
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def wait_healthy(client: TideClient, service: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.poll() is not None:
            raise SystemExit("the service exited at start; see service.log in the data directory")
        try:
            client.health()
            return
        except Exception:
            time.sleep(0.2)
    raise SystemExit(f"the service did not answer within {timeout:.0f} s")


def training_lines(client: TideClient) -> list[dict[str, Any]]:
    """a's step lines, every launch so far. Rank 0 prints them, and which replica gets rank 0 is
    torchrun's choice at each launch: read every replica's log and order the lines by time."""
    lines = []
    for index in range(4):
        try:
            text = client.logs(*A, replica=index)
        except Exception:
            continue
        for raw in text.splitlines():
            if raw.startswith("{") and '"step"' in raw:
                try:
                    lines.append(json.loads(raw))
                except ValueError:
                    continue
    return sorted(lines, key=lambda line: float(line["time"]))


def look(client: TideClient, seen: Observed) -> None:
    now = time.time() - seen.started_at
    gpus = {p: client.project(p).allocated_gpus for p in ("a", "b")}
    status, master = {}, None
    for project, name in (A, B):
        try:
            job = client.job(project, name)
        except Exception:
            continue
        status[project] = job.status
        if (project, name) == A:
            zero = [r for r in job.replicas if r.index == 0]
            if zero:
                master = {"node": zero[0].node, "gpu_ids": zero[0].gpu_ids, "status": zero[0].status}
    seen.samples.append(Sample(round(now, 2), gpus, status, master))
    seen.steps = training_lines(client)


def world_size(seen: Observed) -> int | None:
    return int(seen.steps[-1]["world_size"]) if seen.steps else None


def step_now(seen: Observed) -> int:
    return int(seen.steps[-1]["step"]) if seen.steps else 0


def steps_at(seen: Observed, size: int) -> int:
    return sum(1 for line in seen.steps if line["world_size"] == size)


def run_scenario(client: TideClient, args: argparse.Namespace, seen: Observed) -> None:
    client.create_project({"name": "a", "deserved_gpus": 2})
    client.create_project({"name": "b", "deserved_gpus": 2})
    command = ["torchrun", str(SCRIPT), "--steps", str(args.steps), "--step-time", str(args.step_time),
               "--ckpt-every", "10", "--no-speed-report"]  # fmt: skip
    # no speed reports (R19): how 4 replicas scale on this machine's CPU cores would decide whether the job
    # grows back to 4 in one step or stops at its measured peak first; the seed scenario is about the resize
    client.submit("a", {"name": A[1], "workers": 3, "min_replicas": 2, "max_replicas": 4, "command": command})
    phase, b_submitted_at = "wait-4", 0.0
    done_file = args.out_dir / "b-done"
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        look(client, seen)
        if seen.samples[-1].status.get("a") in ("succeeded", "failed", "cancelled"):
            return
        if phase == "wait-4" and world_size(seen) == 4 and step_now(seen) >= 10:
            # b's job finishes on its own once told (a file appears): after --b-seconds and once a trained
            # 10 steps at world size 2, so the timeline shows a at 2 however long the restarts take here.
            waiter = [sys.executable, "-c", WAIT_FOR_FILE, str(done_file)]
            client.submit("b", {"name": B[1], "workers": 1, "command": waiter})
            phase, b_submitted_at = "b-claims", time.time()
            print(f"[{time.time() - seen.started_at:6.1f} s] b submits a job of 2 GPUs", flush=True)
        if phase == "b-claims" and time.time() - b_submitted_at >= args.b_seconds and steps_at(seen, 2) >= 10:
            done_file.touch()
            phase = "b-done"
        time.sleep(0.25)
    raise SystemExit(f"the scenario did not finish within {args.timeout:.0f} s (phase {phase}, b at "
                     f"{b_submitted_at - seen.started_at:.1f} s)")  # fmt: skip


def collect(client: TideClient, seen: Observed) -> None:
    for project, name in (A, B):
        for event in client.events(project=project, job=name, limit=1000):
            when = event.time.timestamp() - seen.started_at
            seen.events.append({"id": event.id, "t": round(when, 2), "kind": event.kind, "project": event.project,
                                "job": event.job, "replicas": event.replicas, "reason": event.reason})  # fmt: skip
    seen.events.sort(key=lambda e: e["id"])
    for project, name in (A, B):
        seen.final[project] = client.job(project, name).status


def print_timeline(seen: Observed) -> None:
    print("\nTimeline (seconds since the demo started)")
    rows: list[tuple[float, str]] = []
    for e in seen.events:
        rows.append(
            (e["t"], f"{e['kind']:<8} {e['project']}/{e['job']} replicas {e['replicas']}: {e['reason']}")
        )
    last = None
    for s in seen.steps:
        if s["world_size"] != last:
            when = float(s["time"]) - seen.started_at
            rows.append((when, f"training  a/train at world size {s['world_size']} from step {s['step']}"))
            last = s["world_size"]
    for when, text in sorted(rows):
        print(f"  {when:7.1f}  {text}")
    if seen.steps:
        first, end = seen.steps[0], seen.steps[-1]
        print(f"\nsteps {first['step']} -> {end['step']}, loss {first['loss']:.4f} -> {end['loss']:.4f}")
    print(f"final: a {seen.final.get('a')}, b {seen.final.get('b')}")


def draw_chart(seen: Observed, path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - only when drawing

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True, height_ratios=[3, 2])
    ts = [s.t for s in seen.samples]
    for project, color in (("a", "tab:blue"), ("b", "tab:orange")):
        top.step(ts, [s.gpus.get(project, 0) for s in seen.samples], where="post", label=f"project {project}",
                 color=color, linewidth=2)  # fmt: skip
    top.set_ylabel("GPUs allocated")
    top.set_ylim(-0.2, 4.5)
    top.set_yticks(range(5))
    top.legend(loc="center right")
    top.set_title("Seed scenario: 4 GPUs, a elastic 2..4, b claims 2")
    times, sizes = world_size_curve(seen)
    bottom.step(times, sizes, where="post", color="tab:blue", linewidth=2)
    bottom.set_ylabel("a: world size\n(0: restarting)")
    bottom.set_ylim(0, 4.5)
    bottom.set_yticks(range(5))
    bottom.set_xlabel("seconds since start")
    for n, e in enumerate(
        e for e in seen.events if e["kind"] in ("start", "shrink", "grow", "finish", "fail")
    ):
        for ax in (top, bottom):
            ax.axvline(e["t"], color="grey", linestyle=":", linewidth=1)
        top.annotate(f"{e['project']} {e['kind']}", (e["t"], 4.35 - 0.45 * (n % 2)), fontsize=8, ha="left",
                     va="top", color="dimgrey", xytext=(2, 0), textcoords="offset points")  # fmt: skip
    for ax in (top, bottom):
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def world_size_curve(seen: Observed, gap: float = 1.5) -> tuple[list[float], list[int]]:
    """a's world size over time from its step lines; 0 while no step was logged for ``gap`` seconds."""
    times: list[float] = []
    sizes: list[int] = []
    for line in seen.steps:
        when = float(line["time"]) - seen.started_at
        if times and when - times[-1] > gap:
            times.append(times[-1] + 0.3)
            sizes.append(0)
        times.append(when)
        sizes.append(int(line["world_size"]))
    return times, sizes


def stop_service(service: subprocess.Popen[bytes], data_dir: Path) -> None:
    """Stop the service, then every replica process it started (replicas outlive a service on purpose)."""
    if service.poll() is None:
        service.send_signal(signal.SIGTERM)
        try:
            service.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(service.pid, signal.SIGKILL)
            service.wait()
    for record in (data_dir / "replicas").glob("*.json"):
        try:
            os.killpg(int(json.loads(record.read_text())["pid"]), signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            continue
    marker = f"TIDE_CHECKPOINT_DIR={data_dir}".encode()
    for proc in Path("/proc").iterdir():  # torchrun workers run in sessions of their own
        try:
            if proc.name.isdigit() and marker in (proc / "environ").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:
            continue


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    out = (args.out or Path(tempfile.mkdtemp(prefix="tide-demo-"))).resolve()
    args.out_dir = out
    data_dir = out / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    service = start_service(data_dir, port)
    client = TideClient(f"http://127.0.0.1:{port}", TOKEN)
    seen = Observed(started_at=time.time())
    try:
        wait_healthy(client, service)
        print(f"Tide is serving on http://127.0.0.1:{port} (data in {data_dir})", flush=True)
        run_scenario(client, args, seen)
        collect(client, seen)
    finally:
        client.close()
        stop_service(service, data_dir)
    print_timeline(seen)
    chart = out / "demo.png"
    draw_chart(seen, chart)
    seen.chart = str(chart)
    print(f"\nChart: {chart}  (took {time.time() - seen.started_at:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(asdict(seen)))
    return 0 if seen.final == {"a": "succeeded", "b": "succeeded"} else 1


if __name__ == "__main__":
    sys.exit(main())
