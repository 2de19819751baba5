"""How the Kubernetes executor reaches its cluster: in-cluster service account, or a kubeconfig.

Contract: ``connect(settings)`` returns an ``ApiClient`` of its own (never the client's global default),
the namespace for jobs and a description of where it points. In a pod (``KUBERNETES_SERVICE_HOST`` set and
no ``kubeconfig`` given) it uses the pod's service account, and jobs go to ``settings.namespace`` or else
the pod's own namespace; elsewhere it reads ``settings.kubeconfig`` (else ``$KUBECONFIG``, else
``~/.kube/config``) and its ``context``, and jobs go to ``settings.namespace`` or else the context's
namespace, else ``default``. A configuration that cannot be loaded raises ``KubeConfigError`` saying what
to fix. urllib3's own retries are turned off: ``retry.Retrier`` is the one retry policy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from scheduler.executors.base import ExecutorError

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class KubeConfigError(ExecutorError):
    """No usable Kubernetes configuration; the message says what to set."""


@dataclass(frozen=True, slots=True)
class KubeSettings:
    """``tide serve --executor kubernetes`` options (flags and ``TIDE_*`` variables in ``api/client/cli/serve.py``)."""

    namespace: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    default_image: str | None = None
    node_selector: str | None = None
    checkpoint_claim: str | None = None
    topology_key: str | None = None  # R17: the node label whose value is the node's topology domain
    agent_url: str | None = None  # where job pods reach the service: torchrun jobs resize in place
    namespace_per_project: bool = False  # each project's jobs in namespace tide-<project> (kube/tenancy.py)
    pod_cpu_per_gpu: str | None = None  # a job pod's CPU request per GPU (None: podspec's default)
    pod_memory_per_gpu: str | None = None  # its memory request per GPU (None: podspec's default)
    gpu_reservation_image: str | None = None  # R20: the image of the pods that reserve shared GPUs
    request_timeout: float = 15.0
    watch_seconds: int = 300


@dataclass(frozen=True, slots=True)
class Connection:
    api_client: client.ApiClient
    namespace: str
    where: str


def in_cluster(settings: KubeSettings) -> bool:
    return settings.kubeconfig is None and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def connect(settings: KubeSettings) -> Connection:
    configuration = client.Configuration()
    try:
        if in_cluster(settings):
            config.load_incluster_config(client_configuration=configuration)
            namespace = settings.namespace or _pod_namespace()
            where = f"{configuration.host} (in-cluster service account)"
        else:
            config.load_kube_config(
                config_file=settings.kubeconfig, context=settings.context, client_configuration=configuration
            )
            namespace = settings.namespace or _context_namespace(settings)
            where = f"{configuration.host} (kubeconfig {settings.kubeconfig or os.environ.get('KUBECONFIG') or '~/.kube/config'})"
    except (ConfigException, OSError, ValueError, TypeError) as error:
        raise KubeConfigError(
            f"cannot load the Kubernetes configuration: {error}. In a pod, run with a service account; "
            "elsewhere pass --kubeconfig (or set KUBECONFIG)"
        ) from error
    configuration.retries = False
    return Connection(client.ApiClient(configuration), namespace, where)


def _pod_namespace() -> str:
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def _context_namespace(settings: KubeSettings) -> str:
    _, active = config.list_kube_config_contexts(config_file=settings.kubeconfig)
    if settings.context:
        contexts, _ = config.list_kube_config_contexts(config_file=settings.kubeconfig)
        active = next((c for c in contexts if c.get("name") == settings.context), active)
    return str(((active or {}).get("context") or {}).get("namespace") or "default")
