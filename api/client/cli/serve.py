"""``tide serve``: its options and help, light; what it does is ``api.server.serve.run``, imported when it runs.

Contract: the options (each with its ``TIDE_*`` environment equivalent, flag wins) and the help text live
here, so ``tide serve --help`` and every other command start without the server's imports (FastAPI,
SQLAlchemy, uvicorn, the executors: about a second); ``serve`` hands its options unchanged, as keywords, to
``api.server.serve.run``, whose signature is the same. What the command does is documented there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def serve(
    *,
    host: Annotated[str, typer.Option(envvar="TIDE_HOST", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="TIDE_PORT", help="Port to listen on.")] = 8000,
    database_url: Annotated[
        str | None,
        typer.Option(envvar="TIDE_DATABASE_URL", help="postgresql://... (default: SQLite in the data dir)."),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(envvar="TIDE_DATA_DIR", help="State, logs, admin token (default ~/.local/share/tide)."),
    ] = None,
    executor: Annotated[
        str,
        typer.Option(
            envvar="TIDE_EXECUTOR",
            help="local (processes here), kubernetes (pods), or memory (nothing runs: trials and "
            "benchmarks; loopback only).",
        ),
    ] = "local",
    nodes: Annotated[int | None, typer.Option(envvar="TIDE_NODES", min=1, help="Virtual nodes.")] = None,
    gpus_per_node: Annotated[
        int | None, typer.Option(envvar="TIDE_GPUS_PER_NODE", min=1, help="Virtual GPUs per node.")
    ] = None,
    nodes_per_domain: Annotated[
        int | None,
        typer.Option(
            envvar="TIDE_NODES_PER_DOMAIN",
            min=1,
            help="Virtual nodes per topology domain (domain-0: node-0..node-N-1, ...); default: no domains.",
        ),
    ] = None,
    cycle_period: Annotated[
        float, typer.Option(envvar="TIDE_CYCLE_PERIOD", min=0.01, help="Seconds between scheduling cycles.")
    ] = 1.0,
    grace_period: Annotated[
        float, typer.Option(envvar="TIDE_GRACE_PERIOD", min=0, help="Seconds from SIGTERM to SIGKILL.")
    ] = 30.0,
    settle_time: Annotated[
        float,
        typer.Option(envvar="TIDE_SETTLE_TIME", min=0, help="Seconds a resized job is left alone (R7)."),
    ] = 10.0,
    eta_every: Annotated[
        float,
        typer.Option(
            envvar="TIDE_ETA_EVERY",
            min=0,
            help="Seconds between start-time forecasts of waiting jobs (0: none).",
        ),
    ] = 30.0,
    usage_half_life: Annotated[
        float,
        typer.Option(
            envvar="TIDE_USAGE_HALF_LIFE",
            min=0,
            help="Seconds: fair share over time. GPU-hours a project used above its quota, decayed by this "
            "half-life, lower its share of idle GPUs (0: off).",
        ),
    ] = 0.0,
    log_level: Annotated[str, typer.Option(envvar="TIDE_LOG_LEVEL", help="debug, info, warning.")] = "info",
    log_format: Annotated[
        str, typer.Option(envvar="TIDE_LOG_FORMAT", help="text, or json: one object per line.")
    ] = "text",
    namespace: Annotated[
        str | None,
        typer.Option(envvar="TIDE_NAMESPACE", help="kubernetes: namespace of the jobs' pods (default: own)."),
    ] = None,
    kubeconfig: Annotated[
        str | None,
        typer.Option(envvar="TIDE_KUBECONFIG", help="kubernetes: kubeconfig file (default: in-cluster)."),
    ] = None,
    default_image: Annotated[
        str | None,
        typer.Option(envvar="TIDE_DEFAULT_IMAGE", help="kubernetes: image of jobs that name none."),
    ] = None,
    node_selector: Annotated[
        str | None,
        typer.Option(envvar="TIDE_NODE_SELECTOR", help="kubernetes: label selector of Tide's nodes."),
    ] = None,
    topology_key: Annotated[
        str | None,
        typer.Option(
            envvar="TIDE_TOPOLOGY_KEY",
            help="kubernetes: node label whose value is the node's topology domain (a rack, an NVLink domain).",
        ),
    ] = None,
    checkpoint_claim: Annotated[
        str | None,
        typer.Option(envvar="TIDE_CHECKPOINT_CLAIM", help="kubernetes: PVC mounted in every job pod."),
    ] = None,
    agent_url: Annotated[
        str | None,
        typer.Option(
            envvar="TIDE_AGENT_URL",
            help="kubernetes: URL job pods reach this service at (e.g. http://tide.tide.svc); torchrun jobs' "
            "pods then run Tide's agent and resize in place.",
        ),
    ] = None,
) -> None:
    """Run the Tide service in the foreground.

    Example: tide serve --nodes 2 --gpus-per-node 4 --grace-period 10

    On Kubernetes: tide serve --executor kubernetes --namespace tide-jobs --default-image IMAGE
    """
    options = dict(locals())  # a copy: exactly the options above
    from api.server.serve import run  # noqa: PLC0415 - the server's imports, paid only by the command that serves

    run(**options)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
