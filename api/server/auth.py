"""Bearer-token authentication: one admin token, and project tokens stored only as hashes.

Contract: ``admin_token(settings)`` returns the admin token from the settings (``TIDE_ADMIN_TOKEN``), else
from ``DATA/admin-token``, else generates one, stores it there (mode 0600) and reports that it was created,
so ``tide serve`` can print it once. ``bearer`` reads the ``Authorization: Bearer`` header (401 when
absent or malformed); the admin token is checked without touching the database, a project token by its
hash (``project_principal``, 401 when unknown). Admins may do anything; a project token reads everything
but other projects' logs and tokens, and changes jobs of its own project only (``require_project_writer``),
else 403.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from fastapi import HTTPException, status
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.server.settings import Settings
from api.shared.paths import ADMIN_TOKEN_FILE
from scheduler.store.models import ProjectRow, TokenRow

PROJECT_TOKEN_PREFIX = "tide_p_"


@dataclass(frozen=True, slots=True)
class Principal:
    is_admin: bool
    project: str | None = None
    token: str | None = None  # a project token's name and ID, for what it did: "'ci' (ID 3)"


def may_write(principal: Principal, project: str) -> bool:
    """Whether ``principal`` may change ``project``'s jobs: the admin token, or a token of that project."""
    return principal.is_admin or principal.project == project


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_project_token() -> str:
    return PROJECT_TOKEN_PREFIX + secrets.token_urlsafe(32)


def admin_token(settings: Settings) -> tuple[str, bool]:
    """The admin token, and whether it was generated just now."""
    if settings.admin_token:
        return settings.admin_token, False
    path: Path = settings.data_dir / ADMIN_TOKEN_FILE
    if path.is_file():
        token = path.read_text().strip()
        if token:
            return token, False
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    token = "tide_a_" + secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token, True


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, message, headers={"WWW-Authenticate": "Bearer"})


def bearer(header: str | None) -> str:
    """The token of an ``Authorization: Bearer TOKEN`` header, or 401."""
    if not header:
        raise _unauthorized("missing credentials: send 'Authorization: Bearer TOKEN'")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise _unauthorized("malformed Authorization header: expected 'Bearer TOKEN'")
    return token


def is_admin(token: str, admin: str) -> bool:
    return hmac.compare_digest(token.encode(), admin.encode())


def project_principal(token: str, session: Session) -> Principal:
    """The project a token belongs to (looked up by hash), or 401."""
    row = session.scalars(select(TokenRow).where(TokenRow.token_hash == hash_token(token))).first()
    if row is None:
        raise _unauthorized("invalid token: check TIDE_TOKEN, or ask an admin for a project token")
    project = session.get(ProjectRow, row.project_id)
    return Principal(
        is_admin=False, project=project.name if project else None, token=f"{row.name!r} (ID {row.id})"
    )


def require_admin(principal: Principal) -> None:
    if not principal.is_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this needs the admin token")


def require_project_writer(principal: Principal, project: str) -> None:
    if not may_write(principal, project):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"this token belongs to project {principal.project!r}, not {project!r}"
        )
