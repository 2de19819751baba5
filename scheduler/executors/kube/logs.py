"""Replica logs on Kubernetes: read from the API while the pod exists, saved to disk before it goes.

Contract: ``read(pod, namespace, tail)`` is the pod's log (the last 1 MiB, ``tail`` lines), or None when the API
cannot give it (best effort: the pod may be gone, its node unreachable). ``read_replica(project, job,
index, tail, namespace=)`` finds the replica's newest pod by its labels first: a standby, whose executor follows no
pods, answers ``tide logs`` from the API server as the leader does. ``save(...)`` appends the pod's
log, under a header, to ``DATA/logs/PROJECT/JOB/replica-I.log``, the local executor's layout, so
``tide logs`` answers after the pod is deleted; ``saved(...)`` reads that file. Without a data directory
nothing is saved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from kubernetes import client

from scheduler.executors.kube import names
from scheduler.executors.kube.retry import describe

log = logging.getLogger(__name__)
MAX_LOG_BYTES = 1 << 20


class PodLogs:
    """Pod logs through ``core()``, copies under ``data_dir/logs``."""

    def __init__(
        self,
        core: Callable[[], client.CoreV1Api],
        timeout: Callable[[], tuple[float, float]],
        data_dir: Path | None,
    ) -> None:
        self._core, self._timeout = core, timeout
        self.log_dir = data_dir / "logs" if data_dir is not None else None

    def read(self, pod: str, namespace: str, tail: int | None) -> str | None:
        try:
            text = self._core().read_namespaced_pod_log(
                pod,
                namespace,
                tail_lines=tail,
                limit_bytes=MAX_LOG_BYTES,
                _request_timeout=self._timeout(),
            )
        except Exception as error:  # a log is best effort
            log.info("cannot read the log of pod %s: %s", pod, describe(error))
            return None
        return str(text)

    def read_replica(
        self, project: str, job: str, index: int, tail: int | None, *, namespace: str
    ) -> str | None:
        selector = ",".join(
            f"{k}={v}"
            for k, v in ((names.MANAGED_BY, names.MANAGER), (names.PROJECT, project), (names.JOB, job))
        )
        selector += f",{names.REPLICA}={index}"
        try:
            pods = (
                self._core()
                .list_namespaced_pod(namespace, label_selector=selector, _request_timeout=self._timeout())
                .items
            )
        except Exception as error:  # a log is best effort
            log.info("cannot list the pods of %s/%s: %s", project, job, describe(error))
            return None
        ids = [
            (int((p.metadata.labels or {}).get(names.REPLICA_ID, -1)), str(p.metadata.name))
            for p in pods or []
            if p.metadata is not None
        ]
        return self.read(max(ids)[1], namespace, tail) if ids else None

    def path(self, project: str, job: str, index: int) -> Path | None:
        return None if self.log_dir is None else self.log_dir / project / job / f"replica-{index}.log"

    def save(self, project: str, job: str, index: int, pod: str, *, namespace: str, node: str) -> None:
        path = self.path(project, job, index)
        if path is None:
            return
        text = self.read(pod, namespace, None)
        if text is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as out:
            out.write(f"--- tide: pod {pod} on {node} ---\n{text}")

    def saved(self, project: str, job: str, index: int, tail: int | None) -> str | None:
        path = self.path(project, job, index)
        if path is None or not path.is_file():
            return None
        text = path.read_bytes()[-MAX_LOG_BYTES:].decode("utf-8", errors="replace")
        if tail is not None:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-tail:]) if tail > 0 else ""
        return text
