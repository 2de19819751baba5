"""The Secrets that hold each torchrun job's agent token, in the jobs namespace.

Contract: ``AgentSecrets(core, timeout, retrier, to_dict)`` makes, replaces and deletes them
through the Kubernetes API, every call through the executor's ``Retrier``. ``put(body)`` creates the
Secret (in the namespace its body names), or replaces it when one of that name exists (a job of the same
name left it: its pods would otherwise read a stale token). ``delete(name, namespace)`` ignores a Secret
already gone. ``remove_orphans(jobs, namespace)`` deletes Tide's Secrets there (``app.kubernetes.io/managed-by=tide``) of jobs that have no pod left. An API that
cannot be reached raises ``KubeApiError`` (the cycle is retried), as every other call of the executor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from scheduler.executors.kube import names
from scheduler.executors.kube.retry import KubeApiError, Retrier, describe, is_already_exists


class AgentSecrets:
    """Agent-token Secrets of the jobs' namespaces."""

    def __init__(
        self,
        core: Callable[[], client.CoreV1Api],
        timeout: Callable[[], tuple[float, float]],
        retrier: Retrier,
        to_dict: Callable[[Any], Any],
    ) -> None:
        self._core, self._timeout = core, timeout
        self.retrier, self._to_dict = retrier, to_dict

    def put(self, body: dict[str, Any]) -> None:
        name, namespace, core = body["metadata"]["name"], body["metadata"]["namespace"], self._core()
        secret = client.V1Secret.model_validate(body)
        try:
            self.retrier.call(
                f"create secret {name}",
                lambda: core.create_namespaced_secret(namespace, secret, _request_timeout=self._timeout()),
            )
            return
        except ApiException as error:
            if not is_already_exists(error):
                raise KubeApiError(f"create secret {name}: {describe(error)}") from error
        try:
            self.retrier.call(
                f"replace secret {name}",
                lambda: core.replace_namespaced_secret(
                    name, namespace, secret, _request_timeout=self._timeout()
                ),
            )
        except ApiException as error:
            raise KubeApiError(f"replace secret {name}: {describe(error)}") from error

    def delete(self, name: str, namespace: str) -> None:
        try:
            self.retrier.call(
                f"delete secret {name}",
                lambda: self._core().delete_namespaced_secret(
                    name, namespace, _request_timeout=self._timeout()
                ),
            )
        except ApiException as error:
            if error.status != 404:
                raise KubeApiError(f"delete secret {name}: {describe(error)}") from error

    def remove_orphans(self, jobs: set[tuple[str, str]], namespace: str) -> None:
        answer = self.retrier.call(
            "list secrets",
            lambda: self._core().list_namespaced_secret(
                namespace, label_selector=names.MANAGED_SELECTOR, _request_timeout=self._timeout()
            ),
        )
        for secret in self._to_dict(answer).get("items") or []:
            labels = secret["metadata"].get("labels") or {}
            if (labels.get(names.PROJECT), labels.get(names.JOB)) not in jobs:
                self.delete(secret["metadata"]["name"], namespace)
