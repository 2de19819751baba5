"""The scheduling engine's parts, built from the service's settings (by ``api.server.app`` or ``api.server.engine.host``).

Contract: ``build_executor(settings)`` gives the executor named by ``settings.executor`` (the kubernetes one
connects at its first use; the local and memory ones' nodes come from ``resolve_nodes``); ``close_executor`` closes it
when it has something to close; ``engine_settings(settings)`` the loop's knobs; ``build_leadership(settings, db)``
the election ``--leader-election`` names (``scheduler.engine.leader``), which in a Kubernetes pod (``POD_NAME``
and ``POD_NAMESPACE`` from the Downward API) also labels the pod while it leads. Nothing here opens a
database or starts a task.
"""

from __future__ import annotations

import os

from api.server.settings import Settings
from scheduler.core import Config, Node
from scheduler.engine.leader import (
    Labelled,
    Leadership,
    LeaseLeadership,
    LeaseTiming,
    PodLabel,
    leadership_for,
)
from scheduler.engine.loop import EngineSettings
from scheduler.executors.base import Executor
from scheduler.executors.fake import FakeExecutor
from scheduler.executors.kube.config import KubeSettings, connect
from scheduler.executors.kubernetes import KubernetesExecutor
from scheduler.executors.local import LocalExecutor, visible_gpu_count
from scheduler.store.db import Database


def resolve_nodes(settings: Settings) -> tuple[tuple[Node, ...], bool]:
    """The local executor's nodes and whether their GPUs are real (R12 places onto these)."""
    if settings.nodes is None and settings.gpus_per_node is None:
        count = visible_gpu_count()
        if count > 0:
            return (Node(name="node-0", gpus=count),), True
    nodes = settings.nodes if settings.nodes is not None else 1
    gpus = settings.gpus_per_node if settings.gpus_per_node is not None else 4
    size = settings.nodes_per_domain  # R17: node-0..node-(size-1) in domain-0, the next ones in domain-1, ...
    return tuple(
        Node(name=f"node-{i}", gpus=gpus, domain=f"domain-{i // size}" if size else None)
        for i in range(nodes)
    ), False


def kube_settings(settings: Settings) -> KubeSettings:
    return KubeSettings(
        namespace=settings.namespace,
        kubeconfig=settings.kubeconfig,
        default_image=settings.default_image,
        node_selector=settings.node_selector,
        checkpoint_claim=settings.checkpoint_claim,
        topology_key=settings.topology_key,
        agent_url=settings.agent_url,
        namespace_per_project=settings.namespace_per_project,
        pod_cpu_per_gpu=settings.pod_cpu_per_gpu,
        pod_memory_per_gpu=settings.pod_memory_per_gpu,
        gpu_reservation_image=settings.gpu_reservation_image,
    )


def build_executor(settings: Settings) -> Executor:
    """The executor named by ``settings.executor``; the kubernetes one connects at its first use."""
    if settings.executor == "kubernetes":
        return KubernetesExecutor(
            kube_settings(settings), data_dir=settings.data_dir, grace_period=settings.grace_period
        )
    nodes, real = resolve_nodes(settings)
    if settings.executor == "local":
        return LocalExecutor(settings.data_dir, nodes, real_gpus=real)
    if settings.executor == "memory":
        return FakeExecutor(nodes)
    raise ValueError(f"unknown executor {settings.executor!r}: use local, kubernetes or memory")


def close_executor(executor: Executor) -> None:
    """Close the executor (the kubernetes one ends its watches, the local one its warm launchers)."""
    executor.close()


def engine_settings(settings: Settings) -> EngineSettings:
    return EngineSettings(
        cycle_period=settings.cycle_period,
        grace_period=settings.grace_period,
        core=Config(
            settle_seconds=settings.settle_seconds,
            usage_half_life=settings.usage_half_life,
            resize_cost_seconds=settings.resize_cost_seconds,
            next_plan_seconds=settings.cycle_period,
        ),
        check_invariants=settings.check_invariants,
        eta_every=settings.eta_every,
        finished_retention=settings.finished_retention,
    )


def build_leadership(settings: Settings, db: Database) -> Leadership | None:
    """The election of ``--leader-election``; in a pod of the kubernetes executor, labelled on the pod.
    None: the database's (the ``Engine``'s default)."""
    pod = os.environ.get("POD_NAME")
    if settings.executor != "kubernetes" or (settings.leader_election != "lease" and not pod):
        return None
    connection = connect(kube_settings(settings))
    namespace = os.environ.get("POD_NAMESPACE") or connection.namespace  # the service's own, in a pod
    election: Leadership
    if settings.leader_election == "lease":
        timing = LeaseTiming.of(settings.lease_duration)
        election = LeaseLeadership(connection.api_client, namespace, timing=timing)
    else:
        election = leadership_for(db)
    return Labelled(election, PodLabel(connection.api_client, namespace, pod)) if pod else election
