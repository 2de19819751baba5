"""How the CLI's commands print, and how their errors end the command.

Contract: ``session()`` yields a ``TideClient`` for the server ``api.client.cli.target.resolve`` picks and turns
every failure into a message a person understands, in the CLI's words (``api.client.cli.flag_words``), and
an exit code scripts can rely on (``api.client.cli.target.EXIT_*``); no traceback escapes. Tests replace the client with
``use_client_factory`` (an ``ASGIBridge``-backed one). rich is imported only by ``console()`` and
``table()``: a command that prints JSON never loads it.

Tables fit the terminal's width (``FitTable``): names and counts are never cut; the columns a command marks
as optional are left out, least useful first, until the rest fits, and free text (a reason, a list) wraps
inside its own column. ``wide`` (``-o wide``) shows every column, however wide the lines get.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import textwrap
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
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
    from rich.console import Console, ConsoleOptions
    from rich.text import Text

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


@dataclass(frozen=True)
class Column:
    """A table column. ``drop``: columns with a rank are left out when the terminal is too narrow, the highest
    rank first (0: always shown). ``wraps``: free text that wraps inside its column (a name or count never does).
    """

    header: str
    drop: int = 0
    wraps: bool = False


GAP = 2  # spaces between two columns
MIN_WRAPPED = 16  # the narrowest a wrapping column gets; narrower, its text goes under its row
UNDER = "    "  # the indent of text under its row


class FitTable:
    """Rows of text drawn as a borderless table as wide as the console it is printed on (or, ``wide``, as wide
    as its widest cells). Drawn by rich (``__rich_console__``) once every row is in; never a cut cell, no
    markup read in a cell, no trailing spaces."""

    def __init__(self, columns: Sequence[Column], wide: bool = False) -> None:
        self.columns = tuple(columns)
        self.wide = wide
        self.rows: list[tuple[str, ...]] = []

    def add_row(self, *cells: str) -> None:
        self.rows.append(cells)

    def natural(self, index: int) -> int:
        """The width column ``index`` needs to show every cell on one line."""
        return max([len(self.columns[index].header), *(len(row[index]) for row in self.rows)])

    def narrowest(self, index: int) -> int:
        """The narrowest column ``index`` gets: its own width, or for a wrapping one its longest word (at least
        ``MIN_WRAPPED``), so that no word is split."""
        if not self.columns[index].wraps:
            return self.natural(index)
        longest = max((len(word) for row in self.rows for word in row[index].split()), default=0)
        return min(self.natural(index), max(longest, MIN_WRAPPED))

    def _needs(self, shown: Sequence[int]) -> int:
        return sum(self.narrowest(i) for i in shown) + GAP * (len(shown) - 1)

    def _fitting(self, shown: list[int], width: int) -> list[int]:
        optional = sorted((i for i in shown if self.columns[i].drop), key=lambda i: -self.columns[i].drop)
        for index in optional:
            if self._needs(shown) <= width:
                break
            shown.remove(index)
        return shown

    def layout(self, width: int | None) -> tuple[list[int], list[int], int | None]:
        """The columns in each row, their widths, and the column whose text goes under its row (None: none).

        Optional columns are left out until the rest fits ``width`` (None: every column, at its own width),
        a wrapping column taking what is left; if even then it would split a word (or get less than
        ``MIN_WRAPPED``), its text goes under each row, and the other columns fit the width without it."""
        everything = list(range(len(self.columns)))
        if width is None:
            return everything, [self.natural(i) for i in everything], None
        shown = self._fitting(list(everything), width)
        under = None
        wrapping = [i for i in shown if self.columns[i].wraps]
        if self._needs(shown) > width and wrapping:
            under = wrapping[-1]
            shown = self._fitting([i for i in everything if i != under], width)
        return shown, self._narrowed(shown, width), under

    def _narrowed(self, shown: Sequence[int], width: int) -> list[int]:
        """The shown columns' widths: their own, the wrapping ones narrowed (to their narrowest) to fit."""
        widths = [self.natural(i) for i in shown]
        room = width - (sum(widths) + GAP * (len(shown) - 1))
        for at, index in enumerate(shown):
            if room < 0 and self.columns[index].wraps:
                narrower = max(widths[at] + room, self.narrowest(index))
                room += widths[at] - narrower
                widths[at] = narrower
        return widths

    def lines(self, width: int | None) -> list[str]:
        """The table as lines of text, ``width`` wide at most where its names and counts allow."""
        shown, widths, under = self.layout(width)
        out = [self._line([self.columns[i].header for i in shown], widths)]
        for row in self.rows:
            out += self._row(row, shown, widths)
            if under is not None:
                out += [
                    UNDER + part for part in _wrap(row[under], max((width or 0) - len(UNDER), MIN_WRAPPED))
                ]
        return out

    def _row(self, row: Sequence[str], shown: Sequence[int], widths: Sequence[int]) -> list[str]:
        """One row's lines: its wrapping cells over as many lines as they need."""
        cells = [
            _wrap(row[i], size) or [""] if self.columns[i].wraps else [row[i]]
            for i, size in zip(shown, widths, strict=True)
        ]
        depth = max(len(cell) for cell in cells)
        return [
            self._line([cell[at] if at < len(cell) else "" for cell in cells], widths) for at in range(depth)
        ]

    @staticmethod
    def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
        return (" " * GAP).join(cell.ljust(size) for cell, size in zip(cells, widths, strict=True)).rstrip()

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterable[Text]:
        from rich.text import Text  # noqa: PLC0415 - see table()

        yield Text("\n".join(self.lines(None if self.wide else options.max_width)), no_wrap=True)


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of ``width`` at most, broken between words only (a longer word stays whole)."""
    return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)


def table(*columns: str | Column, wide: bool = False) -> FitTable:
    """A borderless table with these columns (plain headers: always shown, never wrapped) that fits the
    terminal (``FitTable``); rich is imported when it is drawn (``--json`` never draws one)."""
    return FitTable([c if isinstance(c, Column) else Column(c) for c in columns], wide)


def wide(output: str | None) -> bool:
    """Whether ``-o/--output`` asks for every column (``wide``); any other value ends the command (exit 2)."""
    if output is not None and output != "wide":
        fail(
            f"-o/--output takes 'wide' (every column, however wide the lines), not {output!r}", EXIT_BAD_INPUT
        )
    return output == "wide"


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
    url: str | None = None,
    token: str | None = None,
    flags: Mapping[str, Typed] | None = None,
    ca: str | None = None,
) -> Iterator[TideClient]:
    """A client for the chosen server; its errors end the command (``flags``: where the body's fields came
    from, so that a 422 names the flags the person typed: ``api.client.cli.flag_words``)."""
    target = resolve(url, token)
    factory = _factory.get("client")
    client = factory(target) if factory else _client(target, ca)
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


def _client(target: Target, ca: str | None) -> TideClient:
    """A client of ``target``; an https server's certificate is checked against ``ca``, else ``TIDE_CA_BUNDLE``,
    else the CA bundle `tide login --ca` saved, else the system's."""
    ca = ca or os.environ.get("TIDE_CA_BUNDLE") or text(load_config().get("ca"))
    try:
        return TideClient(target.url, target.token, timeout=30, ca=ca)
    except (OSError, ssl.SSLError) as error:
        fail(f"cannot load the CA bundle {ca} (TIDE_CA_BUNDLE or `tide login --ca`): {error}", EXIT_BAD_INPUT)


def dump_json(data: Any) -> None:
    """Print answers of ``api.client.rest`` (or lists of them) as the JSON the server sent, for scripts."""
    payload = [item.raw for item in data] if isinstance(data, list) else data.raw
    typer.echo(json.dumps(payload, indent=2))
