"""A typed HTTP client of the Tide API, used by the CLI and the tests.

Contract: methods map one to one onto endpoints and return ``api.schemas`` models; a non-2xx answer raises
``TideAPIError`` carrying the status and the server's message. Pass ``http`` to reuse a client (e.g.
Starlette's ``TestClient``); otherwise one is built for ``base_url``. ``local_server()`` finds the URL and
admin token of a ``tide serve`` on this machine from its data directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter

from api import schemas
from api.auth import ADMIN_TOKEN_FILE
from api.settings import default_data_dir

Model = TypeVar("Model", bound=BaseModel)


class TideAPIError(Exception):
    """The server answered with an error; ``detail`` is its message."""

    def __init__(self, status_code: int, detail: str) -> None:
        super().__init__(f"{status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail


def local_server(data_dir: Path | None = None) -> tuple[str, str | None]:
    """(url, admin token) of the local server, from ``DATA/server.json`` and ``DATA/admin-token``."""
    data_dir = data_dir or default_data_dir()
    url = "http://127.0.0.1:8000"
    with_server = data_dir / "server.json"
    if with_server.is_file():
        url = str(json.loads(with_server.read_text()).get("url", url))
    token_file = data_dir / ADMIN_TOKEN_FILE
    token = token_file.read_text().strip() if token_file.is_file() else None
    return url, token


class TideClient:
    """Synchronous client; ``with TideClient(...) as c:`` closes its connections."""

    def __init__(
        self,
        base_url: str = "",
        token: str | None = None,
        *,
        http: httpx.Client | None = None,
        timeout: float = 30,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._owned = http is None
        self.http = http or httpx.Client(base_url=base_url, timeout=timeout)
        self.headers = headers
        self.prefix = "/api/v1"

    def __enter__(self) -> TideClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = self.http.request(method, self.prefix + path, headers=self.headers, **kwargs)
        if response.status_code >= 400:
            try:
                detail = str(response.json().get("detail", response.text))
            except (ValueError, AttributeError):
                detail = response.text
            raise TideAPIError(response.status_code, detail)
        return response

    def _get(self, model: type[Model], path: str, **kwargs: Any) -> Model:
        return model.model_validate(self.request("GET", path, **kwargs).json())

    def _list(self, model: type[Model], path: str, **kwargs: Any) -> list[Model]:
        return TypeAdapter(list[model]).validate_python(self.request("GET", path, **kwargs).json())  # type: ignore[valid-type]

    def _send(self, model: type[Model], method: str, path: str, body: BaseModel | dict[str, Any]) -> Model:
        payload = body.model_dump(exclude_unset=True) if isinstance(body, BaseModel) else body
        return model.model_validate(self.request(method, path, json=payload).json())

    # projects and departments
    def create_project(self, body: schemas.ProjectCreate | dict[str, Any]) -> schemas.ProjectPublic:
        return self._send(schemas.ProjectPublic, "POST", "/projects", body)

    def projects(self) -> list[schemas.ProjectPublic]:
        return self._list(schemas.ProjectPublic, "/projects")

    def project(self, name: str) -> schemas.ProjectPublic:
        return self._get(schemas.ProjectPublic, f"/projects/{name}")

    def update_project(
        self, name: str, body: schemas.ProjectUpdate | dict[str, Any]
    ) -> schemas.ProjectPublic:
        return self._send(schemas.ProjectPublic, "PATCH", f"/projects/{name}", body)

    def delete_project(self, name: str) -> None:
        self.request("DELETE", f"/projects/{name}")

    def create_department(self, body: schemas.DepartmentCreate | dict[str, Any]) -> schemas.DepartmentPublic:
        return self._send(schemas.DepartmentPublic, "POST", "/departments", body)

    def departments(self) -> list[schemas.DepartmentPublic]:
        return self._list(schemas.DepartmentPublic, "/departments")

    def department(self, name: str) -> schemas.DepartmentPublic:
        return self._get(schemas.DepartmentPublic, f"/departments/{name}")

    def update_department(
        self, name: str, body: schemas.DepartmentUpdate | dict[str, Any]
    ) -> schemas.DepartmentPublic:
        return self._send(schemas.DepartmentPublic, "PATCH", f"/departments/{name}", body)

    def delete_department(self, name: str) -> None:
        self.request("DELETE", f"/departments/{name}")

    # jobs
    def submit(self, project: str, body: schemas.JobCreate | dict[str, Any]) -> schemas.JobPublic:
        return self._send(schemas.JobPublic, "POST", f"/projects/{project}/jobs", body)

    def job(self, project: str, name: str) -> schemas.JobPublic:
        return self._get(schemas.JobPublic, f"/projects/{project}/jobs/{name}")

    def jobs(self, project: str | None = None, status: str | None = None) -> list[schemas.JobPublic]:
        params = {k: v for k, v in (("project", project), ("status", status)) if v is not None}
        return self._list(schemas.JobPublic, "/jobs", params=params)

    def delete_job(self, project: str, name: str) -> schemas.JobPublic:
        return self.request_model(schemas.JobPublic, "DELETE", f"/projects/{project}/jobs/{name}")

    def logs(self, project: str, name: str, replica: int = 0, tail: int | None = None) -> str:
        params: dict[str, int] = {"replica": replica} | ({"tail": tail} if tail is not None else {})
        return self.request("GET", f"/projects/{project}/jobs/{name}/logs", params=params).text

    # cluster, events, tokens, health
    def cluster(self) -> schemas.ClusterPublic:
        return self._get(schemas.ClusterPublic, "/cluster")

    def events(
        self,
        *,
        since: float | None = None,
        after_id: int | None = None,
        project: str | None = None,
        job: str | None = None,
        limit: int | None = None,
    ) -> list[schemas.EventPublic]:
        params = {"since": since, "after_id": after_id, "project": project, "job": job, "limit": limit}
        return self._list(
            schemas.EventPublic, "/events", params={k: v for k, v in params.items() if v is not None}
        )

    def nodes(self) -> list[schemas.NodePublic]:
        return self._list(schemas.NodePublic, "/nodes")

    def node(self, name: str) -> schemas.NodePublic:
        return self._get(schemas.NodePublic, f"/nodes/{name}")

    def set_node(self, name: str, action: str, grace: float | None = None) -> schemas.NodePublic:
        """``action``: cordon, uncordon, drain (with ``grace`` seconds) or fail (fault injection)."""
        body = {"grace_seconds": grace} if action == "drain" and grace is not None else None
        return schemas.NodePublic.model_validate(
            self.request("POST", f"/nodes/{name}/{action}", json=body).json()
        )

    def create_token(self, project: str, name: str = "default") -> schemas.TokenPublic:
        return self._send(schemas.TokenPublic, "POST", f"/projects/{project}/tokens", {"name": name})

    def tokens(self, project: str) -> list[schemas.TokenPublic]:
        return self._list(schemas.TokenPublic, f"/projects/{project}/tokens")

    def health(self) -> schemas.Health:
        return self._get(schemas.Health, "/healthz")

    def request_model(self, model: type[Model], method: str, path: str) -> Model:
        return model.model_validate(self.request(method, path).json())
