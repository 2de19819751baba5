"""Where a Tide service on this machine keeps its state, for the service and for the CLI that finds it.

Contract: standard library only (the CLI imports it on every command). ``default_data_dir()`` is
``$TIDE_DATA_DIR``, else ``$XDG_DATA_HOME/tide``, else ``~/.local/share/tide``: one place per user. In it
``tide serve`` writes ``SERVER_FILE`` (``{"url": ...}``) and keeps the admin token in ``ADMIN_TOKEN_FILE``
(mode 0600), which is how ``tide`` on the same machine reaches its server with no flags.
"""

from __future__ import annotations

import os
from pathlib import Path

ADMIN_TOKEN_FILE = "admin-token"
SERVER_FILE = "server.json"


def default_data_dir() -> Path:
    if os.environ.get("TIDE_DATA_DIR"):
        return Path(os.environ["TIDE_DATA_DIR"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "tide"
