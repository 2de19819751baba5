"""Usage errors in one style: typer's and click's refusals printed as ``tide: MESSAGE``, exit 2.

Contract: ``OneLineErrors`` is the root command group of ``tide`` (``api.client.cli.main.build``). A value
typer or click rejects (``--limit -1``, an unknown option, a missing argument) is printed to stderr as one
line, ``tide: MESSAGE (see `tide COMMAND --help`)``, as the commands print the values they check themselves
(``--status done``), instead of rich's boxed panel; the exit code stays click's (2 for usage). Help shown
for a bare group (``tide project``) is left as typer prints it. Everything else runs as in typer's own
standalone mode: ``typer.Exit`` codes, Ctrl-C as 130, ``Aborted!`` as exit 1.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup


class OneLineErrors(TyperGroup):
    """A typer group whose usage errors read like the rest of the CLI's errors."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        given = {"args": args, "prog_name": prog_name, "complete_var": complete_var} | extra
        given["windows_expand_args"] = windows_expand_args
        if not standalone_mode:
            return super().main(standalone_mode=False, **given)
        try:
            code = super().main(standalone_mode=False, **given)
        except Exception as error:
            if _is(error, "ClickException"):
                _usage_error(error)
            if _is(error, "Abort"):
                typer.echo("Aborted!", err=True)
                sys.exit(1)
            raise
        sys.exit(code if isinstance(code, int) else 0)


def _is(error: Exception, name: str) -> bool:
    """Whether ``error`` is click's ``name``, by name: typer 0.28 carries its own copy of click, earlier ones
    use click itself (typer matches ``NoArgsIsHelpError`` by name too)."""
    return any(kind.__name__ == name for kind in type(error).__mro__)


def _usage_error(error: Any) -> NoReturn:
    if type(error).__name__ == "NoArgsIsHelpError":  # typer has printed the help already
        sys.exit(error.exit_code)
    message = str(error.format_message()).rstrip(".")
    ctx = getattr(error, "ctx", None)
    path = getattr(ctx, "command_path", None)
    hint = f" (see `{path} --help`)" if path else ""
    typer.echo(f"tide: {message}{hint}", err=True)
    sys.exit(error.exit_code)
