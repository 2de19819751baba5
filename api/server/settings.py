"""Service settings: what ``tide serve`` flags and ``TIDE_*`` variables configure, and what tests set.

Contract: a frozen dataclass with the documented defaults: ``tide serve``'s options, declared once in
``api.shared.serve_options.ServeOptions`` (``Settings.of`` takes them whole), and what only the service
and its tests set. ``database_url`` None means the embedded SQLite file in ``data_dir``;
``nodes``/``gpus_per_node`` None means "the GPUs torch sees, else 1 node of 4" (resolved when the executor
is built; the kubernetes executor takes its nodes from the cluster instead). ``data_dir`` defaults to
``api.shared.paths.default_data_dir()``: one place per user, where the CLI on the same machine finds the
server and its admin token.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from api.shared.paths import default_data_dir
from api.shared.serve_options import ServeOptions
from scheduler.store.db import sqlite_url

__all__ = ["Settings", "default_data_dir"]


@dataclass(frozen=True)
class Settings(ServeOptions):
    """``tide serve``'s options (``ServeOptions``: flags, variables, help, defaults) and what only the service
    and its tests set."""

    data_dir: Path = field(default_factory=default_data_dir)
    admin_token: str | None = None
    metrics_token: str | None = None  # a token that can read /metrics and nothing else (docs/security.md)
    max_body_bytes: int = 1 << 20
    run_loop: bool = True
    engine_process: bool = False  # the engine in a child process (``tide serve``), else in the API's (tests)
    check_invariants: bool = False

    @classmethod
    def of(cls, options: ServeOptions, **more: Any) -> Settings:
        """The settings of ``tide serve`` with ``options``, and ``more`` of what only the service sets."""
        given = {item.name: getattr(options, item.name) for item in fields(ServeOptions)}
        return cls(**(given | more))

    def resolved_database_url(self) -> str:
        return self.database_url or sqlite_url(self.data_dir)
