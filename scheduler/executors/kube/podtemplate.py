"""A job's pod template, and an admin's pod defaults per department and project: checked, then merged.

Contract (pure: the standard library only). A template has the shape of a Kubeflow replica's
``template`` (a ``PodTemplateSpec``: ``metadata.labels``/``annotations`` and ``spec`` with at most one
container), plus ``shm_size``, the size of the pod's ``/dev/shm``. ``problems(template, path, allow=...)``
lists, each with its path (``spec.containers[0].command``) and what to do instead, every field that is
unknown, malformed, Tide's own (the image, the command, the GPU count, the agent's variables, the pod's
name, labels and node: ``TIDE_OWNED``), or, with an ``Allow`` (a job's template), beyond what the admin
allows a job (hostPath volumes, privileged containers, host namespaces, added capabilities, a service
account or priority class outside the admin's lists). ``allow=None`` checks an admin's defaults: only the
shape and Tide's own fields. ``defaults_problems`` checks a ``pod_defaults`` document
(``{"template": ..., "allow": ...}``).

``effective(department, project, job)`` merges the department's defaults' template, then the project's,
then the job's (later wins): mappings key by key (``nodeSelector``, ``securityContext``, ``resources``,
labels), lists by name (``env``, ``volumes``, ``imagePullSecrets``; ``volumeMounts`` by ``mountPath``),
other lists joined without duplicates (``tolerations``, ``envFrom``, capabilities), and ``affinity`` whole
(the most specific one); the one container is merged with the one container. ``allow_of(department, project)`` is the project's ``allow`` if it has one, else
the department's, else ``Allow()`` (nothing beyond the safe set). ``merged_problems`` checks what only the
merged template can show (a mount of a volume nobody defines, a request above its limit).

docs/kubernetes.md ("Job pods") lists what a job may set; ``scheduler.executors.kube.podspec`` applies an
effective template to a pod.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

Template = dict[str, Any]
GPU_RESOURCE = "nvidia.com/gpu"
SHM_MOUNT = "/dev/shm"
SHM_VOLUME = "tide-shm"
CHECKPOINT_VOLUME = "checkpoints"
CHECKPOINT_MOUNT = "/tide/checkpoints"
RESERVED_VOLUMES = (SHM_VOLUME, CHECKPOINT_VOLUME)
RESERVED_MOUNTS = (SHM_MOUNT, CHECKPOINT_MOUNT)
TIDE_ENV_PREFIXES = ("TIDE_", "PET_")
TIDE_LABEL_PREFIXES = ("tide.dev/", "app.kubernetes.io/managed-by")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # a volume's name
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][-+]?[0-9]+|[KMGTPE]i|[mkMGTPE]|)$")
SUFFIXES: dict[str, int | Decimal] = {
    "": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip

# Tide's own fields: the path's last part and what to do instead (a template may never set these).
TIDE_OWNED_POD = {
    "nodeName": "Tide binds each pod to the node it chose; restrict Tide's nodes with tide serve --node-selector",
    "restartPolicy": "Tide sets Never: a replica that exits is Tide's to restart",
    "terminationGracePeriodSeconds": "set the job's grace_period",
    "initContainers": "Tide runs one container per replica: do the setup in its command",
    "schedulerName": "Tide is the scheduler: it binds pods itself",
    "hostname": "Tide names each replica's pod",
    "subdomain": "Tide names each replica's pod and the job's Service",
    "enableServiceLinks": "Tide turns service links off (they would shadow the job's variables)",
}
TIDE_OWNED_CONTAINER = {
    "image": "set the job's image (image; tide submit-dist pytorch --image), not the template's",
    "command": "Tide runs the job's command: give it as the job's command",
    "args": "Tide runs the job's command: give the arguments as part of the job's command",
}
# What a template may set; a job's template needs the admin's ``Allow`` for what ``ADMIN_ONLY`` lists.
POD_FIELDS = {
    "containers", "volumes", "tolerations", "nodeSelector", "affinity", "serviceAccountName",
    "automountServiceAccountToken", "imagePullSecrets", "priorityClassName", "securityContext",
    "runtimeClassName", "hostNetwork", "hostPID", "hostIPC",
}  # fmt: skip
CONTAINER_FIELDS = {"name", "resources", "env", "envFrom", "volumeMounts", "securityContext"}  # name: ignored
VOLUME_SOURCES = {
    "persistentVolumeClaim", "secret", "configMap", "emptyDir", "projected", "downwardAPI", "ephemeral", "nfs",
    "csi", "hostPath",
}  # fmt: skip
JOB_POD_SECURITY = {
    "runAsUser", "runAsGroup", "runAsNonRoot", "fsGroup", "fsGroupChangePolicy", "supplementalGroups",
    "seccompProfile",
}  # fmt: skip
JOB_CONTAINER_SECURITY = {
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "readOnlyRootFilesystem",
    "seccompProfile",
}
ADMIN_ONLY = (
    "an admin's pod defaults may set it (tide project update PROJECT --pod-defaults FILE), "
    "or allow jobs to (allow.privileged)"
)


@dataclass(frozen=True, slots=True)
class Allow:
    """What an admin allows a job's template beyond the safe set (docs/kubernetes.md, "Job pods")."""

    host_path: bool = False
    privileged: bool = False  # privileged, allowPrivilegeEscalation, capabilities, host namespaces, sysctls
    service_accounts: tuple[str, ...] = ()
    priority_classes: tuple[str, ...] = ()

    @classmethod
    def of(cls, value: Mapping[str, Any] | None) -> Allow:
        value = value or {}
        return cls(
            host_path=bool(value.get("host_path", False)),
            privileged=bool(value.get("privileged", False)),
            service_accounts=tuple(value.get("service_accounts") or ()),
            priority_classes=tuple(value.get("priority_classes") or ()),
        )


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def parse_quantity(value: object) -> Decimal | None:
    """A Kubernetes quantity (``500m``, ``64Gi``, ``2``, ``1e3``) as a number, or None when it is not one."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    match = QUANTITY.match(str(value))
    if match is None:
        return None
    try:
        number, suffix = Decimal(match.group(1)), match.group(2)
        if suffix[:1] in ("e", "E"):
            return number * Decimal(10) ** int(suffix[1:])
        return number * Decimal(SUFFIXES[suffix])  # exact: never through a float
    except (ArithmeticError, ValueError):  # InvalidOperation, an exponent beyond Decimal's range
        return None


def format_memory(amount: Decimal) -> str:
    """Bytes as the shortest exact binary quantity (``32Gi``, ``1536Mi``), else whole bytes."""
    whole = int(amount)
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = SUFFIXES[suffix]
        assert isinstance(unit, int)
        if whole and whole % unit == 0:
            return f"{whole // unit}{suffix}"
    return str(whole)


def format_cpu(amount: Decimal) -> str:
    """CPUs as whole CPUs when whole, else millicores (``1500m``)."""
    if amount == amount.to_integral_value():
        return str(int(amount))
    return f"{int(amount * 1000)}m"


class _Checker:
    def __init__(self, allow: Allow | None, gpu_resource: str) -> None:
        self.allow, self.gpu_resource = allow, gpu_resource
        self.found: list[Problem] = []

    def refuse(self, path: str, message: str) -> None:
        self.found.append(Problem(path, message))

    def mapping(self, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.refuse(path, "must be a mapping")
            return {}
        return value

    def items(self, value: Any, path: str) -> list[tuple[str, dict[str, Any]]]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.refuse(path, "must be a list")
            return []
        out = []
        for index, item in enumerate(value):
            if isinstance(item, dict):
                out.append((f"{path}[{index}]", item))
            else:
                self.refuse(f"{path}[{index}]", "must be a mapping")
        return out

    def string(self, value: Any, path: str) -> str | None:
        if not isinstance(value, str) or not value:
            self.refuse(path, "required" if value is None else "must be a non-empty string")
            return None
        return value

    def strings_map(self, value: Any, path: str) -> dict[str, Any]:
        found = self.mapping(value, path)
        for key, item in found.items():
            if not isinstance(item, str):
                self.refuse(f"{path}[{key}]", "must be a string (quote it)")
        return found

    def unknown(self, found: Mapping[str, Any], path: str, known: set[str], owned: Mapping[str, str]) -> None:
        for key in found:
            if key in owned:
                self.refuse(f"{path}.{key}", f"Tide's own: {owned[key]}")
            elif key not in known:
                self.refuse(
                    f"{path}.{key}", f"not a field a pod template may set here ({', '.join(sorted(known))})"
                )

    def admin_only(self, path: str, what: str, allowed: bool) -> None:
        if self.allow is not None and not allowed:
            self.refuse(path, f"{what} is not allowed in a job's pod template: {ADMIN_ONLY}")

    # the template ---------------------------------------------------------------------------------
    def template(self, value: Any, path: str) -> None:
        found = self.mapping(value, path)
        self.unknown(found, path, {"metadata", "spec", "shm_size"}, {})
        if "shm_size" in found:
            amount = parse_quantity(found["shm_size"])
            if amount is None or amount < 0 or not isinstance(found["shm_size"], str):
                self.refuse(f"{path}.shm_size", 'must be a size such as "16Gi" ("0": no /dev/shm volume)')
        metadata = self.mapping(found.get("metadata"), f"{path}.metadata")
        self.unknown(metadata, f"{path}.metadata", {"labels", "annotations"}, {
            "name": "Tide names each replica's pod", "namespace": "Tide's pods go to its jobs namespace"})  # fmt: skip
        for key in ("labels", "annotations"):
            for name, text in self.strings_map(metadata.get(key), f"{path}.metadata.{key}").items():
                if str(name).startswith(TIDE_LABEL_PREFIXES):
                    self.refuse(f"{path}.metadata.{key}[{name}]", "Tide's own: Tide sets its labels itself")
                elif (
                    key == "labels"
                    and isinstance(text, str)
                    and not (len(text) <= 63 and LABEL_VALUE.match(text))
                ):
                    self.refuse(
                        f"{path}.metadata.labels[{name}]",
                        "a label value is at most 63 letters, digits, '-', '_' and '.', starting and ending "
                        "with a letter or digit",
                    )
        self.pod(self.mapping(found.get("spec"), f"{path}.spec"), f"{path}.spec")

    def pod(self, spec: dict[str, Any], path: str) -> None:
        self.unknown(spec, path, POD_FIELDS, TIDE_OWNED_POD)
        containers = spec.get("containers")
        if containers is not None:
            listed = self.items(containers, f"{path}.containers")
            for index in range(1, len(listed)):
                self.refuse(
                    f"{path}.containers[{index}]", "a second container (a sidecar): Tide runs one per replica"
                )
            if listed:
                self.container(*listed[0])
        self.volumes(spec.get("volumes"), f"{path}.volumes")
        for here, toleration in self.items(spec.get("tolerations"), f"{path}.tolerations"):
            self.unknown(toleration, here, {"key", "operator", "value", "effect", "tolerationSeconds"}, {})
            for key in ("key", "operator", "value", "effect"):
                if key in toleration and not isinstance(toleration[key], str):
                    self.refuse(f"{here}.{key}", "must be a string (quote it)")
        self.strings_map(spec.get("nodeSelector"), f"{path}.nodeSelector")
        self.mapping(spec.get("affinity"), f"{path}.affinity")
        for here, secret in self.items(spec.get("imagePullSecrets"), f"{path}.imagePullSecrets"):
            self.unknown(secret, here, {"name"}, {})
            self.string(secret.get("name"), f"{here}.name")
        account, priority = spec.get("serviceAccountName"), spec.get("priorityClassName")
        if account is not None and self.string(account, f"{path}.serviceAccountName") is not None:
            self.listed(f"{path}.serviceAccountName", "service account", account, "service_accounts")
        if priority is not None and self.string(priority, f"{path}.priorityClassName") is not None:
            self.listed(f"{path}.priorityClassName", "priority class", priority, "priority_classes")
        if "runtimeClassName" in spec:
            self.string(spec["runtimeClassName"], f"{path}.runtimeClassName")
        for key in ("automountServiceAccountToken", "hostNetwork", "hostPID", "hostIPC"):
            if key in spec and not isinstance(spec[key], bool):
                self.refuse(f"{path}.{key}", "must be true or false")
            elif key.startswith("host") and spec.get(key):
                self.admin_only(f"{path}.{key}", f"{key}: true", self._privileged)
        security = self.mapping(spec.get("securityContext"), f"{path}.securityContext")
        for key in security:
            if key not in JOB_POD_SECURITY:
                self.admin_only(f"{path}.securityContext.{key}", key, self._privileged)

    @property
    def _privileged(self) -> bool:
        return self.allow is not None and self.allow.privileged

    def listed(self, path: str, what: str, name: str, key: str) -> None:
        if self.allow is None:
            return
        names: tuple[str, ...] = getattr(self.allow, key)
        if name not in names:
            shown = ", ".join(names) if names else "none"
            self.refuse(
                path,
                f"{what} {name!r} is not one the admin allows jobs (allowed: {shown}): leave it out to get "
                f"the project's default, or ask an admin to add it to allow.{key} of the project's pod defaults",
            )

    def volumes(self, value: Any, path: str) -> None:
        for here, volume in self.items(value, path):
            name = self.string(volume.get("name"), f"{here}.name")
            if name in RESERVED_VOLUMES:
                self.refuse(f"{here}.name", f"{name!r} is Tide's own volume: pick another name")
            elif name is not None and (len(name) > 63 or not DNS_LABEL.match(name)):
                self.refuse(
                    f"{here}.name", f"{name!r} is not a valid volume name (a DNS-1123 label, e.g. 'data')"
                )
            sources = [key for key in volume if key != "name"]
            if len(sources) != 1:
                self.refuse(here, f"give exactly one volume source ({', '.join(sorted(VOLUME_SOURCES))})")
                continue
            source = sources[0]
            if source not in VOLUME_SOURCES:
                self.refuse(
                    f"{here}.{source}",
                    f"not a volume source Tide mounts ({', '.join(sorted(VOLUME_SOURCES))})",
                )
            elif source == "hostPath" and self.allow is not None and not self.allow.host_path:
                self.refuse(
                    f"{here}.hostPath",
                    "hostPath volumes are not allowed in a job's pod template: use a persistentVolumeClaim, or "
                    "ask an admin to allow them (allow.host_path of the project's pod defaults)",
                )
            else:
                self.mapping(volume[source], f"{here}.{source}")

    def container(self, path: str, container: dict[str, Any]) -> None:
        self.unknown(container, path, CONTAINER_FIELDS, TIDE_OWNED_CONTAINER)
        self.resources(self.mapping(container.get("resources"), f"{path}.resources"), f"{path}.resources")
        for here, entry in self.items(container.get("env"), f"{path}.env"):
            self.env(here, entry)
        for here, entry in self.items(container.get("envFrom"), f"{path}.envFrom"):
            self.unknown(entry, here, {"configMapRef", "secretRef", "prefix"}, {})
            if str(entry.get("prefix", "")).startswith(TIDE_ENV_PREFIXES):
                self.refuse(
                    f"{here}.prefix", "TIDE_* and PET_* variables are Tide's own: pick another prefix"
                )
        for here, mount in self.items(container.get("volumeMounts"), f"{path}.volumeMounts"):
            self.unknown(mount, here, {"name", "mountPath", "readOnly", "subPath", "subPathExpr",
                                       "mountPropagation", "recursiveReadOnly"}, {})  # fmt: skip
            self.string(mount.get("name"), f"{here}.name")
            where = self.string(mount.get("mountPath"), f"{here}.mountPath")
            if where is not None and where.rstrip("/") in RESERVED_MOUNTS:
                what = (
                    "set shm_size"
                    if where.rstrip("/") == SHM_MOUNT
                    else "Tide mounts its checkpoint claim there"
                )
                self.refuse(f"{here}.mountPath", f"{where} is Tide's own: {what}")
        security = self.mapping(container.get("securityContext"), f"{path}.securityContext")
        for key, item in security.items():
            if key == "allowPrivilegeEscalation" and item is False:
                continue
            if key not in JOB_CONTAINER_SECURITY:
                shown = f"{key}: {str(item).lower()}" if isinstance(item, bool) else key
                self.admin_only(f"{path}.securityContext.{key}", shown, self._privileged)

    def env(self, path: str, entry: dict[str, Any]) -> None:
        self.unknown(entry, path, {"name", "value", "valueFrom"}, {})
        name = self.string(entry.get("name"), f"{path}.name")
        if name is not None and name.startswith(TIDE_ENV_PREFIXES):
            self.refuse(f"{path}.name", f"{name}: TIDE_* and PET_* variables are Tide's own (its agent and "
                                        "torchrun read them): pick another name")  # fmt: skip
        elif name is not None and not ENV_NAME.match(name):
            self.refuse(f"{path}.name", f"{name!r} is not a valid variable name")
        if ("value" in entry) == ("valueFrom" in entry):
            self.refuse(path, "give either value or valueFrom")
        elif "value" in entry and not isinstance(entry["value"], str):
            self.refuse(f"{path}.value", "must be a string (quote it)")
        elif "valueFrom" in entry:
            source = self.mapping(entry["valueFrom"], f"{path}.valueFrom")
            known = {"secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef"}
            self.unknown(source, f"{path}.valueFrom", known, {})
            if len(source) != 1:
                self.refuse(f"{path}.valueFrom", f"give one of {', '.join(sorted(known))}")
            for key in ("secretKeyRef", "configMapKeyRef"):
                if key in source:
                    ref = self.mapping(source[key], f"{path}.valueFrom.{key}")
                    self.string(ref.get("name"), f"{path}.valueFrom.{key}.name")
                    self.string(ref.get("key"), f"{path}.valueFrom.{key}.key")

    def resources(self, resources: dict[str, Any], path: str) -> None:
        self.unknown(resources, path, {"requests", "limits"}, {})
        for kind in ("requests", "limits"):
            for name, amount in self.mapping(resources.get(kind), f"{path}.{kind}").items():
                here = f"{path}.{kind}[{name}]"
                if name == self.gpu_resource:
                    self.refuse(
                        here,
                        "Tide's own: set the job's GPUs per replica (gpus_per_replica; tide submit-dist pytorch --gpu)",
                    )
                elif parse_quantity(amount) is None or parse_quantity(amount) < 0:  # type: ignore[operator]
                    self.refuse(here, f'{amount!r} is not a quantity (e.g. "8", "500m", "64Gi")')


def problems(
    template: Any, path: str, *, allow: Allow | None, gpu_resource: str = GPU_RESOURCE
) -> list[Problem]:
    """Every problem of ``template`` (see the module's contract); ``allow`` None: an admin's defaults."""
    checker = _Checker(allow, gpu_resource)
    checker.template(template, path)
    return checker.found


def defaults_problems(value: Any, path: str = "pod_defaults") -> list[Problem]:
    """Every problem of a ``pod_defaults`` document: ``{"template": TEMPLATE, "allow": ALLOW}``."""
    checker = _Checker(None, GPU_RESOURCE)
    found = checker.mapping(value, path)
    checker.unknown(found, path, {"template", "allow"}, {})
    if "template" in found:
        checker.template(found["template"], f"{path}.template")
    allow = checker.mapping(found.get("allow"), f"{path}.allow")
    checker.unknown(
        allow, f"{path}.allow", {"host_path", "privileged", "service_accounts", "priority_classes"}, {}
    )
    for key in ("host_path", "privileged"):
        if key in allow and not isinstance(allow[key], bool):
            checker.refuse(f"{path}.allow.{key}", "must be true or false")
    for key in ("service_accounts", "priority_classes"):
        listed = allow.get(key)
        if listed is not None and (
            not isinstance(listed, list) or not all(isinstance(n, str) and n for n in listed)
        ):
            checker.refuse(f"{path}.allow.{key}", "must be a list of names")
    return checker.found


# merging ------------------------------------------------------------------------------------------
def _key(item: Any) -> Any:
    if isinstance(item, dict):
        if "mountPath" in item:
            return ("mountPath", item["mountPath"])
        if "name" in item:
            return ("name", item["name"])
    return ("value", repr(sorted(item.items())) if isinstance(item, dict) else repr(item))


def _merge_lists(low: Sequence[Any], high: Sequence[Any]) -> list[Any]:
    """Items of ``high`` replace those of ``low`` with the same name (or mountPath); others are joined."""
    merged: dict[Any, Any] = {}
    for item in [*low, *high]:
        merged[_key(item)] = item
    return list(merged.values())


def merge(low: Any, high: Any, *, whole: frozenset[str] = frozenset({"affinity"})) -> Any:
    """``high`` over ``low``: mappings key by key, lists by name, ``affinity`` whole, scalars replaced."""
    if isinstance(low, dict) and isinstance(high, dict):
        out = dict(low)
        for key, value in high.items():
            if key == "containers" and isinstance(value, list) and isinstance(low.get(key), list):
                out[key] = [merge(dict(*low[key][:1]), dict(*value[:1]), whole=whole)]  # the one container
            elif key in whole or key not in low:
                out[key] = value
            else:
                out[key] = merge(low[key], value, whole=whole)
        return out
    if isinstance(low, list) and isinstance(high, list):
        return _merge_lists(low, high)
    return high


def _template_of(defaults: Mapping[str, Any] | None) -> Template:
    return dict((defaults or {}).get("template") or {})


def effective(
    department: Mapping[str, Any] | None, project: Mapping[str, Any] | None, job: Mapping[str, Any] | None
) -> Template:
    """The department's defaults' template, then the project's, then the job's template (later wins)."""
    merged: Template = {}
    for layer in (_template_of(department), _template_of(project), dict(job or {})):
        merged = merge(merged, layer)
    return merged


def allow_of(department: Mapping[str, Any] | None, project: Mapping[str, Any] | None) -> Allow:
    """The project's ``allow`` when its defaults have one, else the department's, else nothing extra."""
    for defaults in (project, department):
        if defaults and defaults.get("allow") is not None:
            return Allow.of(defaults["allow"])
    return Allow()


def container_of(template: Mapping[str, Any]) -> dict[str, Any]:
    containers = (template.get("spec") or {}).get("containers") or [{}]
    return dict(containers[0])


def merged_problems(template: Mapping[str, Any], path: str) -> list[Problem]:
    """What only the merged template shows: mounts of volumes no level defines, requests above limits."""
    found: list[Problem] = []
    spec = template.get("spec") or {}
    volumes = {v.get("name") for v in spec.get("volumes") or []} | {CHECKPOINT_VOLUME}
    container = container_of(template)
    for index, mount in enumerate(container.get("volumeMounts") or []):
        if mount.get("name") not in volumes:
            found.append(Problem(
                f"{path}.spec.containers[0].volumeMounts[{index}].name",
                f"no volume {mount.get('name')!r} in the template or the project's pod defaults: add it to "
                "spec.volumes",
            ))  # fmt: skip
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    for name, limit in limits.items():
        request, most = parse_quantity(requests.get(name)), parse_quantity(limit)
        if request is not None and most is not None and request > most:
            found.append(Problem(
                f"{path}.spec.containers[0].resources.requests[{name}]",
                f"{requests[name]} is above its limit ({limit}) once the project's defaults are applied: "
                "lower the request or raise the limit",
            ))  # fmt: skip
    return found


def model_problems(errors: Sequence[Mapping[str, Any]], path: str) -> list[Problem]:
    """A Kubernetes model's refusals of a pod made from a template (``loc``/``msg`` pairs, as pydantic gives
    them), each named under ``path`` (``pod_template.spec.affinity.nodeAffinity.x``)."""
    found = []
    for error in errors:
        where = ""
        for part in error.get("loc", ()):
            where += f"[{part}]" if isinstance(part, int) else f".{part}"
        found.append(Problem(f"{path}{where}", f"{error.get('msg', 'invalid')} (Kubernetes' Pod schema)"))
    return found


def wants_node_constraints(template: Mapping[str, Any]) -> bool:
    """Whether the template asks for node constraints, which the kubelet checks on the node Tide chose."""
    spec = template.get("spec") or {}
    return bool(spec.get("nodeSelector") or (spec.get("affinity") or {}).get("nodeAffinity"))
