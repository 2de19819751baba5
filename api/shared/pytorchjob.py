"""Kubeflow ``PyTorchJob`` manifests (``kubeflow.org/v1``) as Tide jobs, so their users come as they are.

Contract (pure: the standard library only; ``api.shared.manifest`` reads the YAML):

- ``translate(manifest, project)`` maps it to the body of ``POST /api/v1/projects/{project}/jobs``
  (``api.server.schemas.JobCreate``'s fields) and lists what it ignores as warnings; ``ManifestRefused`` lists
  every field it cannot honour, each with its path as Kubernetes writes it
  (``spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].resources.limits[nvidia.com/gpu]``) and
  what to change (the API answers 422). ``Translation.origin`` says which manifest field each body field
  came from, so the API's own checks of the body (a name that is not DNS-1123, a ``TIDE_*`` variable...)
  name the manifest's field too.

The mapping, and what is refused or ignored, is documented in docs/cli.md ("PyTorchJob manifests"). In
short: ``metadata.name`` is the job's name; the namespace, when given, must be the project; Master (0 or 1)
plus Worker replicas are the job's replicas, replica 0 Tide's master; ``elasticPolicy.minReplicas`` and
``maxReplicas`` bound them as they bound torchrun's ``--nnodes`` under Kubeflow; the container's
``command`` + ``args``, ``image``, ``env`` and ``nvidia.com/gpu`` limit must be the same in Master and
Worker (Tide runs every replica alike). The rest of a replica's pod template that Kubernetes pods can
honour (resources such as CPU, memory and RDMA, ``env`` from Secrets and ConfigMaps, ``envFrom``, volumes
and mounts, tolerations, node selector and affinity, service account, pull secrets, priority class,
security contexts, the template's labels and annotations) becomes the job's ``pod_template``, the same in
Master and Worker; an emptyDir of medium Memory mounted at ``/dev/shm`` becomes its ``shm_size``. The
server checks that template as it checks a REST one (``api.server.services.pods``: Tide's own fields, what
the project's admin allows), naming the manifest's fields. What Tide cannot honour (sidecars, init
containers, a working directory, spread constraints) is refused; what only Tide decides in its own way
(rendezvous, restarts, autoscaling) is ignored with a warning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from api.shared.manifest import FieldReader, ManifestRefused, show

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
GPU = "nvidia.com/gpu"
ROLES = ("Master", "Worker")
MAX_WARNINGS = 20

# What Tide decides itself: a manifest's value is ignored, with a warning that says so.
RENDEZVOUS = "ignored: Tide runs the rendezvous itself (c10d, hosted by replica 0) and sets it for torchrun"
IGNORED_ELASTIC = {
    "rdzvHost": RENDEZVOUS,
    "rdzvPort": RENDEZVOUS,
    "rdzvId": RENDEZVOUS,
    "rdzvConf": RENDEZVOUS,
    "standalone": RENDEZVOUS,
    "maxRestarts": "ignored: Tide sets torchrun's restarts and counts a job's failures itself",
    "metrics": "ignored: Tide grows an elastic job into idle GPUs and shrinks it on reclaim, no autoscaler",
}
QUIET_CONTAINER = {"name", "imagePullPolicy", "ports"}  # ports: Tide picks the rendezvous port
# Would change where or how the replicas run, so Tide refuses rather than run the job differently.
REFUSED_POD = {
    "initContainers": "Tide runs one container per replica: do the setup in its command",
    "topologySpreadConstraints": "Tide places replicas itself (it packs them onto the fullest node)",
}
REFUSED_CONTAINER = {
    "workingDir": "Tide starts the command in the image's working directory: use absolute paths or cd in it",
}
# The replica's pod template fields that become the job's pod_template (checked by the server).
TEMPLATE_POD = (
    "volumes", "tolerations", "nodeSelector", "affinity", "serviceAccountName", "automountServiceAccountToken",
    "imagePullSecrets", "priorityClassName", "securityContext", "runtimeClassName", "hostNetwork", "hostPID",
    "hostIPC",
)  # fmt: skip
TEMPLATE_CONTAINER = ("envFrom", "volumeMounts", "securityContext")
SHM = "/dev/shm"


@dataclass
class Translation:
    body: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    origin: dict[str, str] = field(default_factory=dict)  # body field -> the manifest's path


@dataclass
class _Replica:
    """What one role's pod template asks for: the fields Tide takes, each with its path."""

    path: str
    count: int | None = None
    image: str | None = None
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    gpus: int | None = None
    paths: dict[str, str] = field(default_factory=dict)
    template: dict[str, Any] = field(default_factory=dict)  # the pod template's other fields
    container: dict[str, Any] = field(default_factory=dict)  # the container's, for the pod template


def translate(manifest: Any, project: str) -> Translation:
    """The Tide job of ``manifest`` for ``project``; ``ManifestRefused`` lists what cannot be honoured."""
    read = FieldReader()
    top = read.mapping(manifest, "body")
    if top and (top.get("apiVersion"), top.get("kind")) != (API_VERSION, KIND):
        _wrong_kind(read, top)
    if read.problems:
        raise ManifestRefused(read.problems)
    result = Translation()
    _metadata(read, result, top.get("metadata"), project)
    read.leftovers(top, "", {"apiVersion", "kind", "metadata", "spec"}, {"status"})
    spec = read.mapping(top.get("spec"), "spec")
    read.leftovers(spec, "spec", {"pytorchReplicaSpecs", "elasticPolicy", "runPolicy", "nprocPerNode"})
    roles = _roles(read, spec)
    _run_policy(read, spec.get("runPolicy"))
    if roles:
        _job(read, result, roles, spec)
    if read.problems:
        raise ManifestRefused(read.problems)
    result.warnings = _capped(read.warnings)
    return result


def _wrong_kind(read: FieldReader, top: dict[str, Any]) -> None:
    kind, version = top.get("kind"), top.get("apiVersion")
    if kind != KIND:
        read.refuse("kind", f"{show(kind)}: Tide takes {KIND} manifests ({API_VERSION}) here")
    elif version != API_VERSION:
        read.refuse("apiVersion", f"{show(version)}: Tide reads {KIND} of {API_VERSION}")


def _metadata(read: FieldReader, result: Translation, value: Any, project: str) -> None:
    metadata = read.mapping(value, "metadata")
    if "name" not in metadata and "generateName" in metadata:
        read.refuse("metadata.name", "required: Tide needs a name (generateName is not supported)")
        return
    name = read.label(metadata.get("name"), "metadata.name")
    if name is not None:
        result.body["name"], result.origin["name"] = name, "metadata.name"
    namespace = metadata.get("namespace")
    if namespace is not None and namespace != project:
        read.refuse(
            "metadata.namespace",
            f"the manifest is for namespace {show(namespace)} but was sent to project {project!r}: "
            f"remove metadata.namespace, or submit it to project {namespace} "
            "(tide submit -f without -p takes the project from the namespace)",
        )


def _roles(read: FieldReader, spec: dict[str, Any]) -> dict[str, _Replica]:
    path = "spec.pytorchReplicaSpecs"
    specs = read.mapping(spec.get("pytorchReplicaSpecs"), path) if spec else {}
    roles: dict[str, _Replica] = {}
    for role, value in specs.items():
        if role not in ROLES:
            read.refuse(f"{path}[{role}]", f"unsupported replica type: use {' and '.join(ROLES)}")
            continue
        roles[role] = _replica(read, value, f"{path}[{role}]", role)
    if specs and "Worker" not in specs and "elasticPolicy" in spec:
        read.refuse(f"{path}[Worker]", "required when elasticPolicy is set (the replicas it scales)")
    if specs and not roles and not read.problems:
        read.refuse(path, "give a Master and/or a Worker replica spec")
    return roles


def _replica(read: FieldReader, value: Any, path: str, role: str) -> _Replica:
    found = read.mapping(value, path)
    replica = _Replica(path)
    replica.count = read.count(found.get("replicas", 1), f"{path}.replicas", least=1)
    if role == "Master" and replica.count is not None and replica.count != 1:
        read.refuse(f"{path}.replicas", f"must be 1, not {replica.count}: a job has one master")
    policy = found.get("restartPolicy")
    if policy not in (None, "OnFailure"):
        read.warn(f"{path}.restartPolicy", "ignored: Tide restarts a failed job from its checkpoint itself")
    read.leftovers(found, path, {"replicas", "template", "restartPolicy"})
    template = read.mapping(found.get("template"), f"{path}.template")
    pod = read.mapping(template.get("spec"), f"{path}.template.spec") if template else {}
    read.leftovers(template, f"{path}.template", {"spec"}, {"metadata"})
    for key, why in REFUSED_POD.items():
        if pod.get(key):
            read.refuse(f"{path}.template.spec.{key}", why)
    read.leftovers(pod, f"{path}.template.spec", {"containers", *REFUSED_POD, *TEMPLATE_POD})
    if pod:
        _container(read, replica, pod.get("containers"), f"{path}.template.spec.containers")
    found_metadata = template.get("metadata")
    metadata: dict[str, Any] = found_metadata if isinstance(found_metadata, dict) else {}
    kept = {key: metadata[key] for key in ("labels", "annotations") if metadata.get(key)}
    spec = {key: pod[key] for key in TEMPLATE_POD if key in pod}
    if replica.container:
        spec["containers"] = [replica.container]
    replica.template = _with_shm(({"metadata": kept} if kept else {}) | ({"spec": spec} if spec else {}))
    return replica


def _with_shm(template: dict[str, Any]) -> dict[str, Any]:
    """An emptyDir of medium Memory mounted at /dev/shm (how Kubeflow users size it) as ``shm_size``."""
    spec = template.get("spec") or {}
    container = (spec.get("containers") or [{}])[0]
    mounts = container.get("volumeMounts")
    if not isinstance(mounts, list) or not isinstance(spec.get("volumes"), list):
        return template
    mount = next(
        (m for m in mounts if isinstance(m, dict) and str(m.get("mountPath", "")).rstrip("/") == SHM), None
    )
    volume = next((v for v in spec["volumes"] if isinstance(v, dict) and mount and v.get("name") == mount.get("name")), None)  # fmt: skip
    empty = volume.get("emptyDir") if volume else None
    if mount is None or volume is None or not isinstance(empty, dict) or empty.get("medium") != "Memory":
        return template
    container["volumeMounts"] = [m for m in mounts if m is not mount]
    spec["volumes"] = [v for v in spec["volumes"] if v is not volume]
    for key, holder in (("volumeMounts", container), ("volumes", spec)):
        if not holder[key]:
            del holder[key]
    return template | {"shm_size": str(empty["sizeLimit"])} if "sizeLimit" in empty else template


def _container(read: FieldReader, replica: _Replica, value: Any, path: str) -> None:
    if not isinstance(value, list) or not value:
        read.refuse(path, "required: one container")
        return
    for index in range(1, len(value)):
        read.refuse(f"{path}[{index}]", "a second container (a sidecar): Tide runs one container per replica")
    here = f"{path}[0]"
    container = read.mapping(value[0], here)
    if not container:
        return
    replica.image = read.string(container.get("image"), f"{here}.image") if "image" in container else None
    command = read.strings(container.get("command"), f"{here}.command")
    if not command and "command" not in container:
        read.refuse(
            f"{here}.command",
            "required: Tide starts each replica with this command and does not read the image's "
            "entrypoint; e.g. [torchrun, train.py]",
        )
    replica.command = command + read.strings(container.get("args"), f"{here}.args")
    replica.env, from_sources = _env(read, container.get("env"), f"{here}.env")
    replica.gpus, resources = _gpus(read, container.get("resources"), f"{here}.resources")
    for key, why in REFUSED_CONTAINER.items():
        if container.get(key):
            read.refuse(f"{here}.{key}", why)
    replica.container = {key: container[key] for key in TEMPLATE_CONTAINER if container.get(key)}
    replica.container |= {"env": from_sources} if from_sources else {}
    replica.container |= {"resources": resources} if resources else {}
    known = {"image", "command", "args", "env", "resources", *REFUSED_CONTAINER, *TEMPLATE_CONTAINER}
    read.leftovers(container, here, known, QUIET_CONTAINER)
    replica.paths = {
        "template": f"{replica.path}.template",
        "image": f"{here}.image",
        "command": f"{here}.command",
        "env": f"{here}.env",
        "gpus_per_replica": f"{here}.resources.limits[{GPU}]",
    }


def _env(read: FieldReader, value: Any, path: str) -> tuple[dict[str, str], list[Any]]:
    """Plain values (the job's env), and the entries with ``valueFrom`` (its pod template's)."""
    if value is None:
        return {}, []
    if not isinstance(value, list):
        read.refuse(path, f"must be a list of {{name, value}}, not {show(value)}")
        return {}, []
    env: dict[str, str] = {}
    sourced: list[Any] = []
    for index, item in enumerate(value):
        here = f"{path}[{index}]"
        entry = read.mapping(item, here)
        if "valueFrom" in entry:
            sourced.append(entry)
            continue
        name = read.string(entry.get("name"), f"{here}.name")
        text = entry.get("value", "")
        if not isinstance(text, str):
            read.refuse(f"{here}.value", f"must be a string (quote it), not {show(text)}")
        elif name is not None:
            env[name] = text
    return env, sourced


def _gpus(read: FieldReader, value: Any, path: str) -> tuple[int | None, dict[str, Any]]:
    """The GPUs per replica, and the other resources (the pod template's)."""
    resources = read.mapping(value, path, required=False)
    amounts: dict[str, int | None] = {}
    others: dict[str, Any] = {}
    for kind in ("limits", "requests"):
        found = read.mapping(resources.get(kind), f"{path}.{kind}", required=False)
        for name in found:
            if name == GPU:
                amounts[kind] = read.count(found[name], f"{path}.{kind}[{GPU}]", least=1)
            elif "gpu" in str(name).lower():
                read.refuse(f"{path}.{kind}[{name}]", f"Tide schedules {GPU} only")
            else:
                others.setdefault(kind, {})[name] = found[name]
    limit, request = amounts.get("limits"), amounts.get("requests")
    if "limits" in amounts and "requests" in amounts and limit != request:
        read.refuse(f"{path}.requests[{GPU}]", f"must equal the limit ({limit}), as Kubernetes requires")
    return (limit if "limits" in amounts else request), others


def _run_policy(read: FieldReader, value: Any) -> None:
    policy = read.mapping(value, "spec.runPolicy", required=False)
    if policy.get("suspend") is True:
        read.refuse("spec.runPolicy.suspend", "Tide has no suspended jobs: submit the job when it should run")
    for key in policy:
        if key != "suspend":
            read.warn(f"spec.runPolicy.{key}", "ignored: Tide does not apply run policies")


def _job(read: FieldReader, result: Translation, roles: dict[str, _Replica], spec: dict[str, Any]) -> None:
    first = roles.get("Master") or roles["Worker"]
    _same_everywhere(read, roles)
    gpus = first.gpus
    if gpus is None:
        read.warn(first.paths.get("gpus_per_replica", first.path), "absent: each replica gets 1 GPU")
        gpus = 1
    body = {"command": first.command, "env": first.env, "gpus_per_replica": gpus}
    body |= {"image": first.image} if first.image is not None else {}
    body |= {"pod_template": first.template} if first.template else {}
    result.body |= body
    result.origin |= {key: first.paths.get(key, first.path) for key in body}
    result.origin["pod_template"] = f"{first.path}.template"
    _sizes(read, result, spec, roles, gpus)


def _same_everywhere(read: FieldReader, roles: dict[str, _Replica]) -> None:
    master, worker = roles.get("Master"), roles.get("Worker")
    if master is None or worker is None or not worker.paths:
        return
    checks: list[tuple[str, Callable[[_Replica], object], str]] = [
        ("image", lambda r: r.image, "image differs"),
        ("command", lambda r: r.command, "command and args differ"),
        ("env", lambda r: r.env, "env differs"),
        ("gpus_per_replica", lambda r: r.gpus or 1, f"{GPU} limit"),
        ("template", lambda r: r.template, "pod template (resources, volumes, env from Secrets...) differs"),
    ]
    for key, get, what in checks:
        if get(master) != get(worker):
            shown = (
                f"Master asks for {get(master)} GPU(s) and Worker for {get(worker)}"
                if key == "gpus_per_replica"
                else f"Master's {what} from Worker's"
            )
            read.refuse(worker.paths[key], f"{shown}; Tide runs every replica alike: make them the same")


def _sizes(
    read: FieldReader, result: Translation, spec: dict[str, Any], roles: dict[str, _Replica], gpus: int
) -> None:
    """Master + Worker replicas within elasticPolicy's bounds (each defaults to that total)."""
    counts = [replica.count for replica in roles.values()]
    if any(count is None for count in counts):
        return
    total = sum(count for count in counts if count is not None)
    path = "spec.elasticPolicy"
    elastic = read.mapping(spec.get("elasticPolicy"), path, required=False)
    low = read.count(elastic.get("minReplicas", total), f"{path}.minReplicas", least=1)
    high = read.count(elastic.get("maxReplicas", total), f"{path}.maxReplicas", least=1)
    _nproc(read, spec, elastic, gpus)
    backend = elastic.get("rdzvBackend", "c10d")
    if backend != "c10d":
        read.warn(f"{path}.rdzvBackend", RENDEZVOUS)
    for key, why in IGNORED_ELASTIC.items():
        if key in elastic:
            read.warn(f"{path}.{key}", why)
    read.leftovers(
        elastic, path, {"minReplicas", "maxReplicas", "nProcPerNode", "rdzvBackend", *IGNORED_ELASTIC}
    )
    if low is None or high is None:
        return
    if low > high:
        read.refuse(f"{path}.minReplicas", f"{low} is above maxReplicas ({high})")
    elif not low <= total <= high:
        where = roles["Worker"].path if "Worker" in roles else roles["Master"].path
        parts = " + ".join(f"{role} {replica.count}" for role, replica in roles.items())
        read.refuse(
            f"{where}.replicas",
            f"{parts} = {total} replicas, outside minReplicas..maxReplicas ({low}..{high}): "
            "start within the bounds",
        )
    result.body |= {"workers": total - 1, "min_replicas": low, "max_replicas": high}
    replicas = (roles.get("Worker") or roles["Master"]).path + ".replicas"
    result.origin |= {
        "workers": replicas,
        "min_replicas": f"{path}.minReplicas",
        "max_replicas": f"{path}.maxReplicas",
    }


def _nproc(read: FieldReader, spec: dict[str, Any], elastic: dict[str, Any], gpus: int) -> None:
    """Tide runs one worker process per GPU of a replica (torchrun's --nproc-per-node)."""
    given = [(p, v) for p, v in (("spec.nprocPerNode", spec.get("nprocPerNode")),
                                 ("spec.elasticPolicy.nProcPerNode", elastic.get("nProcPerNode"))) if v is not None]  # fmt: skip
    if len(given) == 2:
        read.refuse(given[1][0], "must not be used with spec.nprocPerNode (Kubeflow deprecated it): keep one")
    for path, value in given:
        if value in ("auto", "gpu") or str(value) == str(gpus):
            continue
        read.refuse(
            path,
            f"{show(value)}: Tide runs one worker process per GPU of a replica ({gpus}): "
            f"set it to {gpus}, gpu or auto, or leave it out",
        )


def _capped(warnings: list[str]) -> list[str]:
    if len(warnings) <= MAX_WARNINGS:
        return warnings
    return [*warnings[:MAX_WARNINGS], f"... and {len(warnings) - MAX_WARNINGS} more ignored fields"]
