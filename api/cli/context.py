"""Where the CLI's server and token come from, how it prints, and how its errors end the command.

Contract: ``resolve()`` picks the server and token, first hit wins: flags (``--url``/``--token``), then
``TIDE_URL``/``TIDE_TOKEN``, then the config file (``tide login``), then the local ``tide serve`` found in
its data dir (``api.client.local_server``); a URL given as the API's root (``.../api/v1``, as ``tide serve``
prints it) means the server's root (``api.client.api_root``). ``session()`` yields a ``TideClient`` and
turns every failure into a message a person understands and an exit code scripts can rely on
(``EXIT_*``); no traceback escapes. Tests replace the client with ``use_client_factory`` (an
``ASGIBridge``-backed one). The config file is ``$XDG_CONFIG_HOME/tide/config.json`` (or
``~/.config/tide``), written 0600. rich is imported only by ``console()`` and ``table()``: a command that
prints JSON never loads it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import httpx
import typer

from api.client import TideAPIError, TideClient, api_root, local_server
from api.paths import default_data_dir

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

EXIT_OK = 0
EXIT_SERVER = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_FOUND = 3
EXIT_UNREACHABLE = 4
EXIT_AUTH = 5

ClientFactory = Callable[["Target"], TideClient]
_factory: dict[str, ClientFactory] = {}


@dataclass(frozen=True)
class Target:
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
    return Target(api_root(url), token or env_token or _str(config.get("token")), source)


def _str(value: object) -> str | None:
    return str(value) if value else None


def default_project(project: str | None) -> str:
    chosen = project or os.environ.get("TIDE_PROJECT") or _str(load_config().get("project"))
    if not chosen:
        fail("no project given: pass -p PROJECT or set a default with `tide config project NAME`", 2)
    return str(chosen)


def use_client_factory(factory: ClientFactory | None) -> None:
    """Tests: build clients with ``factory`` instead of over the network (None restores the default)."""
    _factory.pop("client", None)
    if factory is not None:
        _factory["client"] = factory


def console(err: bool = False) -> Console:
    from rich.console import Console  # noqa: PLC0415 - only commands that print through rich pay for it

    no_colour = bool(os.environ.get("NO_COLOR")) or not (sys.stderr if err else sys.stdout).isatty()
    return Console(stderr=err, no_color=no_colour, highlight=False, soft_wrap=True)


def table(*columns: str) -> Table:
    """A borderless rich table with these column headers (imported here: ``--json`` never draws one)."""
    from rich.table import Table  # noqa: PLC0415 - see above

    return Table(*columns, box=None)


def fail(message: str, code: int) -> NoReturn:
    typer.echo(f"tide: {message}", err=True)
    raise typer.Exit(code)


_STATUS_EXIT = {401: EXIT_AUTH, 403: EXIT_AUTH, 404: EXIT_NOT_FOUND, 409: EXIT_BAD_INPUT, 413: EXIT_BAD_INPUT}


@contextmanager
def session(url: str | None = None, token: str | None = None) -> Iterator[TideClient]:
    target = resolve(url, token)
    factory = _factory.get("client")
    client = factory(target) if factory else TideClient(target.url, target.token, timeout=30)
    try:
        yield client
    except TideAPIError as error:
        code = _STATUS_EXIT.get(error.status_code, EXIT_BAD_INPUT if error.status_code == 422 else 1)
        if error.status_code >= 500:
            code = EXIT_SERVER
        hint = ""
        if code == EXIT_AUTH:
            hint = " (check --token, TIDE_TOKEN or `tide login URL --token T`)"
        fail(f"{error.detail}{hint}", code)
    except httpx.TransportError as error:
        fail(
            f"cannot reach the Tide server at {target.url} (from {target.source}): {error}.\n"
            "Start one on this machine with `tide serve`, or point at one with --url, TIDE_URL or "
            "`tide login URL --token T`.",
            EXIT_UNREACHABLE,
        )
    except httpx.InvalidURL as error:
        fail(f"bad server URL {target.url!r} (from {target.source}): {error}", EXIT_BAD_INPUT)
    except ValueError as error:  # a 2xx body that is not what the API documents (a proxy, another app)
        fail(f"the answer from {target.url} is not Tide's API: {error}", EXIT_SERVER)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        client.close()


def dump_json(data: Any) -> None:
    """Print answers of ``api.client`` (or lists of them) as the JSON the server sent, for scripts."""
    payload = [item.raw for item in data] if isinstance(data, list) else data.raw
    typer.echo(json.dumps(payload, indent=2))
