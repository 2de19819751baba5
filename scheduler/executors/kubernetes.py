"""The Kubernetes executor: each replica is a Pod on the node Tide chose; each job has a headless Service.

Contract (see ``base.Executor``):

- ``start`` creates the replica's Pod (``kube/podspec.py``: ``spec.nodeName``, ``nvidia.com/gpu`` limits,
  the engine's environment plus the rendezvous address, labels ``tide.dev/*``) after making sure the
  job's headless Service exists. Pod names are deterministic per replica id, so a create that answers
  409 ``AlreadyExists`` (an earlier attempt that timed out, or a pod from before a restart) adopts that pod:
  a replica never gets two pods. A pod (or Service) the API refuses is judged by ``kube/refusals.py``: an
  invalid body or an admission's 403 is an ``ExecutorError`` (the job fails with the API's message), a
  quota's 403 or a missing namespace a ``LaunchDeferred`` (the replica waits, tried again with backoff);
  an API that cannot be reached is a ``KubeApiError`` (the cycle is retried).
- ``stop`` deletes the pod with ``gracePeriodSeconds`` = the grace (the kubelet sends SIGTERM, then
  SIGKILL once it has passed); the engine asks for workers before the master.
- ``notify`` (a preemption notice) sends nothing: a pod that runs Tide's agent learns of it from its poll
  (``api.server.routes.agent`` reads the replica's ``noticed_at``) and passes SIGUSR1 to its training; the engine
  gives notices to such pods only (``scheduler.elastic.notice.reaches``), a plain pod gets none.
- ``observe`` answers from memory, kept current by two watches (``kube/reflector.py``): the pods labelled
  ``app.kubernetes.io/managed-by=tide`` in the jobs namespace and the Node objects (``--node-selector``);
  a third watches every pod, so that GPUs other workloads hold are not offered (``kube/inventory.py``).
  Without a node selector (Tide's GPU pool) it warns once, at the first call: it then places on every node.
  A replica's pod that ended reports its exit code; one that vanished reports how (``kube/status.py``).
- ``forget`` deletes the pod of a replica that ended (saving its log first, under ``DATA/logs`` like the
  local executor) and the job's Service once no replica of the job is left.
- ``adopt`` is the first list: every pod with Tide's labels is known again after a restart, and
  Services (and Secrets) without pods are removed. ``nodes`` is the node inventory (``kube/inventory.py``).
- With an ``agent_url`` (``capabilities.inplace_restarts``) a torchrun job's pods run Tide's agent and resize in place
  (``scheduler.elastic.inplace``): ``put_agent_token`` writes the job's token into its Secret
  (``kube/agent_secrets.py``), removed with its Service.
All API calls go through ``kube/retry.Retrier`` (backoff on 5xx, 429, conflicts, timeouts). The executor
connects lazily, at the first call, so building it opens nothing.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from scheduler.core.model import Node
from scheduler.executors.base import Capabilities, ExecutorError, LaunchDeferred, LaunchSpec, Observation
from scheduler.executors.kube import names, podspec, refusals
from scheduler.executors.kube.agent_secrets import AgentSecrets
from scheduler.executors.kube.config import Connection, KubeSettings, connect
from scheduler.executors.kube.inventory import Inventory
from scheduler.executors.kube.logs import PodLogs
from scheduler.executors.kube.reflector import Reflector
from scheduler.executors.kube.retry import KubeApiError, Retrier, describe, is_already_exists
from scheduler.executors.kube.status import PodView, ReplicaRecord, identity

log = logging.getLogger(__name__)
Obj = dict[str, Any]
NO_POOL = (
    "no --node-selector: Tide places replicas on every node with GPUs. Name Tide's GPU pool "
    "(e.g. --node-selector tide.dev/pool=gpu) so that other schedulers do not bind pods to the same GPUs "
    "(docs/kubernetes.md, 'Binding')"
)


class KubernetesExecutor:
    """Replicas as pods in one namespace; nodes from the cluster."""

    def __init__(
        self,
        settings: KubeSettings,
        *,
        data_dir: Path | None = None,
        grace_period: float = 30.0,
        retrier: Retrier | None = None,
        connection: Connection | None = None,
        backoff: refusals.Backoff | None = None,
    ) -> None:
        self.settings = settings
        self.retrier = retrier or Retrier()
        self.backoff = backoff or refusals.Backoff()  # replicas whose pod was refused for now
        self.logs = PodLogs(self._core, lambda: self.namespace, self._timeout, data_dir)
        self._grace = grace_period
        self._connection = connection
        self._replicas: dict[int, ReplicaRecord] = {}
        self._forgotten: set[str] = set()  # uids of pods whose replica was forgotten
        self._services: set[tuple[str, str]] = set()
        self._lock = threading.RLock()
        self._start_lock = threading.Lock()
        self.inventory = Inventory("nvidia.com/gpu", podspec.DEFAULT_TOLERATIONS, settings.topology_key)
        self.secrets = AgentSecrets(
            self._core, lambda: self.namespace, self._timeout, self.retrier, self._to_dict
        )
        self.pod_watch: Reflector | None = None
        self.node_watch: Reflector | None = None
        self.holdings_watch: Reflector | None = None  # every pod: GPUs other workloads hold

    # connection -------------------------------------------------------------------------------------
    @property
    def real_gpus(self) -> bool:
        return False  # the device plugin chooses the devices inside each pod

    @property
    def capabilities(self) -> Capabilities:
        """With an agent URL, job pods run Tide's agent: a torchrun job relaunches in place on a resize."""
        return Capabilities(inplace_restarts=self.settings.agent_url is not None)

    @property
    def connection(self) -> Connection:
        if self._connection is None:
            self._connection = connect(self.settings)
        return self._connection

    @property
    def namespace(self) -> str:
        return self.connection.namespace

    @property
    def options(self) -> podspec.PodOptions:
        return podspec.PodOptions(
            namespace=self.namespace,
            default_image=self.settings.default_image,
            grace_period=self._grace,
            checkpoint_claim=self.settings.checkpoint_claim,
            agent_url=self.settings.agent_url,
        )

    def _core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.connection.api_client)

    def _timeout(self) -> tuple[float, float]:
        return (min(5.0, self.settings.request_timeout), self.settings.request_timeout)

    def _to_dict(self, model: Any) -> Any:
        return self.connection.api_client.sanitize_for_serialization(model)

    def _ensure_started(self) -> None:
        with self._start_lock:
            if self.pod_watch is not None:
                return
            core = self._core()
            common = {
                "to_dict": self._to_dict,
                "retrier": self.retrier,
                "watch_seconds": self.settings.watch_seconds,
            }
            node_watch = Reflector(
                "nodes",
                core.list_node,
                (),
                on_list=self.inventory.replace,
                on_event=self.inventory.apply,
                selector=self.settings.node_selector,
                **common,  # type: ignore[arg-type]
            )
            pod_watch = Reflector(
                f"pods in {self.namespace}",
                core.list_namespaced_pod,
                (self.namespace,),
                on_list=self._on_pod_list,
                on_event=self._on_pod_event,
                selector=names.MANAGED_SELECTOR,
                **common,  # type: ignore[arg-type]
            )
            if self.settings.node_selector is None:
                log.warning(NO_POOL)
            node_watch.start()
            self.inventory.own_namespace = self.namespace
            self.holdings_watch = self._watch_holdings(core, common)
            pod_watch.start()
            self.node_watch, self.pod_watch = node_watch, pod_watch

    def _watch_holdings(self, core: client.CoreV1Api, common: dict[str, Any]) -> Reflector | None:
        """Watch every pod (GPUs that other workloads hold on Tide's nodes); without the right to list
        pods in all namespaces, warn and go on without it."""
        holdings = Reflector(
            "pods in all namespaces",
            core.list_pod_for_all_namespaces,
            (),
            on_list=self.inventory.replace_pods,
            on_event=self.inventory.apply_pod,
            **common,
        )
        try:
            holdings.start()
        except ApiException as error:
            if error.status != 403:
                raise
            log.warning(
                "cannot list pods in all namespaces (%s): GPUs that other workloads hold on Tide's nodes are "
                "not subtracted; grant list and watch on pods cluster-wide (docs/kubernetes.md)",
                describe(error),
            )
            return None
        return holdings

    def close(self) -> None:
        for reflector in (self.pod_watch, self.holdings_watch, self.node_watch):
            if reflector is not None:
                reflector.stop()
        if self._connection is not None:
            self._connection.api_client.close()

    # watch callbacks --------------------------------------------------------------------------------
    def _track(self, obj: Obj) -> ReplicaRecord | None:
        """Fold a pod into its replica's record (caller holds the lock). Replica ids are reused by the
        store once a replica is forgotten, so a pod is matched by uid: a forgotten pod is ignored, and a
        second live pod claiming the same id (another Tide's, in the same namespace) is not adopted."""
        view = PodView.of(obj)
        if view is None or view.uid in self._forgotten:
            return None
        record = self._replicas.get(view.replica_id)
        if record is not None and record.view.uid != view.uid:
            if not record.gone:
                log.warning(
                    "pod %s claims replica %s, which is pod %s", view.name, view.replica_id, record.view.name
                )
                return None
            record = None  # a new pod for a replica whose old pod is gone
        if record is None:
            project, job, index = identity(obj)
            record = self._replicas[view.replica_id] = ReplicaRecord(project, job, index, view)
        record.view = view
        return record

    def _on_pod_list(self, items: list[Obj]) -> None:
        with self._lock:
            seen = {r.view.uid for r in (self._track(o) for o in items) if r is not None}
            for record in self._replicas.values():
                if record.view.uid not in seen:
                    record.gone = True
            self._forgotten &= {str(o["metadata"].get("uid")) for o in items}

    def _on_pod_event(self, kind: str, obj: Obj) -> None:
        with self._lock:
            if kind == "DELETED":
                self._forgotten.discard(str(obj["metadata"].get("uid")))
            record = self._track(obj)
            if record is not None and kind == "DELETED":
                record.gone = True

    # the Executor protocol --------------------------------------------------------------------------
    def nodes(self) -> tuple[Node, ...]:
        self._ensure_started()
        return self.inventory.nodes()

    def adopt(self) -> None:
        """Pods were listed when the watches started; remove Services of jobs that have no pod left."""
        self._ensure_started()
        with self._lock:
            log.info("adopted %d pods in namespace %s", len(self._replicas), self.namespace)
            jobs = {(r.project, r.job) for r in self._replicas.values()}
        answer = self.retrier.call(
            "list services",
            lambda: self._core().list_namespaced_service(
                self.namespace, label_selector=names.MANAGED_SELECTOR, _request_timeout=self._timeout()
            ),
        )
        for service in self._to_dict(answer).get("items") or []:
            labels = service["metadata"].get("labels") or {}
            if (labels.get(names.PROJECT), labels.get(names.JOB)) not in jobs:
                self._delete_service(service["metadata"]["name"])
        if self.capabilities.inplace_restarts:
            self.secrets.remove_orphans(jobs)

    def put_agent_token(self, project: str, job: str, token: str) -> None:
        """The job's Secret holds ``token``: made now, or replaced (a job of the same name may have left one)."""
        self.secrets.put(podspec.secret_body(project, job, token, self.options))

    def observe(self) -> dict[int, Observation]:
        self._ensure_started()
        with self._lock:
            return {rid: record.observation() for rid, record in self._replicas.items()}

    def start(self, spec: LaunchSpec) -> Observation:
        self._ensure_started()
        name = names.pod_name(spec.project, spec.job, spec.index, spec.replica_id)
        with self._lock:
            known = self._replicas.get(spec.replica_id)
            if known is not None and not known.gone:
                if known.view.name != name:
                    raise ExecutorError(
                        f"pod {known.view.name} in namespace {self.namespace} claims replica id "
                        f"{spec.replica_id}: it belongs to another Tide (one Tide per jobs namespace)"
                    )
                return known.observation()  # its pod exists: never a second one
            self._replicas.pop(spec.replica_id, None)
        self.backoff.check(spec.replica_id)
        try:
            body = podspec.pod_body(spec, self.options, grace=spec.grace)
        except ValueError as error:
            raise ExecutorError(str(error)) from error
        self._ensure_service(spec.project, spec.job, spec.replica_id)
        obj = self._create_pod(body, spec.replica_id)
        self.backoff.clear(spec.replica_id)
        with self._lock:
            record = self._replicas.get(spec.replica_id)
            if record is None or record.view.uid != obj["metadata"].get("uid"):
                record = self._track(obj)  # the watch has not shown it yet; it will never be older
            if record is None:
                raise ExecutorError(f"pod {name} was made but another pod claims replica {spec.replica_id}")
            return record.observation()

    def _create_pod(self, body: Obj, replica_id: int) -> Obj:
        name = body["metadata"]["name"]
        core = self._core()
        try:
            created = self.retrier.call(
                f"create pod {name}",
                lambda: core.create_namespaced_pod(
                    self.namespace, client.V1Pod.model_validate(body), _request_timeout=self._timeout()
                ),
            )
            return dict(self._to_dict(created))
        except ApiException as error:
            if is_already_exists(error):
                return self._adopt_existing(name, replica_id)
            raise self._refused(error, f"pod {name}", replica_id) from error

    def _refused(self, error: ApiException, what: str, replica_id: int) -> Exception:
        """The error for a create the API refused (``kube/refusals.py``); a deferral starts its backoff."""
        judged = refusals.judge(error, what)
        if isinstance(judged, LaunchDeferred):
            return self.backoff.defer(replica_id, judged)
        return judged

    def _adopt_existing(self, name: str, replica_id: int) -> Obj:
        found = self.retrier.call(
            f"read pod {name}",
            lambda: self._core().read_namespaced_pod(name, self.namespace, _request_timeout=self._timeout()),
        )
        obj: Obj = dict(self._to_dict(found))
        view = PodView.of(obj)
        if view is None or view.replica_id != replica_id:
            raise ExecutorError(f"pod {name} already exists and is not Tide's replica {replica_id}")
        if view.uid in self._forgotten:
            raise KubeApiError(f"pod {name} of an earlier replica {replica_id} is still being removed")
        log.info("pod %s already existed: adopted", name)
        return obj

    def notify(self, replica_id: int) -> None:
        """Nothing to send: the replica's agent is told by its next poll (see the module's contract)."""

    def stop(self, replica_id: int, grace: float) -> None:
        with self._lock:
            record = self._replicas.get(replica_id)
            if record is None or record.gone or record.stop_requested or record.view.exit_code is not None:
                return
            name = record.view.name
        self._save_log(record)
        seconds = podspec.grace_seconds(grace)
        try:
            answer = self.retrier.call(
                f"delete pod {name}",
                lambda: self._core().delete_namespaced_pod(
                    name, self.namespace, grace_period_seconds=seconds, _request_timeout=self._timeout()
                ),
            )
        except ApiException as error:
            if error.status != 404:
                raise KubeApiError(f"delete pod {name}: {describe(error)}") from error
            answer = None
        with self._lock:  # the watch shows the deletion; an answer may be older than what it showed
            record.stop_requested = True
            if answer is None:
                record.gone = True

    def forget(self, replica_id: int) -> None:
        self.backoff.clear(replica_id)
        with self._lock:
            record = self._replicas.pop(replica_id, None)
            if record is None:
                return
            if not record.gone:
                self._forgotten.add(record.view.uid)
            others = any((r.project, r.job) == (record.project, record.job) for r in self._replicas.values())
        if not record.gone:
            if not record.stop_requested:
                self._save_log(record)
            self._delete_pod_now(record.view.name)
        if not others:
            self._services.discard((record.project, record.job))
            self._delete_service(names.service_name(record.project, record.job))
            if self.capabilities.inplace_restarts:
                self.secrets.delete(names.service_name(record.project, record.job))

    def read_log(self, project: str, job: str, index: int, tail: int | None = None) -> str | None:
        with self._lock:
            live = [
                r
                for r in self._replicas.values()
                if (r.project, r.job, r.index) == (project, job, index) and not r.gone
            ]
        if live:
            newest = max(live, key=lambda r: r.view.replica_id)
            text = self.logs.read(newest.view.name, tail)
            if text is not None:
                return text
        elif self.pod_watch is None:  # a standby follows no pods: it finds the replica's pod by its labels
            text = self.logs.read_replica(project, job, index, tail)
            if text is not None:
                return text
        return self.logs.saved(project, job, index, tail)

    # helpers ----------------------------------------------------------------------------------------
    def _ensure_service(self, project: str, job: str, replica_id: int) -> None:
        if (project, job) in self._services:
            return
        body = podspec.service_body(project, job, self.options)
        try:
            self.retrier.call(
                f"create service {body['metadata']['name']}",
                lambda: self._core().create_namespaced_service(
                    self.namespace, client.V1Service.model_validate(body), _request_timeout=self._timeout()
                ),
            )
        except ApiException as error:
            if not is_already_exists(error):
                raise self._refused(error, f"service {body['metadata']['name']}", replica_id) from error
        self._services.add((project, job))

    def _delete_pod_now(self, name: str) -> None:
        self._delete(
            f"delete pod {name}",
            lambda: self._core().delete_namespaced_pod(
                name, self.namespace, grace_period_seconds=0, _request_timeout=self._timeout()
            ),
        )

    def _delete_service(self, name: str) -> None:
        self._delete(
            f"delete service {name}",
            lambda: self._core().delete_namespaced_service(
                name, self.namespace, _request_timeout=self._timeout()
            ),
        )

    def _save_log(self, record: ReplicaRecord) -> None:
        self.logs.save(record.project, record.job, record.index, record.view.name, record.view.node)

    def _delete(self, what: str, call: Any) -> None:
        try:
            self.retrier.call(what, call)
        except ApiException as error:
            if error.status != 404:
                raise KubeApiError(f"{what}: {describe(error)}") from error
