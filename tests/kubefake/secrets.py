"""Secrets in the fake API server: what the real one does to a Secret on its way in, and reading one back.

Contract: ``stored_secret(body)`` turns a schema-valid Secret body into what is stored, as the real
server does: ``stringData`` merged into ``data`` (base64) and dropped, ``type`` defaulted to
``Opaque``; a ``data`` value that is not base64 is a 400, as the real server's decoder answers.
``replaced(old, body)`` is a PUT: 409 ``Conflict`` on a stale ``resourceVersion``, 422 when an
``immutable`` Secret's data or type changes; ``merge_patched(old, patch)`` applies a JSON merge patch
(RFC 7386; for a Secret's maps the strategic merge patch the ``kubernetes`` client sends is the same).
``secret_value(secret, key)`` decodes one key, or None when the Secret has no such key.
"""

from __future__ import annotations

import base64
import binascii
import copy
from typing import Any

from kubefake.store import ApiError, Obj


def _checked_data(data: Any) -> dict[str, str]:
    if not isinstance(data, dict):
        raise ApiError(400, "BadRequest", "Secret.data: expected a map of strings")
    for key, value in data.items():
        try:
            base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError) as error:
            raise ApiError(
                400, "BadRequest", f"Secret in version v1 cannot be handled: data[{key}]: {error}"
            ) from error
    return {str(k): str(v) for k, v in data.items()}


def stored_secret(body: Obj) -> Obj:
    """The Secret as the API server stores (and answers) it: ``stringData`` folded into ``data``."""
    secret = copy.deepcopy(body)
    data = _checked_data(secret.get("data") or {})
    for key, text in (secret.pop("stringData", None) or {}).items():
        data[key] = base64.b64encode(str(text).encode()).decode()
    secret["data"] = data
    secret.setdefault("type", "Opaque")
    return secret


def replaced(old: Obj, body: Obj) -> Obj:
    """A PUT: the new content under the old identity (uid, creationTimestamp stay the server's)."""
    new = stored_secret(body)
    name = old["metadata"]["name"]
    wanted = (body.get("metadata") or {}).get("resourceVersion")
    if wanted and wanted != old["metadata"]["resourceVersion"]:
        raise ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on secrets "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again",
        )
    if old.get("immutable") and (new["data"] != old.get("data") or new["type"] != old.get("type")):
        raise ApiError(422, "Invalid", f'Secret "{name}" is invalid: data: Forbidden: field is immutable')
    if new["type"] != old.get("type", "Opaque"):
        raise ApiError(422, "Invalid", f'Secret "{name}" is invalid: type: Invalid value: field is immutable')
    meta = new.setdefault("metadata", {})
    for kept in ("name", "namespace", "uid", "creationTimestamp"):
        if kept in old["metadata"]:
            meta[kept] = old["metadata"][kept]
    return new


def merge_patched(old: Obj, patch: Any) -> Obj:
    if not isinstance(patch, dict):
        raise ApiError(415, "UnsupportedMediaType", "the fake applies merge patches only, not JSON patches")
    merged: Obj = _merge(copy.deepcopy(old), patch)
    merged["metadata"].pop("resourceVersion", None)  # a patch carries no precondition unless it says so
    if (patch.get("metadata") or {}).get("resourceVersion"):
        merged["metadata"]["resourceVersion"] = patch["metadata"]["resourceVersion"]
    return merged


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def secret_value(secret: Obj, key: str) -> bytes | None:
    data = secret.get("data") or {}
    return base64.b64decode(data[key]) if key in data else None
