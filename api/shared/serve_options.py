"""``tide serve``'s options, declared once: name, type, default, flag, ``TIDE_*`` variable and help.

Contract: ``ServeOptions`` is a frozen dataclass whose fields are the options, in the order ``tide serve
--help`` lists them. Each field's metadata (``option``) holds its help text and, where they are not the
ones derived from the field's name (``--name-with-dashes``, ``TIDE_NAME``), its flag and variable, and the
least value it takes. The CLI (``api.client.cli.serve``) builds its typer options from these fields and
passes a ``ServeOptions`` whole to ``api.server.serve.run``; the service's ``Settings``
(``api.server.settings``) extends it with what only the service and its tests set. Standard library only:
every ``tide`` command may import it.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from pathlib import Path
from typing import Any

ENV_PREFIX = "TIDE_"


def option(
    help: str, *, flag: str | None = None, env: str | None = None, least: float | None = None
) -> dict[str, Any]:
    """A field's metadata: its help text; its flag and variable where they are not the derived ones; the
    least value it takes, if any."""
    return {"help": help, "flag": flag, "env": env, "least": least}


def flag_of(item: Field[Any]) -> str:
    """The option's flag: ``--name-with-dashes`` unless its metadata names another."""
    return item.metadata.get("flag") or "--" + item.name.replace("_", "-")


def env_of(item: Field[Any]) -> str:
    """The option's environment variable: ``TIDE_NAME`` unless its metadata names another."""
    return item.metadata.get("env") or ENV_PREFIX + item.name.upper()


def serve_options() -> tuple[Field[Any], ...]:
    """The options, in the order ``tide serve --help`` lists them."""
    return fields(ServeOptions)


KUBE = "kubernetes: "


@dataclass(frozen=True)
class ServeOptions:
    host: str = field(default="127.0.0.1", metadata=option("Address to listen on."))
    port: int = field(default=8000, metadata=option("Port to listen on."))
    database_url: str | None = field(
        default=None, metadata=option("postgresql://... (default: SQLite in the data dir).")
    )
    database_pool: int = field(
        default=10,
        metadata=option(
            "Most PostgreSQL connections each of the service's two processes opens (a pod: twice this).",
            least=1,
        ),
    )
    database_wait: float = field(
        default=60.0,
        metadata=option(
            "Seconds to wait at start for a database that does not answer yet (it may start after Tide), "
            "retrying, before giving up.",
            least=0,
        ),
    )
    data_dir: Path | None = field(
        default=None, metadata=option("State, logs, admin token (default ~/.local/share/tide).")
    )
    executor: str = field(
        default="local",
        metadata=option(
            "local (processes here), kubernetes (pods), or memory (nothing runs: trials and benchmarks; "
            "loopback only)."
        ),
    )
    nodes: int | None = field(default=None, metadata=option("Virtual nodes.", least=1))
    gpus_per_node: int | None = field(default=None, metadata=option("Virtual GPUs per node.", least=1))
    nodes_per_domain: int | None = field(  # R17: the local executor's virtual nodes in domains of this many
        default=None,
        metadata=option(
            "Virtual nodes per topology domain (domain-0: node-0..node-N-1, ...); default: no domains.",
            least=1,
        ),
    )
    cycle_period: float = field(
        default=1.0, metadata=option("Seconds between scheduling cycles.", least=0.01)
    )
    grace_period: float = field(default=30.0, metadata=option("Seconds from SIGTERM to SIGKILL.", least=0))
    stall_periods: float = field(
        default=30.0,
        metadata=option(
            "Cycle periods the leading engine may go without completing a cycle before /healthz answers "
            "503 (0: never).",
            least=0,
        ),
    )
    settle_seconds: float = field(
        default=10.0,
        metadata=option(
            "Seconds a resized job is left alone (R7).", flag="--settle-time", env="TIDE_SETTLE_TIME", least=0
        ),
    )
    resize_cost_seconds: float = field(  # R18
        default=0.0,
        metadata=option(
            "Seconds a resize pauses a job not yet measured whose project and department set no resize cost; "
            "growth happens only when it pays for that pause (0: free, growth as before R18).",
            flag="--resize-cost",
            env="TIDE_RESIZE_COST",
            least=0,
        ),
    )
    eta_every: float = field(
        default=30.0,
        metadata=option(
            "Seconds between start-time forecasts of waiting jobs (0: none); a forecast is also followed no "
            "sooner than ten times what it took (tens of thousands of waiting jobs).",
            least=0,
        ),
    )
    usage_half_life: float = field(  # R14
        default=0.0,
        metadata=option(
            "Seconds: fair share over time. GPU-hours a project used above its quota, decayed by this "
            "half-life, lower its share of idle GPUs (0: off).",
            least=0,
        ),
    )
    finished_retention: float = field(
        default=0.0,
        metadata=option(
            "Seconds a finished job (succeeded, failed, cancelled) is kept, with its events, after it ended; "
            "then it is removed (0: kept until deleted).",
            least=0,
        ),
    )
    tls_cert: Path | None = field(
        default=None,
        metadata=option("PEM certificate (chain) to serve HTTPS with, with --tls-key (default: plain HTTP)."),
    )
    tls_key: Path | None = field(default=None, metadata=option("PEM private key of --tls-cert."))
    leader_election: str = field(
        default="postgres",
        metadata=option(
            "Who elects the one scheduling replica: postgres (the database: a PostgreSQL advisory lock, "
            "SQLite a file lock) or lease (a Kubernetes Lease; needs --executor kubernetes; for PostgreSQL "
            "behind a transaction-pooling PgBouncer)."
        ),
    )
    lease_duration: float = field(
        default=15.0,
        metadata=option(
            "With --leader-election lease: seconds a standby waits on a lease that is not renewed before "
            "it takes over (the leader renews every 2/15 of it, and steps down after 2/3 without renewing).",
            least=2,
        ),
    )
    log_level: str = field(default="info", metadata=option("debug, info, warning."))
    log_format: str = field(default="text", metadata=option("text, or json: one object per line."))
    # the kubernetes executor (docs/kubernetes.md); None means its default
    namespace: str | None = field(
        default=None, metadata=option(KUBE + "namespace of the jobs' pods (default: own).")
    )
    kubeconfig: str | None = field(
        default=None, metadata=option(KUBE + "kubeconfig file (default: in-cluster).")
    )
    default_image: str | None = field(default=None, metadata=option(KUBE + "image of jobs that name none."))
    node_selector: str | None = field(default=None, metadata=option(KUBE + "label selector of Tide's nodes."))
    topology_key: str | None = field(  # R17
        default=None,
        metadata=option(
            KUBE + "node label whose value is the node's topology domain (a rack, an NVLink domain)."
        ),
    )
    checkpoint_claim: str | None = field(
        default=None, metadata=option(KUBE + "PVC mounted in every job pod.")
    )
    namespace_per_project: bool = field(
        default=False,
        metadata=option(
            KUBE + "each project's jobs in namespace tide-<project> (made, with Tide's RoleBinding, by the "
            "admin) instead of --namespace."
        ),
    )
    pod_cpu_per_gpu: str | None = field(  # None: scheduler.executors.kube.podspec.DEFAULT_CPU_PER_GPU
        default=None,
        metadata=option(
            KUBE + "CPU request per GPU of a job pod whose pod template sets none (default 4; e.g. 8, 1500m)."
        ),
    )
    pod_memory_per_gpu: str | None = field(  # None: scheduler.executors.kube.podspec.DEFAULT_MEMORY_PER_GPU
        default=None,
        metadata=option(
            KUBE + "memory request per GPU of a job pod whose pod template sets none (default 32Gi); "
            "/dev/shm defaults to half the pod's memory request."
        ),
    )
    gpu_reservation_image: str | None = field(  # None: scheduler.executors.kube.reservations.DEFAULT_IMAGE
        default=None,
        metadata=option(
            KUBE + "image of the pods that hold a shared GPU for fractional jobs (default busybox:1.36; any "
            "image with a POSIX sh, sleep, ls and tr)."
        ),
    )
    agent_url: str | None = field(  # None: job pods keep their size (no in-place resizes)
        default=None,
        metadata=option(
            KUBE + "URL job pods reach this service at (e.g. http://tide.tide.svc); torchrun jobs' pods then "
            "run Tide's agent and resize in place."
        ),
    )
