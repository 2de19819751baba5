"""CLI start: wall time of ``tide`` commands a person types all day, beside ``python -c pass``, in one run.

Starts one ``tide serve`` (the in-memory executor, 25 nodes of 4 GPUs, SQLite in a scratch directory), gives
it 100 running jobs, then times, ``--runs`` times each (20), round robin so that noise from the machine's
other work spreads evenly over every row:

- ``python -c pass``: the interpreter of each ``tide`` compared (its floor);
- ``tide --help``, ``tide version``: no server involved;
- ``tide list --json``: the 100 jobs from that server (``TIDE_URL``/``TIDE_TOKEN``); ``tide version`` and
  this one take the quick path (``api.client.cli.quick``: the standard library alone);
- ``tide list``: the same jobs drawn as a table (typer, httpx and rich: the full CLI's start);
- the request ``tide list`` makes (``GET /api/v1/jobs`` on a fresh connection), timed in this process:
  the server's part of it.

Each row gives the median, the 90th percentile and the fastest run, in seconds. ``--tide PATH`` (repeat it)
names the ``tide`` executables to compare, e.g. a checkout of main beside this one: each column is one of
them (the commit of its tree is shown). The service is this tree's. Targets, on this machine idle:
``tide list --json`` <= 0.25 s median, and <= 2.5 x ``python -c pass`` + the request; both are printed.
The load average is printed before and after: compare only figures from one run.

    .venv/bin/python bench/cli_start.py [--tide /tmp/base/.venv/bin/tide --tide .venv/bin/tide] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
from livekit import serve_argv

from scheduler.elastic.agent.ports import free_port

ADMIN = "bench-admin-token-" + "x" * 32
JOBS = 100
TARGET_S = 0.25
TARGET_RATIO = 2.5
COMMANDS = {
    "tide --help": ["--help"],
    "tide version": ["version"],
    "tide list --json": ["list", "--json"],
    "tide list": ["list"],
}


@contextmanager
def serve() -> Iterator[str]:
    """A ``tide serve`` of this tree with ``JOBS`` running jobs; yields its URL."""
    port = free_port()
    data = tempfile.mkdtemp(prefix="tide-bench-cli-")
    env = {**os.environ, "TIDE_ADMIN_TOKEN": ADMIN, "TIDE_DATA_DIR": data, "TIDE_EXECUTOR": "memory"}
    argv = serve_argv(port)
    argv += ["--nodes", "25", "--gpus-per-node", "4", "--cycle-period", "0.5"]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("tide serve did not start")
            time.sleep(0.1)
        load_jobs(url)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def load_jobs(url: str) -> None:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=60) as client:
        client.post("/projects", json={"name": "team-a", "deserved_gpus": JOBS}).raise_for_status()
        for i in range(JOBS):
            body = {"name": f"train-{i}", "command": ["python", "train.py", "--epochs", "90"]}
            client.post("/projects/team-a/jobs", json=body).raise_for_status()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            jobs = client.get("/jobs").json()
            if sum(job["status"] == "running" for job in jobs) == JOBS:
                return
            time.sleep(0.2)
    raise SystemExit(f"the {JOBS} jobs did not all start within 30 s")


def commit_of(tide: Path) -> str:
    """The commit of the tree whose virtualenv holds ``tide`` (``TREE/.venv/bin/tide``)."""
    tree = tide.resolve().parent.parent.parent
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    )
    return (done.stdout.strip() or "?") + ("+changes" if dirty.stdout.strip() else "")


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float] | None:
    """(wall seconds, CPU seconds of the process) of ``argv``, or None when that ``tide`` has no such
    command (``tide version`` before it existed); any other failure ends the bench."""
    cpu_before = _children_cpu()
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode == 2 and b"No such command" in done.stderr:
        return None
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return elapsed, _children_cpu() - cpu_before


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def request_seconds(url: str, runs: int) -> list[float]:
    """``GET /api/v1/jobs`` as ``tide list`` sends it: a fresh connection each time."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        with httpx.Client(base_url=url, timeout=30) as client:
            client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {ADMIN}"}).raise_for_status()
        times.append(time.perf_counter() - started)
    return times


Times = dict[str, dict[str, list[tuple[float, float]]]]


def measure(tides: list[Path], url: str, runs: int) -> Times:
    """Times of every row for every ``tide``, round robin; two unrecorded warm-up rounds first."""
    env = {**os.environ, "TIDE_URL": url, "TIDE_TOKEN": ADMIN, "NO_COLOR": "1", "COLUMNS": "80"}
    env["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="tide-bench-cli-config-")
    rows = {"python -c pass": None, **COMMANDS}
    times: Times = {str(t): {row: [] for row in rows} for t in tides}
    for turn in range(runs + 2):
        for tide in tides:
            for row, args in rows.items():
                argv = [str(tide.parent / "python"), "-c", "pass"] if args is None else [str(tide), *args]
                took = run_once(argv, env)
                if turn >= 2 and took is not None:
                    times[str(tide)][row].append(took)
    return times


def summary(values: list[tuple[float, float]]) -> dict[str, float] | None:
    """Wall time's median, 90th percentile and fastest; the median CPU time of the process."""
    if not values:
        return None  # no such command in that tide
    ordered = sorted(wall for wall, _ in values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    cpu = statistics.median(cpu for _, cpu in values)
    return {"median_s": statistics.median(ordered), "p90_s": p90, "min_s": ordered[0], "cpu_median_s": cpu}


def _median(row: dict[str, float] | None) -> float:
    assert row is not None  # python -c pass and tide list run in every tide
    return row["median_s"]


def report(tides: list[Path], times: Times, request: list[float]) -> dict:
    columns = []
    request_median = statistics.median(request)
    for tide in tides:
        rows = {row: summary(values) for row, values in times[str(tide)].items()}
        listing, floor = _median(rows["tide list --json"]), _median(rows["python -c pass"])
        bound = TARGET_RATIO * floor + request_median
        target = {
            "list_median_s": listing,
            "list_within_0_25_s": listing <= TARGET_S,
            "list_bound_s": bound,
            "list_within_2_5x_pass_plus_request": listing <= bound,
            "list_over_pass": listing / floor,
        }
        columns.append({"tide": str(tide), "commit": commit_of(tide), "rows": rows, "target": target})
    return {
        "runs": len(request),
        "request": summary([(seconds, 0.0) for seconds in request]),
        "columns": columns,
        "cores": os.cpu_count(),
    }


def table(result: dict, load: tuple[list[float], list[float]]) -> str:
    columns = result["columns"]
    heads = [f"{c['commit']} ({Path(c['tide']).parent.parent.parent.name})" for c in columns]
    width = max(34, *(len(h) for h in heads))
    lines = [
        f"tide start, wall median / p90 / fastest, and CPU median, of {result['runs']} runs, in seconds; "
        f"load average {load[0][0]:.2f} before, {load[1][0]:.2f} after, {result['cores']} cores",
        f"{'command':<20}" + "".join(f"  {h:>{width}}" for h in heads),
    ]
    for row in columns[0]["rows"]:
        cells = []
        for column in columns:
            s = column["rows"][row]
            cells.append(
                "no such command"
                if s is None
                else f"{s['median_s']:.3f} / {s['p90_s']:.3f} / {s['min_s']:.3f}  cpu {s['cpu_median_s']:.3f}"
            )
        lines.append(f"{row:<20}" + "".join(f"  {cell:>{width}}" for cell in cells))
    r = result["request"]
    lines.append(f"{'the request alone':<20}  {r['median_s']:.3f} / {r['p90_s']:.3f} / {r['min_s']:.3f}")
    for head, column in zip(heads, columns, strict=True):
        t = column["target"]
        lines.append(
            f"{head}: tide list --json {t['list_median_s']:.3f} s = {t['list_over_pass']:.1f} x python -c pass; "
            f"<= {TARGET_S} s: {'yes' if t['list_within_0_25_s'] else 'NO'}; "
            f"<= {TARGET_RATIO} x pass + request ({t['list_bound_s']:.3f} s): "
            f"{'yes' if t['list_within_2_5x_pass_plus_request'] else 'NO'}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tide", action="append", type=Path, help="a tide executable (repeat to compare)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args()
    tides = [path.absolute() for path in args.tide or [Path(sys.executable).parent / "tide"]]
    for tide in tides:
        if not os.access(tide, os.X_OK):
            raise SystemExit(f"{tide} is not an executable tide (make venv in its tree first)")
    with serve() as url:
        before = list(os.getloadavg())
        times = measure(tides, url, args.runs)
        request = request_seconds(url, args.runs)
        after = list(os.getloadavg())
    result = report(tides, times, request) | {"load_average_before": before, "load_average_after": after}
    print(json.dumps(result, indent=2) if args.json else table(result, (before, after)))


if __name__ == "__main__":
    main()
