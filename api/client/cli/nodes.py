"""Node commands: ``tide node list|cordon|uncordon|drain|fail`` (admin for all but ``list``).

Contract: HTTP only (``api.client.cli.context.session``); ``list`` takes ``--json``; each change prints the node's
state as the server answered it; exit codes as every command (docs/cli.md: 3 for an unknown node, 5 for
a project token).
"""

from __future__ import annotations

from typing import Annotated

import typer

from api.client.cli import context
from api.client.cli.context import Column, FitTable
from api.client.cli.jobs import Json, Output, Token, Url
from api.client.client_types import NodePublic

node_app = typer.Typer(
    help="Nodes: list, cordon, uncordon, drain, fail (fault injection).", no_args_is_help=True
)
Name = Annotated[str, typer.Argument(help="Node name (see tide node list).")]


def node_table(nodes: list[NodePublic], wide: bool = False) -> FitTable:
    """Nodes with their state and replicas (``tide node list``, ``tide cluster``); a narrow terminal leaves
    out SCHED, then DOMAIN, and wraps the replicas."""
    domains = any(n.domain for n in nodes)  # R17: a DOMAIN column once the cluster names domains
    table = context.table(
        "NODE",
        *((Column("DOMAIN", drop=1),) if domains else ()),
        "GPUS",
        "ALLOC",
        "STATE",
        Column("SCHED", drop=2),
        Column("REPLICAS", wraps=True),
        wide=wide,
    )
    for node in nodes:
        slots = " ".join(
            f"{s.project}/{s.job}#{s.index}" + ("(releasing)" if s.releasing else "") for s in node.slots
        )
        sched = "yes" if node.schedulable else "no"
        where = (node.domain or "-",) if domains else ()
        table.add_row(node.name, *where, str(node.gpus), str(node.allocated_gpus), node.state, sched, slots)
    return table


def _change(name: str, action: str, url: str | None, token: str | None, grace: float | None = None) -> None:
    with context.session(url, token) as client:
        node = client.set_node(name, action, grace)
    live = len(node.slots)
    tail = f"; {live} replica(s) still on it" if live else ""
    typer.echo(f"Node {node.name} is {node.state}{tail}.")


@node_app.command("list")
def node_list(as_json: Json = False, output: Output = None, url: Url = None, token: Token = None) -> None:
    """List nodes: GPUs, allocation, state (ready, cordoned, draining, drained, lost), replicas.

    Example: tide node list
    """
    wide = context.wide(output)
    with context.session(url, token) as client:
        nodes = client.nodes()
    if as_json:
        context.dump_json(nodes)
    else:
        context.console().print(
            node_table(nodes, wide) if nodes else "No nodes yet (the scheduler records them)."
        )


@node_app.command("cordon")
def node_cordon(name: Name, url: Url = None, token: Token = None) -> None:
    """Place no new replicas on a node; the running ones stay (maintenance). Admin only.

    Example: tide node cordon node-1
    """
    _change(name, "cordon", url, token)


@node_app.command("uncordon")
def node_uncordon(name: Name, url: Url = None, token: Token = None) -> None:
    """Make a cordoned, drained or lost node schedulable again. Admin only.

    Example: tide node uncordon node-1
    """
    _change(name, "uncordon", url, token)


@node_app.command("drain")
def node_drain(
    name: Name,
    grace: Annotated[
        float | None,
        typer.Option(
            "--grace", min=0, max=86_400, help="Seconds replicas get to stop (else each job's own)."
        ),
    ] = None,
    url: Url = None,
    token: Token = None,
) -> None:
    """Take a node away: stop its replicas with a grace period; unschedulable until uncordoned. Admin only.

    Elastic jobs that keep min_replicas go on elsewhere; other jobs restart from their checkpoint on other
    nodes. Example: tide node drain node-1 --grace 30
    """
    _change(name, "drain", url, token, grace)


@node_app.command("fail")
def node_fail(name: Name, url: Url = None, token: Token = None) -> None:
    """Fault injection: the node vanishes now, its replicas killed without grace. Admin only.

    It stays out of service until uncordoned. Example: tide node fail node-1
    """
    _change(name, "fail", url, token)


def register(app: typer.Typer) -> None:
    app.add_typer(node_app, name="node")
