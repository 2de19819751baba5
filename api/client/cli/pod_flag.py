"""``--pod-defaults FILE`` on ``tide project`` and ``tide department`` (an admin's defaults of job pods), and
``--pod-template FILE`` on ``tide submit-dist pytorch`` (a job's own pod template).

Contract: ``read(text)`` reads the flag's file (YAML or JSON; ``-``: standard input) as the document the API
takes as ``pod_defaults`` (``{template: ..., allow: ...}``, docs/kubernetes.md "Job pods"); ``none`` (an
update only) clears them (null). A file that cannot be read or is not one YAML mapping ends the command
with a message (exit 2); the service checks its fields and names each one it refuses (422, exit 2).
``read(text, flag="--pod-template")`` reads a job's pod template the same way.
``add(body, text)`` puts it in a request body when the flag was given.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from api.client.cli import context, target

Option = Annotated[
    str | None,
    typer.Option(
        "--pod-defaults",
        help="Pod defaults of its jobs' pods (Kubernetes): a YAML or JSON file {template: a pod template, "
        "allow: {host_path, privileged, service_accounts, priority_classes}}; - reads stdin; none clears "
        "them (update). docs/kubernetes.md, 'Job pods'.",
    ),
]
NONE = "none"


TemplateOption = Annotated[
    str | None,
    typer.Option(
        "--pod-template",
        help="The job's pod template (Kubernetes): a YAML or JSON file shaped like a Kubeflow replica's "
        "template (spec: containers[0] resources/env/volumeMounts, volumes, tolerations, ...) plus shm_size; "
        "- reads stdin. docs/kubernetes.md, 'Job pods'.",
    ),
]


def read(text: str, *, clear: bool = False, flag: str = "--pod-defaults") -> dict[str, Any] | None:
    if clear and text.strip().lower() == NONE:
        return None
    try:
        data = sys.stdin.read() if text == "-" else Path(text).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        context.fail(f"{flag}: cannot read {text}: {error}", target.EXIT_BAD_INPUT)
    try:
        document = yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as error:
        context.fail(f"{flag}: {text} is not valid YAML: {error}", target.EXIT_BAD_INPUT)
    if not isinstance(document, dict):
        context.fail(
            f"{flag}: {text} must hold a mapping, e.g. "
            + (
                "{template: {spec: ...}, allow: ...}"
                if flag == "--pod-defaults"
                else "{spec: {containers: [...]}}"
            ),
            target.EXIT_BAD_INPUT,
        )
    return document


def add(body: dict[str, Any], text: str | None, *, clear: bool = False) -> None:
    if text is not None:
        body["pod_defaults"] = read(text, clear=clear)
