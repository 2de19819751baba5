"""How a job pod's agent talks to the service: its settings, one poll, and the launch environment.

Contract: ``settings_from(env, argv)`` reads the agent's settings from the pod's environment (set by the
Kubernetes executor: ``TIDE_AGENT_URL``, ``TIDE_AGENT_TOKEN`` from the job's Secret, ``TIDE_PROJECT``,
``TIDE_JOB``, ``TIDE_REPLICA_ID``, ``TIDE_MASTER_ADDR``) and the training command after ``--``; anything
missing or malformed is a ``ValueError`` whose message names the variable to fix. ``Link.poll(report)``
sends one report (``POST /agent/v1/projects/P/jobs/J/replicas/ID``, a long-poll of ``report.wait``
seconds) and returns a ``Reply``: ``launch`` with the order, ``notice`` (pass SIGUSR1 to the launch's
training: a preemption notice), ``wait``, ``gone`` (404: the job is over or the
replica was removed), ``refused`` (401/403/422: a setting is wrong and retrying will not help) or
``unreachable`` (no answer, a 5xx or 429: try again). ``launch_env(order, settings, env)`` is what a launch
adds to the pod's environment so that an unchanged ``torchrun`` runs exactly that launch
(``scheduler.elastic.environment.relaunch_env``: a fixed size, this replica's rank, the master's rendezvous
port and a run id per launch, no restarts of its own; the service counts failures across launches). Never
raises on the network: every failure is a ``Reply``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from scheduler.elastic.agent.progress import Progress
from scheduler.elastic.environment import relaunch_env
from scheduler.elastic.torchrun_argv import uses_torchrun

API_SUFFIX = "/api/v1"
Kind = Literal["launch", "notice", "wait", "gone", "refused", "unreachable"]


@dataclass(frozen=True, slots=True)
class AgentSettings:
    url: str
    token: str
    project: str
    job: str
    replica_id: int
    master_host: str
    command: tuple[str, ...]  # the training command: torchrun ...


@dataclass(frozen=True, slots=True)
class Report:
    generation: int | None
    state: str
    exit_code: int | None
    port: int | None
    wait: float
    checkpointed_at: float | None = None
    noticed: bool = False  # it passed the preemption notice to the launch it runs
    progress: Progress | None = None  # the training speed its script reported (R19)

    def what(self) -> tuple[int | None, str, int | None, bool]:
        """What the service acts on (a newer checkpoint time can wait for the next poll)."""
        return self.generation, self.state, self.exit_code, self.noticed

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "generation": self.generation,
            "state": self.state,
            "exit_code": self.exit_code,
            "port": self.port,
            "wait": self.wait,
            "checkpointed_at": self.checkpointed_at,
        }
        if self.noticed:  # only then: a service that never gives notices need not know the field
            body["noticed"] = True
        if self.progress is not None:  # the same: only when the training reports its speed
            body["progress"] = {
                k: v
                for k, v in (
                    ("samples_per_second", self.progress.samples_per_second),
                    ("steps_per_second", self.progress.steps_per_second),
                    ("world_size", self.progress.world_size),
                )
                if v is not None
            }
        return body


@dataclass(frozen=True, slots=True)
class Order:
    generation: int
    world_size: int
    rank: int
    rdzv_port: int
    run_id: str


@dataclass(frozen=True, slots=True)
class Reply:
    kind: Kind
    order: Order | None = None
    message: str = ""


def _required(env: Mapping[str, str], name: str, what: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ValueError(
            f"{name} is not set: it must hold {what} (the Kubernetes executor sets it in job pods)"
        )
    return value


def settings_from(env: Mapping[str, str], command: Sequence[str], url: str | None = None) -> AgentSettings:
    """The agent's settings, or a ``ValueError`` that says which variable or argument to fix."""
    if not command:
        raise ValueError("give the training command after --, e.g. tide agent -- torchrun train.py")
    if not uses_torchrun(command):
        raise ValueError(
            f"{command[0]!r} is not a torchrun launch: tide agent runs 'torchrun ...' or "
            "'python -m torch.distributed.run ...'"
        )
    base = (url or _required(env, "TIDE_AGENT_URL", "the URL job pods reach the Tide service at")).rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"the service URL {base!r} must start with http:// or https://")
    replica = _required(env, "TIDE_REPLICA_ID", "this pod's replica id")
    if not replica.isdigit() or int(replica) < 1:
        raise ValueError(f"TIDE_REPLICA_ID={replica!r} is not a replica id (a positive integer)")
    return AgentSettings(
        url=base.removesuffix(API_SUFFIX),
        token=_required(env, "TIDE_AGENT_TOKEN", "the job's agent token (from the job's Secret)"),
        project=_required(env, "TIDE_PROJECT", "the job's project"),
        job=_required(env, "TIDE_JOB", "the job's name"),
        replica_id=int(replica),
        master_host=_required(env, "TIDE_MASTER_ADDR", "the host name of the job's master (its Service)"),
        command=tuple(command),
    )


class Link:
    """One agent's connection to the service."""

    def __init__(self, settings: AgentSettings, client: httpx.Client | None = None) -> None:
        self.settings = settings
        self.client = client or httpx.Client(timeout=httpx.Timeout(10.0, connect=5.0))
        s = settings
        self.path = f"{s.url}/agent/v1/projects/{s.project}/jobs/{s.job}/replicas/{s.replica_id}"

    def poll(self, report: Report) -> Reply:
        headers = {"Authorization": f"Bearer {self.settings.token}"}
        try:
            answer = self.client.post(
                self.path, json=report.body(), headers=headers, timeout=report.wait + 10.0
            )
        except httpx.HTTPError as error:
            return Reply("unreachable", message=f"{type(error).__name__}: {error}")
        return _reply(answer)

    def close(self) -> None:
        self.client.close()


def _detail(answer: httpx.Response) -> str:
    try:
        detail = answer.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    return str(detail) if detail else answer.text[:300] or answer.reason_phrase


def _reply(answer: httpx.Response) -> Reply:
    code = answer.status_code
    if code == 404:
        return Reply("gone", message=_detail(answer))
    if code in (401, 403, 422):
        return Reply("refused", message=f"HTTP {code}: {_detail(answer)}")
    if code != 200:
        return Reply("unreachable", message=f"HTTP {code}: {_detail(answer)}")
    try:
        data = answer.json()
        if data.get("action") == "notice":
            return Reply("notice")
        if data.get("action") != "launch":
            return Reply("wait")
        order = Order(
            generation=int(data["generation"]),
            world_size=int(data["world_size"]),
            rank=int(data["rank"]),
            rdzv_port=int(data["rdzv_port"]),
            run_id=str(data["run_id"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        return Reply(
            "unreachable", message=f"an answer this agent cannot read ({error}): {answer.text[:200]}"
        )
    return Reply("launch", order)


def launch_env(order: Order, settings: AgentSettings, env: Mapping[str, str]) -> dict[str, str]:
    """What launch ``order`` sets on top of the pod's environment ``env`` (``environment.relaunch_env``)."""
    return relaunch_env(
        generation=order.generation,
        size=order.world_size,
        rank=order.rank,
        host=settings.master_host,
        port=order.rdzv_port,
        run_id=order.run_id,
        rdzv_conf_now=env.get("PET_RDZV_CONF", ""),
    )
