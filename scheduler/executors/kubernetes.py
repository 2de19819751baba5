"""The Kubernetes executor: each replica is a Pod on the node Tide chose; each job has a headless Service.

Contract (see ``base.Executor``):

- ``start`` creates the replica's Pod (``kube/podspec.py``: ``spec.nodeName``, ``nvidia.com/gpu`` limits,
  the engine's environment plus the rendezvous address, labels ``tide.dev/*``) after making sure the
  job's headless Service and NetworkPolicy exist (``kube/tenancy.py``: ingress to the job's pods from its
  own pods only). The Service is the job's owner object: the pods, the NetworkPolicy and the agent's
  Secret carry an ownerReference to it (``blockOwnerDeletion`` false), so Kubernetes' garbage collector
  removes them should Tide miss them. Each project's jobs go to the jobs namespace, or with
  ``namespace_per_project`` to ``tide-<project>`` (made, with Tide's RoleBinding, by the admin). Pod names are deterministic per replica id, so a create that answers
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
  ``app.kubernetes.io/managed-by=tide`` in the jobs namespace (every namespace, with namespaces per
  project) and the Node objects (``--node-selector``);
  a third watches every pod, so that GPUs other workloads hold are not offered (``kube/inventory.py``).
  Without a node selector (Tide's GPU pool) it warns once, at the first call: it then places on every node.
  A replica's pod that ended reports its exit code; one that vanished reports how (``kube/status.py``).
- ``forget`` deletes the pod of a replica that ended (saving its log first, under ``DATA/logs`` like the
  local executor) and the job's Service and NetworkPolicy once no replica of the job is left.
- ``announce`` posts Tide's decisions as Events on the job's pods (``kube/events.py``: from a thread,
  rate-limited, never failing anything).
- A fractional replica (R20) runs on a GPU held by a reservation pod (``kube/reservations.py``, after
  KAI-Scheduler): ``start`` makes the GPU's reservation pod first and defers the replica
  (``LaunchDeferred``, its job says why) until that pod runs and said which device it holds; the replica's
  pod then requests no GPU and gets the device in ``NVIDIA_VISIBLE_DEVICES``. ``observe`` deletes a
  reservation once no replica's pod uses it (nor a start asked for it recently), and reports the last
  fraction that used it as stopping until the reservation pod is gone: the store frees the GPU only once
  the device plugin has it back. A fraction whose reservation pod was deleted or ended behind Tide's back is
  stopped and reported lost with that reason (its GPU may be handed to another pod).
- ``adopt`` is the first list: every pod with Tide's labels is known again after a restart (reservation pods
  too: a fraction started later on that GPU uses the same one), Services (and Secrets) without pods are
  removed, and so are reservations no replica's pod uses. ``nodes`` is the node inventory (``kube/inventory.py``).
- With an ``agent_url`` (``capabilities.inplace_restarts``) a torchrun job's pods run Tide's agent and resize in place
  (``scheduler.elastic.inplace``): ``put_agent_token`` writes the job's token into its Secret
  (``kube/agent_secrets.py``), removed with its Service.
All API calls go through ``kube/retry.Retrier`` (backoff on 5xx, 429, conflicts, timeouts). The executor
connects lazily, at the first call, so building it opens nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from scheduler.core.model import Node
from scheduler.executors.base import (
    Announcement,
    Capabilities,
    ExecutorError,
    LaunchDeferred,
    LaunchSpec,
    Observation,
)
from scheduler.executors.kube import names, podspec, refusals, tenancy
from scheduler.executors.kube.agent_secrets import AgentSecrets
from scheduler.executors.kube.config import Connection, KubeSettings, connect
from scheduler.executors.kube.events import EventPoster, event_body
from scheduler.executors.kube.inventory import Inventory
from scheduler.executors.kube.logs import PodLogs
from scheduler.executors.kube.reflector import Reflector
from scheduler.executors.kube.reservations import DEFAULT_IMAGE, GpuReservations
from scheduler.executors.kube.retry import KubeApiError, Retrier, describe, is_already_exists
from scheduler.executors.kube.status import PodView, ReplicaRecord, identity

log = logging.getLogger(__name__)
Obj = dict[str, Any]
MAX_EVENTS_PER_DECISION = 16  # Events posted for one decision: a big job's pods beyond these get none
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
        self.logs = PodLogs(self._core, self._timeout, data_dir)
        self._grace = grace_period
        self._connection = connection
        self._replicas: dict[int, ReplicaRecord] = {}
        self._forgotten: set[str] = set()  # uids of pods whose replica was forgotten
        self._owners: dict[tuple[str, str], Obj] = {}  # each job's Service, as the API answered it
        self._lock = threading.RLock()
        self._start_lock = threading.Lock()
        self.inventory = Inventory("nvidia.com/gpu", podspec.DEFAULT_TOLERATIONS, settings.topology_key)
        self.secrets = AgentSecrets(self._core, self._timeout, self.retrier, self._to_dict)
        self.reservations = GpuReservations(
            self._core,
            self._timeout,
            self.retrier,
            self._to_dict,
            lambda name, namespace: self.logs.read(name, namespace, 20),
            image=settings.gpu_reservation_image or DEFAULT_IMAGE,
        )
        self.events = EventPoster(self._post_event)
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
        return Capabilities(inplace_restarts=self.settings.agent_url is not None, announcements=True)

    @property
    def connection(self) -> Connection:
        if self._connection is None:
            self._connection = connect(self.settings)
        return self._connection

    @property
    def namespace(self) -> str:
        return self.connection.namespace

    def namespace_of(self, project: str) -> str:
        """Where ``project``'s jobs run: ``tide-<project>`` with namespaces per project, else the jobs namespace."""
        if self.settings.namespace_per_project:
            return tenancy.project_namespace(project)
        return self.namespace

    def _is_own(self, namespace: str, project: str | None) -> bool:
        """Whether a managed pod in ``namespace`` of ``project`` is this Tide's (not another Tide's)."""
        if project is None:
            return False
        return namespace == self.namespace_of(project)

    @property
    def options(self) -> podspec.PodOptions:
        return self.options_for(None)

    def options_for(self, project: str | None) -> podspec.PodOptions:
        return podspec.PodOptions(
            namespace=self.namespace if project is None else self.namespace_of(project),
            default_image=self.settings.default_image,
            grace_period=self._grace,
            checkpoint_claim=self.settings.checkpoint_claim,
            agent_url=self.settings.agent_url,
            cpu_per_gpu=self.settings.pod_cpu_per_gpu or podspec.DEFAULT_CPU_PER_GPU,
            memory_per_gpu=self.settings.pod_memory_per_gpu or podspec.DEFAULT_MEMORY_PER_GPU,
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
            every = self.settings.namespace_per_project
            pod_watch = Reflector(
                "Tide's pods in all namespaces" if every else f"pods in {self.namespace}",
                core.list_pod_for_all_namespaces if every else core.list_namespaced_pod,
                () if every else (self.namespace,),
                on_list=self._on_pod_list,
                on_event=self._on_pod_event,
                selector=names.MANAGED_SELECTOR,
                **common,  # type: ignore[arg-type]
            )
            if self.settings.node_selector is None:
                log.warning(NO_POOL)
            node_watch.start()
            self.inventory.is_own = self._is_own
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
        self.events.close()
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
        meta = obj["metadata"]
        if not self._is_own(meta.get("namespace") or "", (meta.get("labels") or {}).get(names.PROJECT)):
            return None  # another Tide's, in a namespace that is not where this Tide puts the project
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

    def _own_pod(self, obj: Obj) -> bool:
        meta = obj["metadata"]
        return self._is_own(meta.get("namespace") or "", (meta.get("labels") or {}).get(names.PROJECT))

    def _on_pod_list(self, items: list[Obj]) -> None:
        self.reservations.listed([o for o in items if self._own_pod(o)])  # never another Tide's reservations
        with self._lock:
            seen = {r.view.uid for r in (self._track(o) for o in items) if r is not None}
            for record in self._replicas.values():
                if record.view.uid not in seen:
                    record.gone = True
            self._forgotten &= {str(o["metadata"].get("uid")) for o in items}

    def _on_pod_event(self, kind: str, obj: Obj) -> None:
        if self._own_pod(obj) and self.reservations.fold(kind, obj):
            return
        with self._lock:
            if kind == "DELETED":
                self._forgotten.discard(str(obj["metadata"].get("uid")))
            record = self._track(obj)
            if record is not None and kind == "DELETED":
                record.gone = True
                if not record.stop_requested:  # deleted behind Tide's back: perhaps with its Service (the
                    # garbage collector); the next pod of the job makes sure the owner it names exists
                    self._owners.pop((record.project, record.job), None)

    # the Executor protocol --------------------------------------------------------------------------
    def nodes(self) -> tuple[Node, ...]:
        self._ensure_started()
        return self.inventory.nodes()

    def adopt(self) -> None:
        """Pods were listed when the watches started; remove the Services, NetworkPolicies (and agents'
        Secrets) of jobs that have no pod left: in the jobs namespace, or with namespaces per project in
        those of the projects that have pods (elsewhere Kubernetes' garbage collector removes what a
        deleted Service owned)."""
        self._ensure_started()
        with self._lock:
            jobs = {(r.project, r.job) for r in self._replicas.values()}
        spaces = (
            sorted({self.namespace_of(project) for project, _ in jobs})
            if self.settings.namespace_per_project
            else [self.namespace]
        )
        log.info("adopted %d pods in namespaces %s", len(self._replicas), ", ".join(spaces) or "(none)")
        for namespace in spaces:
            self._remove_orphans(namespace, jobs)
        self.reservations.sweep(self._reservations_in_use(), idle=0)

    def _remove_orphans(self, namespace: str, jobs: set[tuple[str, str]]) -> None:
        def orphans(answer: Any) -> list[str]:
            found = []
            for item in self._to_dict(answer).get("items") or []:
                labels = item["metadata"].get("labels") or {}
                if (labels.get(names.PROJECT), labels.get(names.JOB)) not in jobs:
                    found.append(item["metadata"]["name"])
            return found

        services = self.retrier.call(
            "list services",
            lambda: self._core().list_namespaced_service(
                namespace, label_selector=names.MANAGED_SELECTOR, _request_timeout=self._timeout()
            ),
        )
        for name in orphans(services):
            self._delete_service(name, namespace)
        policies = self.retrier.call(
            "list network policies",
            lambda: self._networking().list_namespaced_network_policy(
                namespace, label_selector=names.MANAGED_SELECTOR, _request_timeout=self._timeout()
            ),
        )
        for name in orphans(policies):
            self._delete_policy(name, namespace)
        if self.capabilities.inplace_restarts:
            self.secrets.remove_orphans(jobs, namespace)

    def put_agent_token(self, project: str, job: str, token: str) -> None:
        """The job's Secret holds ``token``: made now, or replaced (a job of the same name may have left one).
        Owned by the job's Service when it exists already."""
        body = podspec.secret_body(project, job, token, self.options_for(project))
        try:
            owner: Obj | None = self._ensure_owner(project, job, None)
        except (ApiException, ExecutorError) as error:  # the pods' start will say why; the Secret goes on
            log.info("the Secret of %s/%s has no owner: %s", project, job, error)
            owner = None
        self.secrets.put(tenancy.owned(body, owner))

    def announce(self, announcement: Announcement) -> None:
        """An Event on each of the job's pods the decision concerns (all of them when it names none); a pod
        already gone still gets it (``kubectl get events`` shows it)."""
        with self._lock:
            pods = [
                r.view
                for r in self._replicas.values()
                if (r.project, r.job) == (announcement.project, announcement.job)
            ]
            records = {r.view.uid: r for r in self._replicas.values()}
        chosen = [p for p in pods if records[p.uid].index in announcement.replicas] or pods
        now = time.time()
        for view in chosen[:MAX_EVENTS_PER_DECISION]:
            metadata = {
                "name": view.name,
                "namespace": self.namespace_of(announcement.project),
                "uid": view.uid,
            }
            self.events.post(event_body({"metadata": metadata}, announcement, now))

    def _post_event(self, body: Obj) -> None:
        namespace = body["metadata"]["namespace"]
        self._core().create_namespaced_event(
            namespace, client.CoreV1Event.model_validate(body), _request_timeout=self._timeout()
        )

    def observe(self) -> dict[int, Observation]:
        self._ensure_started()
        self.reservations.sweep(self._reservations_in_use())
        self._stop_unreserved()
        with self._lock:
            records = list(self._replicas.items())
        return {rid: self._held(record) for rid, record in records}

    def _reservations_in_use(self) -> set[tuple[str, str]]:
        """(namespace, name) of the reservations whose fractional replicas' pods have not ended."""
        with self._lock:
            return {
                (self.namespace_of(r.project), r.view.reservation)
                for r in self._replicas.values()
                if r.view.reservation is not None and not r.gone and r.view.exit_code is None
            }

    def _stop_unreserved(self) -> None:
        """A fraction whose GPU's reservation pod was deleted or ended outside Tide runs on a GPU the device
        plugin may give another pod: stop it, as KAI-Scheduler does, saying why (its job ends with that)."""
        with self._lock:
            lost = [
                (rid, record)
                for rid, record in self._replicas.items()
                if record.view.reservation is not None
                and record.unreserved is None
                and not record.stop_requested
                and not record.gone
                and record.view.exit_code is None
                and not self.reservations.holds(record.view.reservation, self.namespace_of(record.project))
            ]
            for _, record in lost:
                record.unreserved = (
                    f"pod {record.view.name}: the pod reserving its GPU, {record.view.reservation}, was "
                    "deleted or ended outside Tide, so the GPU was no longer held for it"
                )
        for rid, record in lost:
            log.warning("%s: stopping it", record.unreserved)
            self.stop(rid, self._grace)

    def _held(self, record: ReplicaRecord) -> Observation:
        """The replica's observation; a fraction that ended is still stopping while its reservation pod
        (deleted by ``observe``, unused now) exists: until then its GPU is not free."""
        seen = record.observation()
        reservation = record.view.reservation
        if seen.running or reservation is None:
            return seen
        if not self.reservations.lingers(reservation, self.namespace_of(record.project)):
            return seen
        return dataclasses.replace(seen, running=True, stopping=True, exit_code=None, detail=None)

    def start(self, spec: LaunchSpec) -> Observation:
        self._ensure_started()
        name = names.pod_name(spec.project, spec.job, spec.index, spec.replica_id)
        with self._lock:
            known = self._replicas.get(spec.replica_id)
            if known is not None and not known.gone:
                if known.view.name != name:
                    raise ExecutorError(
                        f"pod {known.view.name} in namespace {self.namespace_of(spec.project)} claims "
                        f"replica id {spec.replica_id}: it belongs to another Tide (one Tide per jobs namespace)"
                    )
                return known.observation()  # its pod exists: never a second one
            self._replicas.pop(spec.replica_id, None)
        self.backoff.check(spec.replica_id)
        shared = None
        if (
            spec.gpu_share is not None
        ):  # R20: the GPU's reservation pod first (LaunchDeferred until it is ready)
            namespace = self.namespace_of(spec.project)
            shared = self.reservations.device_for(spec.node, spec.gpu_ids[0], spec.project, namespace)
        try:
            body = podspec.pod_body(spec, self.options_for(spec.project), grace=spec.grace, shared=shared)
            client.V1Pod.model_validate(
                body
            )  # a pod template the Pod schema refuses (pydantic: a ValueError)
        except ValueError as error:
            raise ExecutorError(podspec.refusal(error)) from error
        owner = self._ensure_owner(spec.project, spec.job, spec.replica_id)
        try:
            obj = self._create_pod(tenancy.owned(body, owner), spec.replica_id)
        except ExecutorError as error:  # refused (for good, or for now): said on the job's Service too
            refusal = Announcement("refused", spec.project, spec.job, (spec.index,), str(error))
            self.events.post(event_body(owner, refusal, time.time()))
            raise
        self.backoff.clear(spec.replica_id)
        if shared is not None:
            self.reservations.used((self.namespace_of(spec.project), shared[0]))
        with self._lock:
            record = self._replicas.get(spec.replica_id)
            if record is None or record.view.uid != obj["metadata"].get("uid"):
                record = self._track(obj)  # the watch has not shown it yet; it will never be older
            if record is None:
                raise ExecutorError(f"pod {name} was made but another pod claims replica {spec.replica_id}")
            return record.observation()

    def _create_pod(self, body: Obj, replica_id: int) -> Obj:
        name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
        core = self._core()
        try:
            created = self.retrier.call(
                f"create pod {name}",
                lambda: core.create_namespaced_pod(
                    namespace, client.V1Pod.model_validate(body), _request_timeout=self._timeout()
                ),
            )
            return dict(self._to_dict(created))
        except ApiException as error:
            if is_already_exists(error):
                return self._adopt_existing(name, namespace, replica_id)
            raise self._refused(error, f"pod {name}", replica_id) from error

    def _refused(self, error: ApiException, what: str, replica_id: int | None) -> Exception:
        """The error for a create the API refused (``kube/refusals.py``); a deferral starts its backoff."""
        judged = refusals.judge(error, what)
        if isinstance(judged, LaunchDeferred) and replica_id is not None:
            return self.backoff.defer(replica_id, judged)
        return judged

    def _adopt_existing(self, name: str, namespace: str, replica_id: int) -> Obj:
        found = self.retrier.call(
            f"read pod {name}",
            lambda: self._core().read_namespaced_pod(name, namespace, _request_timeout=self._timeout()),
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
            name, namespace = record.view.name, self.namespace_of(record.project)
        self._save_log(record)
        seconds = podspec.grace_seconds(grace)
        try:
            answer = self.retrier.call(
                f"delete pod {name}",
                lambda: self._core().delete_namespaced_pod(
                    name, namespace, grace_period_seconds=seconds, _request_timeout=self._timeout()
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
        namespace = self.namespace_of(record.project)
        if not record.gone:
            if not record.stop_requested:
                self._save_log(record)
            self._delete_pod_now(record.view.name, namespace)
        if not others:
            self._owners.pop((record.project, record.job), None)
            name = names.service_name(record.project, record.job)
            self._delete_policy(name, namespace)
            self._delete_service(name, namespace)
            if self.capabilities.inplace_restarts:
                self.secrets.delete(name, namespace)

    def read_log(self, project: str, job: str, index: int, tail: int | None = None) -> str | None:
        with self._lock:
            live = [
                r
                for r in self._replicas.values()
                if (r.project, r.job, r.index) == (project, job, index) and not r.gone
            ]
        if live:
            newest = max(live, key=lambda r: r.view.replica_id)
            text = self.logs.read(newest.view.name, self.namespace_of(project), tail)
            if text is not None:
                return text
        elif self.pod_watch is None:  # a standby follows no pods: it finds the replica's pod by its labels
            text = self.logs.read_replica(project, job, index, tail, namespace=self.namespace_of(project))
            if text is not None:
                return text
        return self.logs.saved(project, job, index, tail)

    # helpers ----------------------------------------------------------------------------------------
    def _networking(self) -> client.NetworkingV1Api:
        return client.NetworkingV1Api(self.connection.api_client)

    def _ensure_owner(self, project: str, job: str, replica_id: int | None) -> Obj:
        """The job's headless Service (made, or read when it exists) and its NetworkPolicy, owned by it."""
        known = self._owners.get((project, job))
        if known is not None:
            return known
        body = podspec.service_body(project, job, self.options_for(project))
        name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
        try:
            answer = self.retrier.call(
                f"create service {name}",
                lambda: self._core().create_namespaced_service(
                    namespace, client.V1Service.model_validate(body), _request_timeout=self._timeout()
                ),
            )
        except ApiException as error:
            if not is_already_exists(error):
                raise self._refused(error, f"service {name}", replica_id) from error
            answer = self.retrier.call(
                f"read service {name}",
                lambda: self._core().read_namespaced_service(
                    name, namespace, _request_timeout=self._timeout()
                ),
            )
        owner: Obj = dict(self._to_dict(answer))
        owner.setdefault("apiVersion", "v1")
        owner.setdefault("kind", "Service")
        policy = tenancy.owned(tenancy.network_policy_body(project, job, namespace), owner)
        try:
            self.retrier.call(
                f"create network policy {name}",
                lambda: self._networking().create_namespaced_network_policy(
                    namespace, client.V1NetworkPolicy.model_validate(policy), _request_timeout=self._timeout()
                ),
            )
        except ApiException as error:
            if not is_already_exists(error):
                raise self._refused(error, f"network policy {name}", replica_id) from error
        self._owners[(project, job)] = owner
        return owner

    def _delete_pod_now(self, name: str, namespace: str) -> None:
        self._delete(
            f"delete pod {name}",
            lambda: self._core().delete_namespaced_pod(
                name, namespace, grace_period_seconds=0, _request_timeout=self._timeout()
            ),
        )

    def _delete_service(self, name: str, namespace: str) -> None:
        self._delete(
            f"delete service {name}",
            lambda: self._core().delete_namespaced_service(name, namespace, _request_timeout=self._timeout()),
        )

    def _delete_policy(self, name: str, namespace: str) -> None:
        self._delete(
            f"delete network policy {name}",
            lambda: self._networking().delete_namespaced_network_policy(
                name, namespace, _request_timeout=self._timeout()
            ),
        )

    def _save_log(self, record: ReplicaRecord) -> None:
        namespace = self.namespace_of(record.project)
        self.logs.save(
            record.project,
            record.job,
            record.index,
            record.view.name,
            namespace=namespace,
            node=record.view.node,
        )

    def _delete(self, what: str, call: Any) -> None:
        try:
            self.retrier.call(what, call)
        except ApiException as error:
            if error.status != 404:
                raise KubeApiError(f"{what}: {describe(error)}") from error
