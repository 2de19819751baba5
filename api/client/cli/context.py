"""How the CLI's commands print, and how their errors end the command.

Contract: ``session()`` yields a ``TideClient`` for the server ``api.client.cli.target.resolve`` picks and turns
every failure into a message a person understands, in the CLI's words (``api.client.cli.flag_words``), and
an exit code scripts can rely on (``api.client.cli.target.EXIT_*``); no traceback escapes. Tests replace the client with
``use_client_factory`` (an ``ASGIBridge``-backed one). rich is imported only by ``console()`` and
``table()``: a command that prints JSON never loads it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import httpx
import typer

from api.client.cli import flag_words
from api.client.cli.flag_words import Typed
from api.client.cli.target import (
    EXIT_AUTH,
    EXIT_BAD_INPUT,
    EXIT_NOT_FOUND,
    EXIT_SERVER,
    EXIT_UNREACHABLE,
    Target,
    load_config,
    resolve,
    text,
    unreachable,
)
from api.client.rest import TideAPIError, TideClient

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

ClientFactory = Callable[["Target"], TideClient]
_factory: dict[str, ClientFactory] = {}


def default_project(project: str | None) -> str:
    chosen = project or os.environ.get("TIDE_PROJECT") or text(load_config().get("project"))
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


_STATUS_EXIT = {
    400: EXIT_BAD_INPUT,
    401: EXIT_AUTH,
    403: EXIT_AUTH,
    404: EXIT_NOT_FOUND,
    409: EXIT_BAD_INPUT,
    413: EXIT_BAD_INPUT,
}


@contextmanager
def session(
    url: str | None = None, token: str | None = None, flags: Mapping[str, Typed] | None = None
) -> Iterator[TideClient]:
    """A client for the chosen server; its errors end the command (``flags``: where the body's fields came
    from, so that a 422 names the flags the person typed: ``api.client.cli.flag_words``)."""
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
        fail(f"{flag_words.say(error, flags or {})}{hint}", code)
    except httpx.TransportError as error:
        fail(unreachable(target, error), EXIT_UNREACHABLE)
    except httpx.InvalidURL as error:
        fail(f"bad server URL {target.url!r} (from {target.source}): {error}", EXIT_BAD_INPUT)
    except ValueError as error:  # a 2xx body that is not what the API documents (a proxy, another app)
        fail(f"the answer from {target.url} is not Tide's API: {error}", EXIT_SERVER)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        client.close()


def dump_json(data: Any) -> None:
    """Print answers of ``api.client.rest`` (or lists of them) as the JSON the server sent, for scripts."""
    payload = [item.raw for item in data] if isinstance(data, list) else data.raw
    typer.echo(json.dumps(payload, indent=2))
