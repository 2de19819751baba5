"""``tide submit -f job.yaml``: submit a Kubeflow ``PyTorchJob`` manifest as it is (docs/cli.md).

Contract: HTTP only. The file (``-`` reads standard input) goes unchanged to
``POST /api/v1/projects/{project}/pytorchjobs``, where the server maps and checks it (REST users post
manifests too, so the rules live there: ``api.shared.pytorchjob``); its warnings are printed to stderr as
``Warning: PATH: why``, its refusals (a file that is not one YAML document: 400; a manifest Tide cannot run: 422) are the usual
``tide: MESSAGE`` with exit 2, as is an empty file. The project is ``-p``,
else the manifest's ``metadata.namespace``, else the default project (``TIDE_PROJECT``, ``tide config
project``); only without ``-p`` is the file parsed here (PyYAML, imported then), to read the namespace.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from api.client.cli import context, target
from api.client.cli.jobs import GpuFraction, Token, Url, check_fraction, report_submitted


def submit(
    *,
    filename: Annotated[
        Path, typer.Option("--filename", "-f", help="PyTorchJob manifest, YAML or JSON; - for stdin.")
    ],
    project: Annotated[
        str | None,
        typer.Option(
            "--project", "-p", help="Project (else the manifest's namespace, else the default one)."
        ),
    ] = None,
    gpu_fraction: GpuFraction = None,
    wait: Annotated[float, typer.Option("--wait", help="Wait up to this many seconds for it to run.")] = 0,
    url: Url = None,
    token: Token = None,
) -> None:
    """Submit a Kubeflow PyTorchJob manifest (kubeflow.org/v1, with elasticPolicy) as it is.

    Example: tide submit -f job.yaml -p team-a
    """
    share = None if gpu_fraction is None else check_fraction(gpu_fraction)
    manifest = _read(filename)
    chosen = project or _namespace(manifest) or context.default_project(None)
    with context.session(url, token) as client:
        job, warnings = client.submit_manifest(chosen, manifest, gpu_fraction=share)
    for warning in warnings:
        typer.echo(f"Warning: {warning}", err=True)
    report_submitted(job, wait, url, token)


def _read(filename: Path) -> bytes:
    where = "standard input" if str(filename) == "-" else str(filename)
    try:
        data = sys.stdin.buffer.read() if str(filename) == "-" else filename.read_bytes()
    except OSError as error:
        context.fail(f"cannot read {where}: {error.strerror or error}", target.EXIT_BAD_INPUT)
    if not data.strip():
        context.fail(f"{where} is empty: give a PyTorchJob manifest (YAML or JSON)", target.EXIT_BAD_INPUT)
    return data


def _namespace(manifest: bytes) -> str | None:
    """``metadata.namespace`` of the manifest, if it has one; the server judges everything else."""
    import yaml  # noqa: PLC0415 - only this command, and only without -p, parses YAML here

    try:
        document: Any = yaml.load(manifest, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, RecursionError):
        return None  # the server says what is wrong with it
    metadata = document.get("metadata") if isinstance(document, dict) else None
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    return namespace if isinstance(namespace, str) and namespace else None


def register(app: typer.Typer) -> None:
    app.command("submit")(submit)
