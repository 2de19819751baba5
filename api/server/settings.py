"""Service settings: what ``tide serve`` flags and ``TIDE_*`` variables configure.

Contract: a frozen dataclass with the documented defaults; ``database_url`` None means the embedded SQLite
file in ``data_dir``; ``nodes``/``gpus_per_node`` None means "the GPUs torch sees, else 1 node of 4" (resolved
when the executor is built; the kubernetes executor takes its nodes from the cluster instead). ``data_dir``
defaults to ``api.shared.paths.default_data_dir()``: one place per user, where the CLI on the same machine finds
the server and its admin token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from api.shared.paths import default_data_dir
from scheduler.store.db import sqlite_url

__all__ = ["Settings", "default_data_dir"]


@dataclass(frozen=True)
class Settings:
    data_dir: Path = field(default_factory=default_data_dir)
    database_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    executor: str = "local"
    nodes: int | None = None
    gpus_per_node: int | None = None
    nodes_per_domain: int | None = None  # R17: the local executor's virtual nodes in domains of this many
    cycle_period: float = 1.0
    grace_period: float = 30.0
    settle_seconds: float = 10.0
    eta_every: float = 30.0  # seconds between start-time forecasts of the waiting jobs (0: none)
    usage_half_life: float = 0.0  # fair share over time (R14); 0 = off
    admin_token: str | None = None
    metrics_token: str | None = None  # a token that can read /metrics and nothing else (docs/security.md)
    # the kubernetes executor (docs/kubernetes.md); None means its default
    namespace: str | None = None
    kubeconfig: str | None = None
    default_image: str | None = None
    node_selector: str | None = None
    topology_key: str | None = None  # R17: node label naming each node's topology domain
    checkpoint_claim: str | None = None
    agent_url: str | None = None  # where job pods reach the service (their agents); None: no in-place resizes
    max_body_bytes: int = 1 << 20
    run_loop: bool = True
    engine_process: bool = False  # the engine in a child process (``tide serve``), else in the API's (tests)
    log_level: str = "info"  # the engine process's logging (``api.server.logs``)
    log_format: str = "text"
    check_invariants: bool = False

    def resolved_database_url(self) -> str:
        return self.database_url or sqlite_url(self.data_dir)
