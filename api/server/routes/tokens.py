"""``/projects/{project}/tokens``: project tokens, created by admins, stored only as SHA-256 hashes.

Contract: ``POST`` returns the secret once (``token``); reads never show it again. A project token may
submit and delete jobs of its project and read everything; it cannot manage projects or tokens.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Response, status
from sqlalchemy import select

from api.server import convert, schemas
from api.server.auth import hash_token, new_project_token, require_admin
from api.server.deps import Caller, Svc
from api.server.services.projects import get_project
from scheduler.store.models import TokenRow

router = APIRouter(prefix="/projects/{project}/tokens", tags=["tokens"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=schemas.TokenPublic)
def create_token(
    project: str, svc: Svc, caller: Caller, body: schemas.TokenCreate | None = None
) -> schemas.TokenPublic:
    require_admin(caller)
    secret = new_project_token()
    with svc.db.write() as session:
        owner = get_project(session, project)
        row = TokenRow(
            project_id=owner.id,
            name=(body or schemas.TokenCreate()).name,
            token_hash=hash_token(secret),
            created_at=svc.engine.clock(),
        )
        session.add(row)
        session.flush()
        return convert.token_public(row, project, secret)


@router.get("", response_model=list[schemas.TokenPublic])
def list_tokens(project: str, svc: Svc, caller: Caller) -> list[schemas.TokenPublic]:
    require_admin(caller)
    with svc.db.read() as session:
        owner = get_project(session, project)
        rows = session.scalars(select(TokenRow).where(TokenRow.project_id == owner.id).order_by(TokenRow.id))
        return [convert.token_public(r, project) for r in rows]


@router.delete("/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_token(
    project: str, token_id: Annotated[int, Path(ge=1, le=2**62)], svc: Svc, caller: Caller
) -> Response:
    require_admin(caller)
    with svc.db.write() as session:
        owner = get_project(session, project)
        row = session.get(TokenRow, token_id)
        if row is None or row.project_id != owner.id:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no token {token_id} in project {project!r}")
        session.delete(row)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
