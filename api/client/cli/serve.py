"""``tide serve``: its options and help, light; what it does is ``api.server.serve.run``, imported when it runs.

Contract: the options are ``api.shared.serve_options.ServeOptions``' fields (each with its ``TIDE_*``
environment equivalent, flag wins), made typer options here, so ``tide serve --help`` and every other
command start without the server's imports (FastAPI, SQLAlchemy, uvicorn, the executors: about a second);
``serve`` hands them, as one ``ServeOptions``, to ``api.server.serve.run``. What the command does is
documented there.
"""

from __future__ import annotations

import inspect
from dataclasses import Field
from typing import Annotated, Any, get_type_hints

import typer

from api.shared.serve_options import ServeOptions, env_of, flag_of, serve_options


def serve(**options: Any) -> None:
    """Run the Tide service in the foreground.

    Example: tide serve --nodes 2 --gpus-per-node 4 --grace-period 10

    On Kubernetes: tide serve --executor kubernetes --namespace tide-jobs --default-image IMAGE
    """
    from api.server.serve import run  # noqa: PLC0415 - the server's imports, paid only by the command that serves

    run(ServeOptions(**options))


def _parameter(item: Field[Any], kind: Any) -> inspect.Parameter:
    """One option as typer reads it: a keyword with its type, default, flag, variable, bound and help."""
    declared = typer.Option(
        flag_of(item), envvar=env_of(item), min=item.metadata["least"], help=item.metadata["help"]
    )
    return inspect.Parameter(
        item.name, inspect.Parameter.KEYWORD_ONLY, default=item.default, annotation=Annotated[kind, declared]
    )


def register(app: typer.Typer) -> None:
    kinds = get_type_hints(ServeOptions)
    serve.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [_parameter(item, kinds[item.name]) for item in serve_options()], return_annotation=None
    )
    app.command("serve")(serve)
