"""Job pods as the routes check them: a job's pod template against its project's rules, an admin's pod
defaults, and what to warn a submitter of.

Contract: ``check_defaults(value)`` refuses (422, each field by its path, ``pod_defaults.template.spec...``)
a ``pod_defaults`` document that ``scheduler.executors.kube.podtemplate.defaults_problems`` finds wrong.
``check_job(project, template, path, executor=...)`` refuses a job's template that is malformed, sets
Tide's own fields, or goes beyond what the project's (else its department's) ``allow`` lets a job set, and
one that does not hold together once merged over the defaults (a mount of a volume nobody defines, a
request above its limit, a pod Kubernetes' Pod model refuses: ``pod_problems``); it returns what to warn the submitter of: a template on an executor that runs
processes (local) or nothing (memory), which cannot honour it (kept, not applied), and node constraints,
which the kubelet checks on the node Tide chose rather than choosing it.
"""

from __future__ import annotations

from typing import Any

from fastapi.exceptions import RequestValidationError
from kubernetes import client
from pydantic import ValidationError

from scheduler.executors.base import LaunchSpec
from scheduler.executors.kube import podspec, podtemplate
from scheduler.store.models import ProjectRow

NOT_PODS = (
    "{path}: this Tide runs jobs with the {executor} executor, not as Kubernetes pods: the pod template is "
    "kept but not applied (no volumes, env from Secrets, resources, /dev/shm size, security contexts...); "
    "it applies on a Tide that runs --executor kubernetes"
)
NODE_CONSTRAINTS = (
    "{path}: Tide chooses each replica's node itself (spec.nodeName); the kubelet checks nodeSelector and "
    "node affinity on that node and refuses a pod that does not match, and the job then fails: keep them to "
    "labels every node of Tide's pool has, or restrict the pool (tide serve --node-selector)"
)


def refuse(problems: list[podtemplate.Problem]) -> None:
    if problems:
        raise RequestValidationError(
            [{"loc": ("body", p.path), "msg": p.message, "type": "pod_template"} for p in problems]
        )


def check_defaults(value: dict[str, Any] | None) -> None:
    if value is not None:
        refuse(podtemplate.defaults_problems(value))
        refuse(pod_problems(value.get("template") or {}, "pod_defaults.template"))


def pod_problems(template: dict[str, Any], path: str) -> list[podtemplate.Problem]:
    """What Kubernetes' Pod model refuses in a pod made from ``template`` (a misspelt affinity, a number
    where a string belongs): found now rather than when its pod is made."""
    trial = LaunchSpec(1, "p", "j", 0, "node", (0,), ("true",), image="image", pod_template=template)
    try:
        client.V1Pod.model_validate(podspec.pod_body(trial, podspec.PodOptions(namespace="ns")))
    except ValidationError as error:
        return podtemplate.model_problems(error.errors(), path)
    return []


def defaults_of(project: ProjectRow) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The department's pod defaults and the project's own."""
    department = project.department.pod_defaults if project.department is not None else None
    return department, project.pod_defaults


def check_job(project: ProjectRow, template: dict[str, Any] | None, path: str, *, executor: str) -> list[str]:
    """Refuse a job's template that may not run (see the contract); what to warn its submitter of."""
    if template is None:
        return []
    department, own = defaults_of(project)
    refuse(podtemplate.problems(template, path, allow=podtemplate.allow_of(department, own)))
    merged = podtemplate.effective(department, own, template)
    refuse(podtemplate.merged_problems(merged, path))
    refuse(pod_problems(merged, path))
    if executor != "kubernetes":
        return [NOT_PODS.format(path=path, executor=executor)]
    if podtemplate.wants_node_constraints(template):
        return [NODE_CONSTRAINTS.format(path=path)]
    return []
