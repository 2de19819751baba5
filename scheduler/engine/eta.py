"""Start-time forecasts of the live service: the pure part that runs in the worker process.

Contract: ``EtaTask`` is plain, picklable data (the cycle's snapshot, every active job's estimated time left,
the horizon), built by ``scheduler.engine.eta_store.gather``. ``compute(task)`` runs
``scheduler.core.forecast`` on it and returns one JSON-ready dict per waiting job, keyed ``project/job``. It
reads nothing else and imports only the core, so it runs in a child process (``eta_worker``), never in the
loop or on a request.

An ETA dict: ``start_p50``, ``start_p90`` (epoch seconds, or None: not within the horizon), ``size``
(replicas), ``grows`` (a running job's growth, not a start), ``after`` (``project/job`` whose estimated end
frees the GPUs, or None: they are free now), ``source`` (what that end is estimated from: ``declared``,
``project``, ``cluster``, ``default``), ``computed_at``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.core.estimate import Estimate
from scheduler.core.forecast import Horizon, forecast
from scheduler.core.model import ClusterState, Config

Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class EtaTask:
    """Everything one forecast reads (picklable: it crosses to the worker process)."""

    state: ClusterState
    config: Config
    now: float
    left: dict[Key, Estimate]
    horizon: Horizon


def compute(task: EtaTask) -> dict[str, dict[str, Any]]:
    """The ETA of every waiting job, keyed ``project/job``."""
    out: dict[str, dict[str, Any]] = {}
    etas = forecast(task.state, task.config, now=task.now, left=task.left, horizon=task.horizon)
    for (project, name), eta in etas.items():
        out[f"{project}/{name}"] = {
            "start_p50": eta.start_p50,
            "start_p90": eta.start_p90,
            "size": eta.size,
            "grows": eta.grows,
            "after": f"{eta.after[0]}/{eta.after[1]}" if eta.after is not None else None,
            "source": eta.source.value if eta.source is not None else None,
            "computed_at": task.now,
        }
    return out
