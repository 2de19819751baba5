"""Where a Tide service on this machine keeps its state, for the service and for the CLI that finds it.

Contract: standard library only (the CLI imports it on every command). ``default_data_dir()`` is
``$TIDE_DATA_DIR``, else ``$XDG_DATA_HOME/tide``, else ``~/.local/share/tide``: one place per user. In it
``tide serve`` writes ``SERVER_FILE`` (``{"url": ...}``) and keeps the admin token in ``ADMIN_TOKEN_FILE``
(mode 0600), which is how ``tide`` on the same machine reaches its server with no flags: ``local_server()``
reads both. ``api_root(url)`` is the server's root, whether given as that or as the API's root
(``.../api/v1``, as ``tide serve`` prints it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ADMIN_TOKEN_FILE = "admin-token"
SERVER_FILE = "server.json"
API_PREFIX = "/api/v1"


def default_data_dir() -> Path:
    if os.environ.get("TIDE_DATA_DIR"):
        return Path(os.environ["TIDE_DATA_DIR"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "tide"


def api_root(url: str) -> str:
    """The server's root URL: ``http://h:8000/api/v1/`` (what ``tide serve`` prints) becomes ``http://h:8000``."""
    return url.strip().rstrip("/").removesuffix(API_PREFIX).rstrip("/")


def local_server(data_dir: Path | None = None) -> tuple[str, str | None]:
    """(url, admin token) of the local server, from ``DATA/server.json`` and ``DATA/admin-token``."""
    data_dir = data_dir or default_data_dir()
    url = "http://127.0.0.1:8000"
    with_server = data_dir / SERVER_FILE
    if with_server.is_file():
        url = str(json.loads(with_server.read_text()).get("url", url))
    token_file = data_dir / ADMIN_TOKEN_FILE
    token = token_file.read_text().strip() if token_file.is_file() else None
    return url, token
