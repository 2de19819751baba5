"""``POST /api/v1/projects/{project}/pytorchjobs``: a Kubeflow ``PyTorchJob`` manifest, submitted as a job.

Contract: the body is the manifest as YAML (``Content-Type: application/yaml``) or JSON, as ``kubectl``
would take it; ``api.shared.pytorchjob`` maps it to a job body, which is then checked and submitted exactly as
``POST /projects/{project}/jobs`` does it (``api.server.services.jobs.create_job``: same 201 answer, the job as
``JobPublic``; same 404, 403 and 409). Fields it ignores come back as ``Warning`` headers
(``299 tide "PATH: why"``), as the Kubernetes API server sends its warnings and ``kubectl`` prints them.
A body that is not UTF-8 YAML is a 400; every field Tide cannot honour is in one 422, each named by its
path in the manifest (``spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].image: ...``), and so
are the job checks of ``api.server.schemas.JobCreate`` (a name that is not DNS-1123 names ``metadata.name``)
and of its pod template (``api.server.services.pods``: ``spec.pytorchReplicaSpecs[Master].template.spec...``).

Why a path of its own rather than a second media type on ``/jobs``: that route's JSON body keeps FastAPI's
own parsing and errors unchanged, and a manifest is a different document with different field names, as
``/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs`` is on Kubernetes. docs/cli.md documents the mapping.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from api.server import schemas
from api.server.deps import Caller, Svc
from api.server.headers import header_warning
from api.server.services.jobs import create_job
from api.shared.manifest import ManifestRefused, ManifestUnreadable, read_manifest
from api.shared.pytorchjob import Translation, translate

router = APIRouter(tags=["jobs"])
MEDIA_TYPES = {
    "application/yaml": {
        "schema": {"type": "string", "description": "a PyTorchJob manifest (kubeflow.org/v1)"}
    },
    "application/json": {"schema": {"type": "object", "description": "the same manifest as JSON"}},
}
WARNING = {
    "description": 'One per field Tide ignored: 299 tide "PATH: why" (as Kubernetes sends warnings); one more '
    "if the job does not fit today's cluster (it waits for nodes)",
    "schema": {"type": "string"},
}


async def _manifest_bytes(request: Request) -> bytes:
    return await request.body()


@router.post(
    "/projects/{project}/pytorchjobs",
    status_code=status.HTTP_201_CREATED,
    response_model=schemas.JobPublic,
    responses={201: {"description": "The job, as submitted", "headers": {"Warning": WARNING}}},
    openapi_extra={"requestBody": {"required": True, "content": MEDIA_TYPES}},
)
def submit_pytorchjob(
    project: str,
    *,
    manifest: Annotated[bytes, Depends(_manifest_bytes)],
    response: Response,
    svc: Svc,
    caller: Caller,
    gpu_fraction: Annotated[
        float | None,
        Query(
            description="R20: each replica takes this share of one GPU (0.05 to 0.95) instead of its "
            "nvidia.com/gpu limit (which must then be 1 or absent); the job must not be elastic"
        ),
    ] = None,
) -> schemas.JobPublic:
    """Submit a Kubeflow PyTorchJob manifest (YAML or JSON) as a Tide job of this project."""
    try:
        translation = translate(read_manifest(manifest), project)
    except ManifestUnreadable as error:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(error)) from None
    except ManifestRefused as error:
        raise RequestValidationError([_error(p.path, p.message) for p in error.problems]) from None
    if gpu_fraction is not None:
        translation.body["gpu_fraction"] = gpu_fraction
        translation.origin["gpu_fraction"] = "gpu_fraction (query)"
    body = _job_body(translation)
    where = translation.origin.get("pod_template", "pod_template")
    public, beyond = create_job(svc, caller, project=project, body=body, template_path=where)
    for warning in [*translation.warnings, *beyond]:
        response.headers.append("Warning", header_warning(warning))
    return public


def _job_body(translation: Translation) -> schemas.JobCreate:
    """The job's own checks, their errors named by the manifest's fields."""
    try:
        return schemas.JobCreate.model_validate(translation.body)
    except ValidationError as error:
        errors = []
        for found in error.errors():
            loc = found.get("loc", ())
            where = translation.origin.get(str(loc[0]), "spec") if loc else "spec"
            errors.append(_error(where, str(found.get("msg", "invalid")).removeprefix("Value error, ")))
        raise RequestValidationError(errors) from None


def _error(path: str, message: str) -> dict[str, Any]:
    return {"loc": ("body", path), "msg": message, "type": "manifest"}
