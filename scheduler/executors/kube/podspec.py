"""The Pod for one replica and the headless Service for one job, as the JSON bodies the API takes.

Contract (pure): ``pod_body(spec, options)`` places the pod with ``spec.nodeName`` (the node Tide chose:
the kube-scheduler is bypassed, Tide is the scheduler), limits ``nvidia.com/gpu`` to the replica's GPUs,
``restartPolicy: Never`` (a replica that exits is Tide's to handle), ``terminationGracePeriodSeconds``
from the job's grace period, the labels of ``names``, no service-account token and no service links.
``pod_env`` is the engine's environment for the replica (``TIDE_*``, the job's env, any ``PET_*`` an
``EnvBuilder`` added) with three Kubernetes facts on top: ``PET_RDZV_ENDPOINT`` names the job's headless
Service (port kept), ``PET_LOCAL_ADDR`` is the pod's own IP (Downward API), ``TIDE_MASTER_ADDR`` the
Service's name. When the engine set no torchrun settings, the torchrun defaults of
``scheduler.elastic.environment`` are added: a fixed-size rendezvous of ``TIDE_NUM_REPLICAS`` with a run id per
``TIDE_GENERATION``, checkpoints in ``/tide/checkpoints/PROJECT/JOB-ID`` (with a checkpoint claim, that
directory of the claim mounted there alone, as a ``subPath``: a job never sees another's), and an agent's shutdown timeout
inside the pod's grace period (the agent, not the kubelet's SIGKILL, ends the workers). Values are escaped so Kubernetes
never expands a ``$(...)`` in them. With an ``agent_url``, a torchrun job's pod runs Tide's agent
(``tide agent -- COMMAND``: its resizes happen in place, ``scheduler.elastic.agent.pod``) and gets
``TIDE_AGENT_URL``, ``TIDE_REPLICA_ID`` and ``TIDE_AGENT_TOKEN`` from the job's Secret (``secret_body``).

Job pods (docs/kubernetes.md, "Job pods"): the spec's ``pod_template`` (the job's, merged over its project's
and department's defaults by ``podtemplate.effective``) adds resources, env (``valueFrom``, ``envFrom``),
volumes and mounts, tolerations (after the default ``nvidia.com/gpu`` one), node selector and affinity,
service account, pull secrets, priority class, runtime class and security contexts. No pod is
BestEffort: a CPU or memory request the template does not set (neither request nor limit) is
``options.cpu_per_gpu``/``memory_per_gpu`` times the replica's GPUs. ``/dev/shm`` is an emptyDir of
medium Memory, ``shm_size`` big (default: half the memory request; ``"0"``: none). The container's
securityContext starts from ``allowPrivilegeEscalation: false`` and ``capabilities.drop: [ALL]``; an
admin's defaults may change that, a job only as far as the admin allows (``podtemplate.problems``). An
extended resource (``rdma/hca_shared_devices_a``) requested without a limit gets the limit, as Kubernetes
requires. Tide's own fields (image, command, GPU limit, ``TIDE_*`` env, name, labels, ``nodeName``) win.

A fractional replica (R20, ``spec.gpu_share``) is given its ``shared`` GPU: ``(reservation pod, device)``
from ``kube/reservations.py``. Its pod requests no ``nvidia.com/gpu`` (the reservation pod holds the GPU);
it gets the device in ``NVIDIA_VISIBLE_DEVICES`` (the NVIDIA container runtime mounts it),
``NVIDIA_DRIVER_CAPABILITIES=compute,utility`` unless the job sets it, ``TIDE_GPU_FRACTION`` from the
engine, the label ``tide.dev/gpu-reservation`` and the annotation ``tide.dev/gpu-share``; its default CPU
and memory requests are its share of one GPU's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from scheduler.elastic.environment import Placement, fixed_size_launch, torchrun_env, with_job_env
from scheduler.elastic.torchrun_argv import uses_torchrun
from scheduler.executors.base import LaunchSpec
from scheduler.executors.kube import names, podtemplate
from scheduler.executors.kube.podtemplate import format_cpu, format_memory, parse_quantity

Body = dict[str, Any]
POD_IP = "TIDE_POD_IP"
CONTAINER = "replica"
CHECKPOINT_MOUNT = "/tide/checkpoints"
AGENT_TOKEN_KEY = "agent-token"
AGENT_COMMAND = ("tide", "agent", "--")
DEFAULT_TOLERATIONS: tuple[Mapping[str, str], ...] = (
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)

DEFAULT_CPU_PER_GPU = "4"
DEFAULT_MEMORY_PER_GPU = "32Gi"
DEFAULT_CONTAINER_SECURITY: Mapping[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "hugepages-")
# pod fields a template passes through as they are (the rest: tolerations, volumes, containers, below)
PASSED_POD_FIELDS = (
    "nodeSelector", "affinity", "serviceAccountName", "automountServiceAccountToken", "imagePullSecrets",
    "priorityClassName", "securityContext", "runtimeClassName", "hostNetwork", "hostPID", "hostIPC",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class PodOptions:
    """What every replica pod of this Tide gets, beyond its LaunchSpec."""

    namespace: str
    default_image: str | None = None
    gpu_resource: str = "nvidia.com/gpu"
    grace_period: float = 30.0
    rendezvous_port: int = 29400
    checkpoint_claim: str | None = None
    tolerations: tuple[Mapping[str, str], ...] = DEFAULT_TOLERATIONS
    image_pull_policy: str = "IfNotPresent"
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    agent_url: str | None = None  # where job pods reach the service: torchrun jobs then run Tide's agent
    cpu_per_gpu: str = DEFAULT_CPU_PER_GPU  # the CPU request per GPU of a pod whose template sets none
    memory_per_gpu: str = DEFAULT_MEMORY_PER_GPU  # the memory request per GPU, likewise


def _escape(value: str) -> str:
    """Kubernetes expands ``$(VAR)`` and turns ``$$`` into ``$`` in env values: keep ours literal."""
    return value.replace("$", "$$")


def _torchrun_defaults(spec: LaunchSpec, host: str, options: PodOptions, grace: float) -> dict[str, str]:
    place = Placement(
        project=spec.project,
        job=spec.job,
        index=spec.index,
        gpus=len(spec.gpu_ids),
        host=host,
        port=options.rendezvous_port,
        checkpoint_dir=checkpoint_dir(spec),
        grace=grace,
    )
    return torchrun_env(fixed_size_launch(place, spec.env))


def checkpoint_dir(spec: LaunchSpec) -> str:
    """``/tide/checkpoints/PROJECT/JOB-ID``: one job's, never a later job's of the same name."""
    return f"{CHECKPOINT_MOUNT}/{spec.project}/{spec.job}-{spec.env.get('TIDE_JOB_ID', '0')}"


def runs_agent(spec: LaunchSpec, options: PodOptions) -> bool:
    """Whether this replica's pod runs Tide's agent: a torchrun job, with an agent URL configured."""
    return options.agent_url is not None and uses_torchrun(spec.argv)


def agent_env(spec: LaunchSpec, options: PodOptions) -> list[Body]:
    """How the agent reaches the service: its URL, the job's token (from the job's Secret), its replica."""
    secret = {"name": names.service_name(spec.project, spec.job), "key": AGENT_TOKEN_KEY}
    return [
        {"name": "TIDE_AGENT_URL", "value": _escape(options.agent_url or "")},
        {"name": "TIDE_AGENT_TOKEN", "valueFrom": {"secretKeyRef": secret}},
        {"name": "TIDE_REPLICA_ID", "value": str(spec.replica_id)},
    ]


def _port(endpoint: str | None, default: int) -> int:
    if endpoint and ":" in endpoint:
        tail = endpoint.rsplit(":", 1)[1]
        if tail.isdigit():
            return int(tail)
    return default


def pod_env(spec: LaunchSpec, options: PodOptions, grace: float | None = None) -> list[Body]:
    """The container's ``env``: the pod's IP first (later values refer to it), then the rest by name."""
    host = names.service_host(spec.project, spec.job, options.namespace)
    env = dict(spec.env)
    if "PET_NNODES" not in env:
        pod_grace = options.grace_period if grace is None else grace
        env = with_job_env(_torchrun_defaults(spec, host, options, pod_grace), env, forced=False)
    env["PET_RDZV_ENDPOINT"] = f"{host}:{_port(env.get('PET_RDZV_ENDPOINT'), options.rendezvous_port)}"
    env["TIDE_MASTER_ADDR"] = host
    env.pop("PET_LOCAL_ADDR", None)
    env.pop(POD_IP, None)
    listed: list[Body] = [{"name": POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    listed.append({"name": "PET_LOCAL_ADDR", "value": f"$({POD_IP})"})
    listed.extend({"name": k, "value": _escape(v)} for k, v in sorted(env.items()))
    return listed


def grace_seconds(grace: float) -> int:
    return max(0, math.ceil(grace))


def shared_env(spec: LaunchSpec, device: str) -> LaunchSpec:
    """A fractional replica's spec with its shared GPU's device in its environment (Tide's value wins)."""
    env = {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility", **spec.env, "NVIDIA_VISIBLE_DEVICES": device}
    return dataclasses.replace(spec, env=env)


def pod_body(
    spec: LaunchSpec,
    options: PodOptions,
    *,
    grace: float | None = None,
    shared: tuple[str, str] | None = None,
) -> Body:
    image = spec.image or options.default_image
    if not image:
        raise ValueError("the job has no image and the service has no default image (--default-image)")
    share = Decimal(spec.gpu_share) if spec.gpu_share is not None else None
    if share is not None:
        if shared is None:
            raise ValueError("a fractional replica's pod needs the reservation of its GPU")
        spec = shared_env(spec, shared[1])
    template = dict(spec.pod_template or {})
    wanted = podtemplate.container_of(template)
    agent = runs_agent(spec, options)
    env = pod_env(spec, options, grace) + (agent_env(spec, options) if agent else [])
    tide_names = {e["name"] for e in env}
    env += [dict(e) for e in wanted.get("env") or [] if e.get("name") not in tide_names]
    container: Body = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": options.image_pull_policy,
        "command": [*AGENT_COMMAND, *spec.argv] if agent else list(spec.argv),
        "env": env,
        "resources": resources(len(spec.gpu_ids), wanted.get("resources") or {}, options, share=share),
        "securityContext": podtemplate.merge(DEFAULT_CONTAINER_SECURITY, wanted.get("securityContext") or {}),
    }
    if wanted.get("envFrom"):
        container["envFrom"] = [dict(e) for e in wanted["envFrom"]]
    pod_template = template.get("spec") or {}
    pod_spec: Body = {
        "nodeName": spec.node,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": grace_seconds(options.grace_period if grace is None else grace),
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "tolerations": podtemplate.merge(
            [dict(t) for t in options.tolerations], list(pod_template.get("tolerations") or [])
        ),
        "containers": [container],
    }
    pod_spec |= {key: pod_template[key] for key in PASSED_POD_FIELDS if key in pod_template}
    mounts: list[Body] = []
    volumes: list[Body] = []
    if options.checkpoint_claim:
        where = checkpoint_dir(spec)  # the job's own directory of the claim, never another job's
        sub = where.removeprefix(f"{CHECKPOINT_MOUNT}/")
        mounts.append({"name": podtemplate.CHECKPOINT_VOLUME, "mountPath": where, "subPath": sub})
        volumes.append(
            {
                "name": podtemplate.CHECKPOINT_VOLUME,
                "persistentVolumeClaim": {"claimName": options.checkpoint_claim},
            }
        )
    mounts += [dict(m) for m in wanted.get("volumeMounts") or []]
    volumes += [dict(v) for v in pod_template.get("volumes") or []]
    shm = shm_size(template, container["resources"])
    if shm is not None:
        mounts.append({"name": podtemplate.SHM_VOLUME, "mountPath": podtemplate.SHM_MOUNT})
        volumes.append({"name": podtemplate.SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm}})
    if mounts:
        container["volumeMounts"] = mounts
        pod_spec["volumes"] = volumes
    metadata = template.get("metadata") or {}
    labels = {
        **options.extra_labels,
        **(metadata.get("labels") or {}),
        **names.pod_labels(spec.project, spec.job, spec.index, spec.replica_id),
    }
    annotations = {
        **(metadata.get("annotations") or {}),
        names.GPU_IDS: ",".join(str(g) for g in spec.gpu_ids),
    }
    if shared is not None and spec.gpu_share is not None:
        labels[names.GPU_RESERVATION] = shared[0]
        annotations[names.GPU_SHARE] = spec.gpu_share
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": names.pod_name(spec.project, spec.job, spec.index, spec.replica_id),
            "namespace": options.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": pod_spec,
    }


def refusal(error: ValueError) -> str:
    """Why a pod cannot be made, in one line: a model's refusals (``errors()``) field by field."""
    errors = getattr(error, "errors", None)
    if not callable(errors):
        return str(error)
    problems = podtemplate.model_problems(errors(), "pod")
    return "the pod's template does not make a valid Pod: " + "; ".join(map(str, problems))


def resources(
    gpus: int, wanted: Mapping[str, Any], options: PodOptions, *, share: Decimal | None = None
) -> Body:
    """The container's resources: the template's (a number written as a quantity string, as the API's
    clients send it), a CPU and memory request per GPU where it sets neither request nor limit (a
    fractional replica: its ``share`` of one GPU's, and no GPU), an extended resource's limit where only its
    request is given, and the GPU limit."""
    requests = {name: str(amount) for name, amount in (wanted.get("requests") or {}).items()}
    limits = {name: str(amount) for name, amount in (wanted.get("limits") or {}).items()}  # 4 -> "4"
    for name, each, show in (
        ("cpu", options.cpu_per_gpu, format_cpu),
        ("memory", options.memory_per_gpu, format_memory),
    ):
        amount = parse_quantity(each)
        if name not in requests and name not in limits and amount:
            requests[name] = show(amount * (share if share is not None else max(gpus, 1)))
    for name, asked in requests.items():
        if not str(name).startswith(NATIVE_RESOURCES):
            limits.setdefault(name, asked)
    if share is not None:  # the GPU is the reservation pod's: this pod must not ask for one
        requests.pop(options.gpu_resource, None)
        limits.pop(options.gpu_resource, None)
    elif gpus:
        limits[options.gpu_resource] = str(gpus)
    return {key: value for key, value in (("requests", requests), ("limits", limits)) if value}


def shm_size(template: Mapping[str, Any], resources: Mapping[str, Any]) -> str | None:
    """The size of the pod's ``/dev/shm``: the template's ``shm_size``, else half the memory request (else
    limit); None for ``"0"`` or when there is no memory figure at all."""
    if "shm_size" in template:
        amount = parse_quantity(template["shm_size"])
        return str(template["shm_size"]) if amount else None
    memory = (resources.get("requests") or {}).get("memory") or (resources.get("limits") or {}).get("memory")
    amount = parse_quantity(memory)
    return format_memory(amount / 2) if amount else None


def secret_body(project: str, job: str, token: str, options: PodOptions) -> Body:
    """The job's Secret: the token its pods' agents show the service (only its hash is stored there)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": names.service_name(project, job),
            "namespace": options.namespace,
            "labels": {names.MANAGED_BY: names.MANAGER, names.PROJECT: project, names.JOB: job},
        },
        "stringData": {AGENT_TOKEN_KEY: token},
    }


def service_body(project: str, job: str, options: PodOptions) -> Body:
    """A headless Service selecting the job's master, published before it is ready (DNS for rendezvous)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.service_name(project, job),
            "namespace": options.namespace,
            "labels": {names.MANAGED_BY: names.MANAGER, names.PROJECT: project, names.JOB: job},
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": names.master_selector(project, job),
        },
    }
