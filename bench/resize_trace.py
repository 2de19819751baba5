"""Where a resize's time goes: reduce a ``TIDE_TRACE_FILE`` of a ``bench/resize.py --strategies tide`` run.

Usage (from the repository root)::

    TIDE_TRACE_FILE=/tmp/trace.jsonl .venv/bin/python bench/resize.py --strategies tide --keep
    .venv/bin/python bench/resize_trace.py /tmp/tide-resize-XXXX/tide/data /tmp/trace.jsonl

Contract: reads the service's database (``DATA/tide.db``: project a's ``shrink``/``grow`` events), the
trace (``scheduler.elastic.agent.trace``: executor and launcher timestamps) and a's training logs
(``DATA/logs/a/train/*.log``: ``stop``/``start`` events, step lines) and prints, per resize and as medians,
the seconds from the decision to each step: SIGTERM sent, the script's stop line, the last old launcher's
exit, the engine noticing it, the new launch spawned, formed (rendezvous done), its workers started, the
process group ready (the script's ``start`` line) and the first step at the new world size.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
from pathlib import Path
from typing import Any

Record = dict[str, Any]
STEPS = ("sigterm", "script_stop", "launchers_exit", "noticed", "spawned", "formed", "workers", "pg_ready",
         "first_step")  # fmt: skip


def load(data: Path, trace: Path) -> tuple[list[tuple[float, str]], list[Record], list[Record]]:
    with sqlite3.connect(data / "tide.db") as db:
        query = (
            "select time, kind from events where project = 'a' and kind in ('shrink', 'grow') order by time"
        )
        events = [(float(t), str(k)) for t, k in db.execute(query)]
    marks = [json.loads(line) for line in trace.read_text().splitlines() if line.startswith("{")]
    lines: list[Record] = []
    for path in sorted((data / "logs" / "a" / "train").glob("*.log")):
        for raw in path.read_text(errors="replace").splitlines():
            if raw.startswith("{"):
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue
                if "time" in record:
                    lines.append(record)
    return events, marks, lines


def phases(t0: float, kind: str, end: float, marks: list[Record], lines: list[Record]) -> Record | None:
    def at(what: str, train_only: bool = False) -> list[float]:
        return [float(m["t"]) for m in marks if m["what"] == what and t0 <= m["t"] < end
                and (not train_only or m.get("job") == "train")]  # fmt: skip

    def logged(event: str) -> list[float]:
        return [float(r["time"]) for r in lines if r.get("event") == event and t0 <= r["time"] < end]

    size = 2 if kind == "shrink" else 4
    first = [
        float(r["time"])
        for r in lines
        if r.get("world_size") == size and "step" in r and t0 <= r["time"] < end
    ]
    spawned = at("spawned", train_only=True)
    if not first or not spawned:
        return None
    start, step = spawned[0], min(first)

    def last(times: list[float], lo: float, hi: float) -> float | None:
        inside = [t for t in times if lo <= t <= hi]
        return max(inside) - t0 if inside else None

    stops, starts = logged("stop"), logged("start")
    return {
        "kind": kind,
        "sigterm": min(at("sigterm", train_only=True), default=t0) - t0,
        "script_stop": stops[0] - t0 if stops else None,
        "launchers_exit": last(at("launcher-exit"), t0, start),
        "noticed": last(at("noticed-exit", train_only=True), t0, start + 0.01),
        "spawned": start - t0,
        "formed": last(at("formed"), start, step),
        "workers": last(at("worker-start"), start, step),
        "pg_ready": min(starts) - t0 if starts else None,
        "first_step": step - t0,
    }


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    events, marks, lines = load(Path(sys.argv[1]), Path(sys.argv[2]))
    rows = []
    for i, (t0, kind) in enumerate(events):
        end = events[i + 1][0] if i + 1 < len(events) else float("inf")
        row = phases(t0, kind, end, marks, lines)
        if row is not None:
            rows.append(row)
    print(f"{'resize':<11} " + " ".join(f"{s:>14}" for s in STEPS))
    for row in rows:
        cells = " ".join(f"{row[s]:14.2f}" if row[s] is not None else f"{'-':>14}" for s in STEPS)
        print(f"{row['kind']:<11} {cells}")
    for kind in ("shrink", "grow"):
        mine = [r for r in rows if r["kind"] == kind]
        medians = [
            statistics.median(v) if (v := [r[s] for r in mine if r[s] is not None]) else None for s in STEPS
        ]
        cells = " ".join(f"{m:14.2f}" if m is not None else f"{'-':>14}" for m in medians)
        print(f"{kind + ' p50':<11} {cells}" if mine else f"{kind}: none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
