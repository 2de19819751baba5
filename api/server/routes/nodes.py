"""``/nodes``: list nodes; cordon, uncordon and drain them; lose one on purpose (fault injection).

Contract: any token may read (``GET /nodes``, ``GET /nodes/{name}``); changing a node needs the admin token
(403 otherwise). ``cordon``: no new replicas, running ones stay. ``drain`` (body ``{"grace_seconds": S}``,
optional): cordon, then stop the replicas on it, each given ``S`` seconds (its job's grace period when
absent); elastic jobs that keep ``min_replicas`` go on elsewhere, other jobs restart from their checkpoint
on other nodes (``scheduler.engine.nodes``). ``uncordon``: schedulable again, whatever it was. ``fail``:
a fault-injection endpoint that makes a node vanish at once, as a reclaimed spot instance does: its replicas
are killed without grace and it stays out of service until uncordoned. Each answers the node as it is now;
the leader acts on it within a cycle. An unknown node is a 404 that lists the known ones.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.server import convert, schemas
from api.server.auth import Principal, require_admin
from api.server.deps import Caller, Services, Svc
from scheduler.engine.nodes import set_node_state
from scheduler.store.models import NodeRow
from scheduler.store.queries import node_slots

router = APIRouter(prefix="/nodes", tags=["nodes"])


def _public(session: Session, row: NodeRow) -> schemas.NodePublic:
    return convert.node_public(row, node_slots(session, row.name))


def _unknown(session: Session, name: str) -> HTTPException:
    known = ", ".join(session.scalars(select(NodeRow.name).order_by(NodeRow.name)).all()) or "none yet"
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no node {name!r}; known nodes: {known}")


def _set(
    svc: Services, caller: Principal, name: str, state: str, grace: float | None = None
) -> schemas.NodePublic:
    require_admin(caller)
    with svc.db.write() as session:
        row = set_node_state(session, name, state, now=svc.engine.clock(), grace=grace)
        if row is None:
            raise _unknown(session, name)
        session.flush()
        public = _public(session, row)
    svc.engine.trigger()
    return public


@router.get("", response_model=list[schemas.NodePublic])
def list_nodes(svc: Svc, caller: Caller) -> list[schemas.NodePublic]:
    with svc.db.read() as session:
        live = node_slots(session)
        rows = session.scalars(select(NodeRow).order_by(NodeRow.name)).all()
        return [convert.node_public(r, live) for r in rows]


@router.get("/{name}", response_model=schemas.NodePublic)
def read_node(name: str, svc: Svc, caller: Caller) -> schemas.NodePublic:
    with svc.db.read() as session:
        row = session.get(NodeRow, name)
        if row is None:
            raise _unknown(session, name)
        return _public(session, row)


@router.post("/{name}/cordon", response_model=schemas.NodePublic)
def cordon(name: str, svc: Svc, caller: Caller) -> schemas.NodePublic:
    return _set(svc, caller, name, "cordoned")


@router.post("/{name}/uncordon", response_model=schemas.NodePublic)
def uncordon(name: str, svc: Svc, caller: Caller) -> schemas.NodePublic:
    return _set(svc, caller, name, "ready")


@router.post("/{name}/drain", response_model=schemas.NodePublic)
def drain(name: str, svc: Svc, caller: Caller, body: schemas.NodeDrain | None = None) -> schemas.NodePublic:
    return _set(svc, caller, name, "drained", (body or schemas.NodeDrain()).grace_seconds)


@router.post("/{name}/fail", response_model=schemas.NodePublic)
def fail(name: str, svc: Svc, caller: Caller) -> schemas.NodePublic:
    """Fault injection: the node vanishes now (replicas killed without grace); uncordon brings it back."""
    return _set(svc, caller, name, "lost")
