"""The process kubelet's container runtime: a pod's only container as an argv, an environment and a cwd.

Contract: ``container_launch(pod, world, options)`` reads the pod, the Services and Secrets of the fake
(``world``) and returns a ``Launch``, having created the pod's volume directories under ``work_dir``;
or raises ``ContainerConfigError`` with the waiting reason and message a real kubelet gives
(``CreateContainerConfigError``: ``secret "x" not found``, ``couldn't find key k in Secret ns/x``).

Kubernetes semantics kept: argv is ``command + args`` (the image has no ENTRYPOINT here, so it must not be
empty); the environment is the image's (``base_env``) under the container's ``env`` in order, each
``value`` expanded against the entries before it (``$(VAR)``, ``$$`` -> ``$``, an unknown ``$(X)`` kept);
``command``/``args`` are expanded against the whole container env; ``valueFrom`` (``fieldRef``,
``secretKeyRef``) values are not expanded; an ``optional`` reference to a missing Secret or key sets no
variable. ``HOSTNAME`` is the pod's name. The device plugin's variables (``World.devices``) come last and win
over the container's own, as a real kubelet appends a device plugin's environment after the pod's.

What a container on this machine cannot have is mapped (see ``Rewriter``): every pod is on 127.0.0.1
(``status.podIP``/``status.hostIP``), so a Service's host name is rewritten to ``127.0.0.1`` where it
appears in env values and argv (cluster DNS would resolve a headless Service to its pod's IP, and every
pod's IP is loopback here; ports are not mapped). A ``volumeMounts[].mountPath`` is a host directory:
``emptyDir`` and ``secret`` volumes per pod under ``work_dir/pods/``, a ``persistentVolumeClaim`` per
claim under ``work_dir/claims/NS/CLAIM`` (shared by its pods), ``hostPath`` its own path; env values,
argv items and ``workingDir`` naming a path under a mountPath are rewritten to the host directory. This
is a path rewrite, not a chroot: a path the program builds itself is not mapped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kubefake.secrets import secret_value
from kubefake.store import Obj

LOOPBACK = "127.0.0.1"
SecretOf = Callable[[str], Obj | None]  # a Secret of the pod's namespace by name, None if there is none
# Path characters: a mountPath preceded or followed by one of them is part of another path.
PATH_CHAR = r"[\w.~+@/-]"


class ContainerConfigError(Exception):
    """The container cannot be created yet: the pod waits with this reason and message."""

    def __init__(self, message: str, reason: str = "CreateContainerConfigError") -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class ProcessOptions:
    """The process mode's settings: ``base_env`` is the image's environment (PATH included: the argv's
    program is looked up in it), ``image_workdir`` the image's WORKDIR (default: the pod's directory)."""

    work_dir: Path
    base_env: Mapping[str, str] = field(default_factory=dict)
    image_workdir: Path | None = None


@dataclass(frozen=True)
class World:
    """What a pod's container sees of the fake: the Services and the Secrets of its namespace, and the
    environment the device plugin adds for the GPUs it gave the pod (``NVIDIA_VISIBLE_DEVICES``)."""

    services: list[Obj]
    secret_of: SecretOf
    devices: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    cwd: Path


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion (third_party/forked/golang/expansion), character for character."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
            continue
        after = text[i + 1]
        close = text.find(")", i + 2) if after == "(" else -1
        if after == "$":
            out.append("$")
        elif close >= 0:
            name = text[i + 2 : close]
            out.append(env.get(name, f"$({name})"))
            i = close - 1
        else:  # "$x" or an unclosed "$(": kept as written
            out.append("$" + after)
        i += 2
    return "".join(out)


def pod_dir(options: ProcessOptions, pod: Obj) -> Path:
    meta = pod["metadata"]
    return options.work_dir / "pods" / f"{meta['namespace']}.{meta['name']}.{meta['uid'][:8]}"


def container_launch(pod: Obj, world: World, options: ProcessOptions) -> Launch:
    containers = pod["spec"]["containers"]
    if len(containers) != 1 or pod["spec"].get("initContainers"):
        raise ContainerConfigError("the fake's process kubelet runs pods of exactly one container")
    container = containers[0]
    env = container_env(pod, container, world.secret_of)
    argv = [expand(a, env) for a in [*(container.get("command") or []), *(container.get("args") or [])]]
    if not argv:
        raise ContainerConfigError("the fake's images have no ENTRYPOINT: the container needs a command")
    rewrite = Rewriter(mounts(pod, container, world.secret_of, options), world.services, pod)
    cwd = Path(rewrite(container["workingDir"])) if container.get("workingDir") else None
    if cwd is not None and not cwd.is_dir():
        raise ContainerConfigError(
            f"workingDir {container['workingDir']} is not under a volume mount (the fake maps only those)",
            reason="CreateContainerError",
        )
    base = {**options.base_env, "HOSTNAME": pod["metadata"]["name"]}
    return Launch(
        argv=[rewrite(a) for a in argv],
        env={**base, **{k: rewrite(v) for k, v in env.items()}, **world.devices},
        cwd=cwd or options.image_workdir or pod_dir(options, pod),
    )


def container_env(pod: Obj, container: Obj, secret_of: SecretOf) -> dict[str, str]:
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        if var.get("value"):
            env[var["name"]] = expand(var["value"], env)
        elif var.get("valueFrom"):
            value = _value_from(pod, var["valueFrom"], secret_of)
            if value is not None:
                env[var["name"]] = value
        else:
            env[var["name"]] = ""
    return env


def _value_from(pod: Obj, source: Obj, secret_of: SecretOf) -> str | None:
    if "fieldRef" in source:
        return field_value(pod, source["fieldRef"]["fieldPath"])
    if "secretKeyRef" in source:
        ref = source["secretKeyRef"]
        value = _secret_key(pod["metadata"]["namespace"], ref, secret_of)
        return None if value is None else os.fsdecode(value)  # the bytes as they are, like the kubelet
    if "configMapKeyRef" in source:
        ref = source["configMapKeyRef"]
        if ref.get("optional"):
            return None
        raise ContainerConfigError(f'configmap "{ref.get("name", "")}" not found')  # the fake has none
    raise ContainerConfigError(f"the fake does not resolve this valueFrom: {sorted(source)}")


def field_value(pod: Obj, path: str) -> str:
    meta, spec = pod["metadata"], pod["spec"]
    simple = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": LOOPBACK,
        "status.podIPs": LOOPBACK,
        "status.hostIP": LOOPBACK,
        "status.hostIPs": LOOPBACK,
    }
    if path in simple:
        return str(simple[path])
    keyed = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if keyed:
        return str((meta.get(keyed[1]) or {}).get(keyed[2], ""))
    raise ContainerConfigError(f"unsupported fieldPath: {path}")


def _secret_key(ns: str, ref: Obj, secret_of: SecretOf) -> bytes | None:
    name, key, optional = ref.get("name", ""), ref["key"], bool(ref.get("optional"))
    secret = secret_of(name)
    if secret is None:
        if optional:
            return None
        raise ContainerConfigError(f'secret "{name}" not found')
    value = secret_value(secret, key)
    if value is None and not optional:
        raise ContainerConfigError(f"couldn't find key {key} in Secret {ns}/{name}")
    return value


def mounts(pod: Obj, container: Obj, secret_of: SecretOf, options: ProcessOptions) -> dict[str, Path]:
    """mountPath -> host directory, the directories created (a secret volume's keys written as files)."""
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    mapped: dict[str, Path] = {}
    for mount in container.get("volumeMounts") or []:
        path = mount["mountPath"].rstrip("/")
        volume = volumes.get(mount["name"])
        if not path or volume is None:
            raise ContainerConfigError(f"the fake cannot mount {mount['name']!r} at {mount['mountPath']!r}")
        host = _volume_dir(pod, volume, secret_of, options) / mount.get("subPath", "")
        if host.is_relative_to(options.work_dir):  # a hostPath is the machine's own: never created
            host.mkdir(parents=True, exist_ok=True)
        mapped[path] = host
    return mapped


def _volume_dir(pod: Obj, volume: Obj, secret_of: SecretOf, options: ProcessOptions) -> Path:
    if "persistentVolumeClaim" in volume:
        claim = str(volume["persistentVolumeClaim"]["claimName"])
        return options.work_dir / "claims" / str(pod["metadata"]["namespace"]) / claim
    if "hostPath" in volume:
        return Path(str(volume["hostPath"]["path"]))
    where = pod_dir(options, pod) / "volumes" / str(volume["name"])
    if "emptyDir" in volume:
        return where
    if "secret" in volume:
        _write_secret(pod, volume, secret_of, where)
        return where
    raise ContainerConfigError(f"the fake does not mount this kind of volume: {volume['name']}")


def _write_secret(pod: Obj, volume: Obj, secret_of: SecretOf, where: Path) -> None:
    source = volume["secret"]
    name = source.get("secretName", "")
    secret = secret_of(name)
    if secret is None and not source.get("optional"):
        # a real kubelet retries the mount and leaves the container ContainerCreating
        message = f'MountVolume.SetUp failed for volume "{volume["name"]}" : secret "{name}" not found'
        raise ContainerConfigError(message, reason="ContainerCreating")
    data = (secret or {}).get("data") or {}
    items = source.get("items") or [{"key": k, "path": k} for k in sorted(data)]
    for item in items:
        value = secret_value(secret or {}, item["key"])
        if value is None:
            raise ContainerConfigError(
                f"couldn't find key {item['key']} in Secret {name}", "ContainerCreating"
            )
        target = where / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(value)
        target.chmod(int(item.get("mode", source.get("defaultMode", 0o644))))


class Rewriter:
    """Maps mount paths to host directories and Service host names to 127.0.0.1 inside one string.

    A mountPath matches where it is a whole path component run (``/ckpt``, ``/ckpt/a``, ``--dir=/ckpt``,
    not ``/ckpt2`` nor ``/srv/ckpt``); nested mounts map to the innermost. ``<svc>.<ns>.svc`` and
    ``<svc>.<ns>.svc.cluster.local`` match wherever they stand as a name; the short ``<svc>.<ns>`` and
    ``<svc>`` (the latter only in the pod's own namespace, its DNS search path) only in a host's place:
    a whole value, after ``=``, ``//`` or ``@``, and followed by the end, ``:port`` or ``/``, so that a
    Service called ``train`` leaves ``train.py`` alone.
    """

    def __init__(self, mapped: Mapping[str, Path], services: list[Obj], pod: Obj) -> None:
        self.mapped = dict(mapped)
        self.paths = _alternation(mapped, rf"(?<!{PATH_CHAR})(", r")(?![^/:,;=\s\"'])")
        full, short = _service_names(services, pod["metadata"]["namespace"])
        self.full = _alternation(full, r"(?<![\w.-])(", r")(?![\w-]|\.[\w-])")
        self.short = _alternation(short, r"(?:^|(?<=//)|(?<=@)|(?<==))(", r")(?=$|:\d|/)")

    def __call__(self, text: str) -> str:
        if self.paths is not None:
            text = self.paths.sub(lambda m: str(self.mapped[m[1]]), text)
        for names in (self.full, self.short):
            if names is not None:
                text = names.sub(LOOPBACK, text)
        return text


def _alternation(words: Mapping[str, object] | list[str], before: str, after: str) -> re.Pattern[str] | None:
    ordered = sorted(words, key=len, reverse=True)  # the longest first: a nested mount, a longer name
    if not ordered:
        return None
    return re.compile(before + "|".join(re.escape(w) for w in ordered) + after)


def _service_names(services: list[Obj], ns: str) -> tuple[list[str], list[str]]:
    full: list[str] = []
    short: list[str] = []
    for service in services:
        name, where = service["metadata"]["name"], service["metadata"]["namespace"]
        full += [f"{name}.{where}.svc", f"{name}.{where}.svc.cluster.local"]
        short += [f"{name}.{where}", *([name] if where == ns else [])]
    return full, short
