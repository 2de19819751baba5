"""Which Tide server the CLI talks to, with which token, and the config file ``tide login`` writes.

Contract: ``resolve()`` picks the server and token, first hit wins: flags (``--url``/``--token``), then
``TIDE_URL``/``TIDE_TOKEN``, then the config file (``tide login``), then the local ``tide serve`` found in
its data dir (``api.shared.paths.local_server``); a URL given as the API's root (``.../api/v1``, as ``tide serve``
prints it) means the server's root (``api.shared.paths.api_root``). ``unreachable()`` is the one message for a
server that cannot be reached, and ``EXIT_*`` the exit codes scripts rely on. The config file is
``$XDG_CONFIG_HOME/tide/config.json`` (or ``~/.config/tide``), written 0600.

Standard library only: the quick path (``api.client.cli.quick``) resolves its server with this before typer or
httpx is imported; an import-linter contract in pyproject.toml holds it to that.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from api.shared.paths import api_root, default_data_dir, local_server

EXIT_OK = 0
EXIT_SERVER = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_FOUND = 3
EXIT_UNREACHABLE = 4
EXIT_AUTH = 5


class Target(NamedTuple):  # not a dataclass: importing dataclasses costs the quick path ~10 ms
    url: str
    token: str | None
    source: str  # where the URL came from, for error messages


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "tide" / "config.json"


def load_config() -> dict[str, Any]:
    path = config_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_config(updates: dict[str, Any]) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = load_config() | updates
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2)
    os.chmod(path, 0o600)
    return path


def resolve(url: str | None, token: str | None) -> Target:
    config = load_config()
    env_url, env_token = os.environ.get("TIDE_URL"), os.environ.get("TIDE_TOKEN")
    if url:
        source = "--url"
    elif env_url:
        url, source = env_url, "TIDE_URL"
    elif config.get("url"):
        url, source = str(config["url"]), f"the config file {config_path()}"
    else:
        try:
            local_url, local_token = local_server()
        except (OSError, ValueError):  # another user's server, a half-written server.json
            local_url, local_token = "http://127.0.0.1:8000", None
        data = default_data_dir()
        source = f"the local server's data dir {data}"
        return Target(local_url, token or env_token or config.get("token") or local_token, source)
    # the server's root; what ``tide serve`` prints as "Tide API:" (``.../api/v1``) is accepted too
    return Target(api_root(url), token or env_token or text(config.get("token")), source)


def text(value: object) -> str | None:
    return str(value) if value else None


def unreachable(target: Target, error: Exception) -> str:
    """Why a command failed when ``target`` could not be reached (``error``), and what to do about it."""
    return (
        f"cannot reach the Tide server at {target.url} (from {target.source}): {error}.\n"
        "Start one on this machine with `tide serve`, or point at one with --url, TIDE_URL or "
        "`tide login URL --token T`."
    )
