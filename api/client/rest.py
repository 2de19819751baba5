"""A typed HTTP client of the Tide API, used by the CLI and the tests.

Contract: methods map one to one onto endpoints and return ``api.client.client_types`` answers (plain dataclasses
with the fields of ``api.server.schemas``' models); a non-2xx answer raises ``TideAPIError`` carrying the status
and the server's message (and a 422's problems one by one, each with the field it names); a 2xx answer that is not what the API documents raises ``ValueError``. Bodies
are plain mappings (the JSON the API documents). Pass ``http`` to reuse a client (e.g. one
over ``api.server.testing.ASGIBridge``); otherwise one is built for ``base_url`` (``ca``: a PEM CA bundle that
signed an https server's certificate, instead of the system's), which may be the server's root
or its API root as ``tide serve`` prints it (``.../api/v1``, see ``api.shared.paths.api_root``).

Light on purpose: the CLI imports this on every command, so it imports httpx and the standard library and
nothing of the server (no pydantic, FastAPI or SQLAlchemy; an import-linter contract in pyproject.toml
holds it to that).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import httpx

from api.client.client_types import (
    ClusterPublic,
    DepartmentPublic,
    EventPublic,
    Health,
    JobPublic,
    NodePublic,
    ProjectPublic,
    TokenPublic,
    parse,
    parse_list,
)
from api.shared.paths import API_PREFIX, api_root

Answer = TypeVar("Answer")
Body = Mapping[str, Any]
WALK_PAGE = 5_000  # jobs a page when walking every page (the server takes at most 10,000)


@dataclass(frozen=True, slots=True)
class JobPage:
    """A page of jobs; how many match the filters in all; where the next page starts (None: this is the last)."""

    jobs: list[JobPublic]
    total: int
    next_cursor: str | None


class TideAPIError(Exception):
    """The server answered with an error; ``detail`` is its message, ``errors`` a 422's problems one by one
    (each with its ``loc`` and ``msg``, as the API sends them; empty for other errors)."""

    def __init__(self, status_code: int, detail: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(f"{status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail
        self.errors = errors or []


def warning_text(header: str) -> str:
    """The text of a ``Warning: 299 AGENT "TEXT"`` header (as Tide and Kubernetes send them)."""
    code, _, rest = header.partition(" ")
    _, _, quoted = rest.partition(" ")
    if not (code.isdigit() and len(quoted) >= 2 and quoted[0] == quoted[-1] == '"'):
        return header
    text, escaped = [], False
    for ch in quoted[1:-1]:
        if escaped or ch != "\\":
            text.append(ch)
        escaped = not escaped and ch == "\\"
    return "".join(text)


def _error(response: httpx.Response) -> TideAPIError:
    try:
        answer = response.json()
        detail = str(answer.get("detail", response.text))
    except (ValueError, AttributeError):
        return TideAPIError(response.status_code, response.text)
    errors = answer.get("errors")
    listed = [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []
    return TideAPIError(response.status_code, detail, listed)


class TideClient:
    """Synchronous client; ``with TideClient(...) as c:`` closes its connections."""

    def __init__(
        self,
        base_url: str = "",
        token: str | None = None,
        *,
        http: httpx.Client | None = None,
        timeout: float = 30,
        ca: str | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._owned = http is None
        root = api_root(base_url)
        # a plain-http service needs no certificates: loading the CA bundle cost every CLI command ~25 ms
        # (the client only ever requests paths under ``root``, and follows no redirects)
        verify: bool | ssl.SSLContext = not root.lower().startswith("http://")
        if ca is not None and verify:  # an https service whose certificate this CA bundle signed
            verify = ssl.create_default_context(cafile=ca)
        self.http = http or httpx.Client(base_url=root, timeout=timeout, verify=verify)
        self.headers = headers
        self.prefix = API_PREFIX

    def __enter__(self) -> TideClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        kwargs.setdefault("headers", self.headers)
        response = self.http.request(method, self.prefix + path, **kwargs)
        if response.status_code >= 400:
            raise _error(response)
        return response

    def _get(self, answer: type[Answer], path: str, **kwargs: Any) -> Answer:
        return parse(answer, self.request("GET", path, **kwargs).json())

    def _list(self, answer: type[Answer], path: str, **kwargs: Any) -> list[Answer]:
        return parse_list(answer, self.request("GET", path, **kwargs).json())

    def _send(self, answer: type[Answer], method: str, path: str, body: Body) -> Answer:
        return parse(answer, self.request(method, path, json=dict(body)).json())

    # projects and departments
    def create_project(self, body: Body) -> ProjectPublic:
        return self._send(ProjectPublic, "POST", "/projects", body)

    def projects(self) -> list[ProjectPublic]:
        return self._list(ProjectPublic, "/projects")

    def project(self, name: str) -> ProjectPublic:
        return self._get(ProjectPublic, f"/projects/{name}")

    def update_project(self, name: str, body: Body) -> ProjectPublic:
        return self._send(ProjectPublic, "PATCH", f"/projects/{name}", body)

    def delete_project(self, name: str) -> None:
        self.request("DELETE", f"/projects/{name}")

    def create_department(self, body: Body) -> DepartmentPublic:
        return self._send(DepartmentPublic, "POST", "/departments", body)

    def departments(self) -> list[DepartmentPublic]:
        return self._list(DepartmentPublic, "/departments")

    def department(self, name: str) -> DepartmentPublic:
        return self._get(DepartmentPublic, f"/departments/{name}")

    def update_department(self, name: str, body: Body) -> DepartmentPublic:
        return self._send(DepartmentPublic, "PATCH", f"/departments/{name}", body)

    def delete_department(self, name: str) -> None:
        self.request("DELETE", f"/departments/{name}")

    # jobs
    def submit(self, project: str, body: Body) -> JobPublic:
        return self.submit_warned(project, body)[0]

    def submit_warned(self, project: str, body: Body) -> tuple[JobPublic, list[str]]:
        """Submit a job; the job and the server's warnings (say, it does not fit today's cluster)."""
        response = self.request("POST", f"/projects/{project}/jobs", json=dict(body))
        return parse(JobPublic, response.json()), [
            warning_text(v) for v in response.headers.get_list("warning")
        ]

    def submit_manifest(
        self, project: str, manifest: str | bytes, *, gpu_fraction: float | None = None
    ) -> tuple[JobPublic, list[str]]:
        """Submit a Kubeflow PyTorchJob manifest (YAML or JSON); the job and the server's warnings.
        ``gpu_fraction``: each replica takes that share of one GPU instead of its ``nvidia.com/gpu`` limit."""
        query = "" if gpu_fraction is None else f"?gpu_fraction={gpu_fraction!r}"
        response = self.request(
            "POST",
            f"/projects/{project}/pytorchjobs{query}",
            content=manifest.encode() if isinstance(manifest, str) else manifest,
            headers=self.headers | {"Content-Type": "application/yaml"},
        )
        return parse(JobPublic, response.json()), [
            warning_text(v) for v in response.headers.get_list("warning")
        ]

    def job(self, project: str, name: str) -> JobPublic:
        return self._get(JobPublic, f"/projects/{project}/jobs/{name}")

    def jobs(self, project: str | None = None, status: str | Sequence[str] | None = None) -> list[JobPublic]:
        """Every job that passes the filters (by project, then age), walking the server's pages."""
        return self.jobs_page(project, status, limit=None)[0]

    def jobs_page(
        self,
        project: str | None = None,
        status: str | Sequence[str] | None = None,
        *,
        limit: int | None,
        offset: int = 0,
    ) -> tuple[list[JobPublic], int]:
        """At most ``limit`` jobs from ``offset`` on (None: all of them, walking the server's pages from
        there) and how many match the filters in all."""
        page = self.job_page(project, status, limit=limit or WALK_PAGE, offset=offset)
        jobs = page.jobs
        while limit is None and page.next_cursor is not None:
            page = self.job_page(project, status, limit=WALK_PAGE, cursor=page.next_cursor)
            jobs += page.jobs
        return jobs, page.total

    def job_page(
        self,
        project: str | None = None,
        status: str | Sequence[str] | None = None,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        offset: int = 0,
        waiting: bool = False,
        order: str | None = None,
    ) -> JobPage:
        """One page of ``GET /jobs``: ``cursor`` is the ``next_cursor`` of the page before (with the same
        filters); ``limit`` None: the server's default page."""
        statuses = [status] if isinstance(status, str) else list(status or ())
        given: list[tuple[str, object]] = [("status", s) for s in statuses]
        given += [("project", project), ("limit", limit), ("cursor", cursor), ("offset", offset or None)]
        given += [("waiting", "true" if waiting else None), ("order", order)]
        response = self.request("GET", "/jobs", params=[(k, v) for k, v in given if v is not None])
        jobs = parse_list(JobPublic, response.json())
        total = int(response.headers.get("x-total-count", len(jobs)))
        return JobPage(jobs, total, response.headers.get("x-next-cursor"))

    def delete_job(self, project: str, name: str) -> JobPublic:
        return self.request_model(JobPublic, "DELETE", f"/projects/{project}/jobs/{name}")

    def checkpointed(self, project: str, name: str, at: datetime | None = None) -> JobPublic:
        """Report that the job completed a checkpoint (now, or at ``at``)."""
        body = {} if at is None else {"at": at.isoformat()}
        return self._send(JobPublic, "POST", f"/projects/{project}/jobs/{name}/checkpointed", body)

    def logs(self, project: str, name: str, replica: int = 0, tail: int | None = None) -> str:
        params: dict[str, int] = {"replica": replica} | ({"tail": tail} if tail is not None else {})
        return self.request("GET", f"/projects/{project}/jobs/{name}/logs", params=params).text

    # cluster, events, tokens, health
    def cluster(self) -> ClusterPublic:
        return self._get(ClusterPublic, "/cluster")

    def events(
        self,
        *,
        since: float | None = None,
        after_id: int | None = None,
        project: str | None = None,
        job: str | None = None,
        limit: int | None = None,
    ) -> list[EventPublic]:
        params = {"since": since, "after_id": after_id, "project": project, "job": job, "limit": limit}
        return self._list(EventPublic, "/events", params={k: v for k, v in params.items() if v is not None})

    def nodes(self) -> list[NodePublic]:
        return self._list(NodePublic, "/nodes")

    def node(self, name: str) -> NodePublic:
        return self._get(NodePublic, f"/nodes/{name}")

    def set_node(self, name: str, action: str, grace: float | None = None) -> NodePublic:
        """``action``: cordon, uncordon, drain (with ``grace`` seconds) or fail (fault injection)."""
        body = {"grace_seconds": grace} if action == "drain" and grace is not None else None
        return parse(NodePublic, self.request("POST", f"/nodes/{name}/{action}", json=body).json())

    def create_token(self, project: str, name: str = "default") -> TokenPublic:
        return self._send(TokenPublic, "POST", f"/projects/{project}/tokens", {"name": name})

    def tokens(self, project: str) -> list[TokenPublic]:
        return self._list(TokenPublic, f"/projects/{project}/tokens")

    def delete_token(self, project: str, token_id: int) -> None:
        """Revoke a project token: requests with it are refused (401) from then on."""
        self.request("DELETE", f"/projects/{project}/tokens/{token_id}")

    def health(self) -> Health:
        return self._get(Health, "/healthz")

    def request_model(self, answer: type[Answer], method: str, path: str) -> Answer:
        return parse(answer, self.request(method, path).json())
