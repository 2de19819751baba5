"""What ``tide serve`` does: run the service (API, scheduling loop, local or kubernetes executor) in the foreground.

The API answers in this process; the scheduling engine (leader election, executor, cycles) runs in a child
process of its own (``api.server.engine.host``) that dies with it; SIGTERM or SIGINT stops both.

Contract: every flag has a ``TIDE_*`` environment equivalent (flag wins). With ``--executor kubernetes`` it
reaches the cluster before serving (a bad kubeconfig or an unreachable API is exit 2 with the reason) and
the banner says where the jobs go; flags of one executor given to the other are refused. A database that does
not answer yet is retried for ``--database-wait`` seconds, a line per try, then exit 2. On start it prints where the API
and its docs are, the data directory, the database, and the admin token when it was just generated (later
starts say where it is stored). It writes ``DATA/server.json`` (the URL) so the CLI on this machine finds
the server and its token without flags. ``--log-format json`` writes one JSON object per log line
(``api.server.logs``). Listening beyond loopback (``--host 0.0.0.0``) is refused (exit 2, with the reason) while
the admin token or ``TIDE_METRICS_TOKEN`` is shorter than 32 characters (docs/security.md).
``--executor memory`` starts no processes (replicas are records: trials and benchmarks at cluster scale,
``bench/live_scale.py``) and listens on loopback only. ``--tls-cert``/``--tls-key`` (both or neither, a pair
that loads) serve HTTPS; the CLI then needs the certificate's CA (``--ca`` or ``TIDE_CA_BUNDLE``) unless a
CA it trusts signed it.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import os
import ssl
import time

import typer
import uvicorn
from sqlalchemy.exc import OperationalError

from api.server.app import create_app
from api.server.auth import admin_token
from api.server.logs import FORMATS, configure_logging
from api.server.parts import build_executor
from api.server.settings import Settings, default_data_dir
from api.shared.paths import ADMIN_TOKEN_FILE, SERVER_FILE
from api.shared.serve_options import ServeOptions
from scheduler.executors.base import Executor, ExecutorError
from scheduler.executors.kube.podtemplate import parse_quantity
from scheduler.executors.kube.retry import KubeApiError
from scheduler.executors.kubernetes import KubernetesExecutor
from scheduler.store.db import Database
from scheduler.store.migrate import SchemaTooNewError, check_not_newer

MIN_TOKEN_BEYOND_LOOPBACK = 32
DATABASE_RETRY_S = 2.0  # between tries to reach a database that does not answer yet


def _banner(settings: Settings, token: str, created: bool) -> str:
    url = f"{'https' if settings.tls_cert is not None else 'http'}://{settings.host}:{settings.port}"
    lines = [
        f"Tide API:      {url}/api/v1",
        f"API docs:      {url}/docs",
        f"Dashboard:     {url}/",
        f"Data dir:      {settings.data_dir}",
        f"Database:      {'PostgreSQL' if settings.database_url else settings.resolved_database_url()}",
    ]
    if settings.admin_token:
        lines.append("Admin token:   from TIDE_ADMIN_TOKEN")
    elif created:
        lines.append(
            f"Admin token:   {token}  (generated now; stored in {settings.data_dir / ADMIN_TOKEN_FILE})"
        )
    else:
        lines.append(f"Admin token:   stored in {settings.data_dir / ADMIN_TOKEN_FILE}")
    return "\n".join(lines)


def _resizes(settings: Settings) -> str:
    if settings.agent_url:
        return f"Resizes:       in place; job pods run Tide's agent and reach this service at {settings.agent_url}"
    return (
        "Resizes:       WARNING: no --agent-url, so a torchrun job's pods keep the size they started at and "
        "cannot follow a resize; give --agent-url (the URL job pods reach this service at) so that they run "
        "Tide's agent and resize in place"
    )


def run(options: ServeOptions) -> None:
    """``tide serve`` with its options (``api.client.cli.serve`` reads them): check, print the banner, serve."""
    if options.log_format not in FORMATS:
        raise typer.BadParameter(
            f"{options.log_format!r}: use {' or '.join(FORMATS)}", param_hint="--log-format"
        )
    configure_logging(options.log_level, options.log_format)
    settings = Settings.of(
        options,
        data_dir=(options.data_dir or default_data_dir()).expanduser().resolve(),
        admin_token=os.environ.get("TIDE_ADMIN_TOKEN") or None,
        metrics_token=os.environ.get("TIDE_METRICS_TOKEN") or None,
        engine_process=True,
    )
    _check_executor(settings)
    token, created = admin_token(settings)
    _refuse_weak_tokens_beyond_loopback(settings, token)
    _refuse_newer_schema(settings)
    where = _connect_kubernetes(build_executor(settings)) if settings.executor == "kubernetes" else None
    typer.echo(_banner(settings, token, created) + (f"\nKubernetes:    {where}" if where else ""))
    if settings.executor == "kubernetes":
        typer.echo(_resizes(settings))
    scheme = "https" if settings.tls_cert is not None else "http"
    (settings.data_dir / SERVER_FILE).write_text(
        json.dumps({"url": f"{scheme}://{settings.host}:{settings.port}"})
    )
    app = create_app(settings)  # the engine in a process of its own (settings.engine_process)
    level = settings.log_level.lower()
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=level,
        log_config=None,  # logs: ours
        ssl_certfile=settings.tls_cert,
        ssl_keyfile=settings.tls_key,
    )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def _refuse_weak_tokens_beyond_loopback(settings: Settings, token: str) -> None:
    """Beyond loopback every token must be long enough that guessing it is hopeless (docs/security.md)."""
    if is_loopback(settings.host):
        return
    for name, value in (("the admin token", token), ("TIDE_METRICS_TOKEN", settings.metrics_token)):
        if value is not None and len(value) < MIN_TOKEN_BEYOND_LOOPBACK:
            typer.echo(
                f"tide: refusing to listen on {settings.host}, beyond this machine: {name} has only "
                f"{len(value)} characters and needs at least {MIN_TOKEN_BEYOND_LOOPBACK} there "
                "(e.g. openssl rand -hex 32), or listen on 127.0.0.1",
                err=True,
            )
            raise typer.Exit(2)


def _check_executor(settings: Settings) -> None:
    if settings.executor not in ("local", "kubernetes", "memory"):
        raise typer.BadParameter(
            f"unknown executor {settings.executor!r}; available: local, kubernetes, memory",
            param_hint="--executor",
        )
    if settings.executor == "memory" and not is_loopback(settings.host):
        raise typer.BadParameter(
            f"the memory executor runs nothing (its replicas are records, for trials and benchmarks), so it "
            f"serves this machine only: listen on 127.0.0.1, not {settings.host}",
            param_hint="--executor",
        )
    if settings.executor == "kubernetes" and (
        settings.nodes is not None
        or settings.gpus_per_node is not None
        or settings.nodes_per_domain is not None
    ):
        raise typer.BadParameter(
            "--nodes/--gpus-per-node/--nodes-per-domain describe the local executor's virtual nodes; "
            "with kubernetes the nodes and their GPUs come from the cluster, their domains from "
            "--topology-key (unset TIDE_NODES/TIDE_GPUS_PER_NODE/TIDE_NODES_PER_DOMAIN)",
            param_hint="--executor",
        )
    kube_only = {
        "--namespace": settings.namespace,
        "--kubeconfig": settings.kubeconfig,
        "--default-image": settings.default_image,
        "--node-selector": settings.node_selector,
        "--topology-key": settings.topology_key,
        "--checkpoint-claim": settings.checkpoint_claim,
        "--agent-url": settings.agent_url,
        "--namespace-per-project": settings.namespace_per_project or None,
        "--pod-cpu-per-gpu": settings.pod_cpu_per_gpu,
        "--pod-memory-per-gpu": settings.pod_memory_per_gpu,
        "--gpu-reservation-image": settings.gpu_reservation_image,
    }
    for flag, value in (("--pod-cpu-per-gpu", settings.pod_cpu_per_gpu),
                        ("--pod-memory-per-gpu", settings.pod_memory_per_gpu)):  # fmt: skip
        amount = parse_quantity(value) if value is not None else None
        if value is not None and (amount is None or amount <= 0):
            raise typer.BadParameter(
                f"{value!r} is not a Kubernetes quantity above 0 (e.g. 8, 1500m, 32Gi)", param_hint=flag
            )
    if settings.agent_url is not None and not settings.agent_url.startswith(("http://", "https://")):
        raise typer.BadParameter(
            f"{settings.agent_url!r} is not a URL: give the address job pods reach this service at, e.g. "
            "http://tide.tide.svc",
            param_hint="--agent-url",
        )
    _check_tls(settings)
    if settings.leader_election not in ("postgres", "lease"):
        raise typer.BadParameter(
            f"unknown election {settings.leader_election!r}; available: postgres, lease",
            param_hint="--leader-election",
        )
    if settings.leader_election == "lease":
        kube_only["--leader-election lease"] = "lease"
    given = [flag for flag, value in kube_only.items() if value is not None]
    if settings.executor != "kubernetes" and given:
        raise typer.BadParameter(
            f"{', '.join(given)} only apply to --executor kubernetes", param_hint="--executor"
        )


def _check_tls(settings: Settings) -> None:
    """--tls-cert and --tls-key come together, name readable files, and make a certificate that loads."""
    cert, key = settings.tls_cert, settings.tls_key
    if (cert is None) != (key is None):
        raise typer.BadParameter(
            "give both --tls-cert and --tls-key (the certificate and its private key), or neither",
            param_hint="--tls-cert" if cert is None else "--tls-key",
        )
    if cert is None or key is None:
        return
    for flag, path in (("--tls-cert", cert), ("--tls-key", key)):
        if not path.is_file():
            raise typer.BadParameter(f"{path} is not a file", param_hint=flag)
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as error:
        raise typer.BadParameter(
            f"cannot load the certificate {cert} with the key {key}: {error}", param_hint="--tls-cert"
        ) from error


def _connect_kubernetes(executor: Executor) -> str:
    """Reach the API before serving: a wrong kubeconfig or an unreachable cluster is exit 2, not a loop.

    The engine process connects again with an executor of its own; this one only checks, then closes.
    """
    assert isinstance(executor, KubernetesExecutor)
    try:
        nodes = executor.nodes()
    except (ExecutorError, KubeApiError) as error:
        typer.echo(f"tide: {error}", err=True)
        raise typer.Exit(2) from error
    finally:
        executor.close()
    gpus = sum(n.gpus for n in nodes)
    usable = sum(1 for n in nodes if n.schedulable)
    return (
        f"{executor.connection.where}; jobs in namespace "
        f"{'tide-<project> (one per project)' if executor.settings.namespace_per_project else executor.namespace}; "
        f"{len(nodes)} GPU nodes ({usable} schedulable), {gpus} GPUs"
    )


def _refuse_newer_schema(settings: Settings) -> None:
    """Reach the database, waiting up to ``--database-wait`` for it, and refuse a schema of a newer Tide."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = Database(settings.resolved_database_url())
    try:
        _wait_for_database(db, 0 if db.is_sqlite else settings.database_wait)  # a file: nothing to wait for
    except SchemaTooNewError as error:
        typer.echo(f"tide: {error}", err=True)
        raise typer.Exit(2) from error
    finally:
        db.dispose()


def _wait_for_database(db: Database, wait: float) -> None:
    """A database that does not answer yet (started at the same time as Tide) is retried, with a line per
    try, until ``wait`` seconds have passed: then exit 2 with the reason."""
    deadline = time.monotonic() + wait
    for attempt in itertools.count(1):
        try:
            check_not_newer(db)
            return
        except OperationalError as error:
            left = deadline - time.monotonic()
            if left <= 0:
                typer.echo(
                    f"tide: cannot reach the database (waited {wait:g} s, --database-wait): {error.orig}",
                    err=True,
                )
                raise typer.Exit(2) from error
            pause = min(DATABASE_RETRY_S, left)
            typer.echo(
                f"tide: the database does not answer yet (try {attempt}; again in {pause:.1f} s, giving up "
                f"after {wait:g} s): {error.orig}",
                err=True,
            )
            time.sleep(pause)
