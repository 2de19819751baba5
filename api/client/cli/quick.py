"""The quick path: ``tide version`` and ``tide list --json`` answered with the standard library alone.

Contract: ``run(argv)`` returns the exit code when it answered the command line itself, and None when the
full CLI (typer) must: any other command, ``--help``, an option or value it does not know or that typer would
reject, an ``https`` server or a proxy in the environment (httpx's certificates and proxies are the full
CLI's), an answer other than 200, or one that is not a list of jobs. The full CLI then runs the same
command line from the start and says what is wrong in its own words, so the two paths cannot differ in their
errors. What the quick path prints is byte for byte what the full CLI prints (the JSON the server sent,
indented by 2, and the same closing line on stderr for a cut-short list);
tests/integration/test_cli_quick.py runs both on the same command lines against a real server. A server
that cannot be reached gets the full CLI's message and exit code (``target.unreachable``, 4).

Why: these are the commands scripts call in loops and people type all day, and importing typer and httpx
costs more than Python's own start (bench/cli_start.py measures both paths). Standard library only (an
import-linter contract in pyproject.toml holds it to that): ``http.client`` for the requests (one a page of
the server's: ``--limit 0`` walks them all, as the full CLI's client does).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from http.client import HTTPConnection
from typing import TextIO
from urllib.parse import urlencode, urlsplit

from api.client.cli import target
from api.shared.paths import API_PREFIX

LIST_MAX = 10_000  # the most ``--limit`` takes
WALK_PAGE = 5_000  # jobs a page when listing them all (as the full CLI's client)
TIMEOUT_S = 30  # as the full CLI's client
PROXY_VARIABLES = (
    "http_proxy",
    "https_proxy",
    "all_proxy",
)  # httpx reads these (any case) from the environment
# the fields every job answer has, and every replica in it (the required fields of ``api.client.client_types``'
# JobPublic and ReplicaPublic; ``make lint`` checks them: ``api.server.mirrors``)
JOB_FIELDS = (
    "project", "name", "status", "workers", "min_replicas", "max_replicas", "gpus_per_replica", "replicas_now",
    "allocated_gpus", "pending_reason", "queue_position", "restarts", "interactive", "priority", "image",
    "command", "env_names", "message", "created_at", "finished_at", "replicas",
)  # fmt: skip
REPLICA_FIELDS = ("index", "role", "status", "node", "gpus", "gpu_ids", "pid", "started_at", "exit_code")


def _job_status(value: str) -> str | None:
    """``value`` if it names a job status (the statuses are imported only when ``--status`` is given)."""
    from scheduler.statuses import JobStatus  # noqa: PLC0415 - ``version`` and a plain ``list`` skip the enums

    return value if value in tuple(JobStatus) else None


# list's options that take a value: option -> (name, check); a check returns None for a value typer rejects
_LIST_OPTIONS: dict[str, tuple[str, Callable[[str], object]]] = {
    "-p": ("project", str),
    "--project": ("project", str),
    "--status": ("status", _job_status),
    "--limit": ("limit", lambda v: _number(v, LIST_MAX)),
    "--offset": ("offset", lambda v: _number(v, None)),
    "--url": ("url", str),
    "--token": ("token", str),
}


def run(argv: Sequence[str]) -> int | None:
    """The exit code of the command line answered here, or None: the full CLI runs it."""
    if list(argv) == ["version"]:
        from api.shared.version import package_version  # noqa: PLC0415 - ``list`` does not need importlib.metadata

        _write(sys.stdout, f"tide {package_version()}")
        return target.EXIT_OK
    if argv[:1] == ["list"]:
        options = _list_options(argv[1:])
        return None if options is None else _list_json(options)
    return None


def shown(count: int, total: int, offset: int) -> str:
    """The closing line of a list cut short: what it showed, and how to see the rest."""
    where = f" (from {offset + 1:,})" if offset else ""
    more = f", --offset {offset + count} for the next" if offset + count < total else ""
    return f"showing {count:,} of {total:,} jobs{where}; --limit 0 for all{more}"


def _list_options(args: Sequence[str]) -> dict[str, object] | None:
    """``list``'s options when they ask for JSON and are all well formed (the last of a repeated one wins, as
    in typer, but for two different ``--status``, which the full CLI refuses); None otherwise."""
    options: dict[str, object] = {}
    as_json = False
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--json":
            as_json = True
            continue
        option, given, value = arg.partition("=")
        if option not in _LIST_OPTIONS:
            return None
        if not given:
            if not rest or rest[0].startswith("-"):
                return None  # a missing value, or one typer might read otherwise
            value = rest.pop(0)
        name, check = _LIST_OPTIONS[option]
        checked = check(value)
        if checked is None or (name == "status" and options.get(name, checked) != checked):
            return None  # several statuses: the full CLI refuses them
        options[name] = checked
    return options if as_json else None


def _number(value: str, most: int | None) -> int | None:
    try:
        number = int(value)
    except ValueError:
        return None
    return number if number >= 0 and (most is None or number <= most) else None


def _list_json(options: dict[str, object]) -> int | None:
    server = target.resolve(target.text(options.get("url")), target.text(options.get("token")))
    url = urlsplit(server.url)
    if url.scheme != "http" or not url.hostname or url.query or url.fragment or url.username or url.password:
        return None  # https (certificates), odd URLs: the full CLI's
    if any(os.environ.get(v) or os.environ.get(v.upper()) for v in PROXY_VARIABLES):
        return None  # httpx would go through the proxy
    limit, offset = options.get("limit", 0), options.get("offset", 0)
    query: list[tuple[str, object]] = [(k, options[k]) for k in ("project", "status") if k in options]
    query += [("limit", limit or WALK_PAGE)]  # --limit 0: every job, a page at a time
    first = query + ([("offset", offset)] if offset else [])
    path = url.path.rstrip("/") + API_PREFIX + "/jobs"
    headers = {"Accept": "*/*", "User-Agent": "tide-cli"}
    if server.token:
        headers["Authorization"] = f"Bearer {server.token}"
    jobs: list[object] = []
    try:
        connection = HTTPConnection(url.hostname, url.port, timeout=TIMEOUT_S)
        try:
            while True:
                connection.request("GET", f"{path}?{urlencode(first)}", headers=headers)
                response = connection.getresponse()
                status, total, body = response.status, response.getheader("x-total-count"), response.read()
                page = _jobs(body) if status == 200 else None
                if page is None:
                    return None  # an error or an answer that is not Tide's: the full CLI says which
                jobs += page
                after = response.getheader("x-next-cursor")
                if limit or after is None:
                    break
                first = [*query, ("cursor", after)]  # the next page, where this one ended
        finally:
            connection.close()
    except ValueError:
        return None  # a bad port: the full CLI says so
    except OSError as error:  # refused, no such host, timed out
        _write(sys.stderr, f"tide: {target.unreachable(server, error)}")
        return target.EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return 130
    try:
        count = int(total) if total is not None else len(jobs)
    except ValueError:
        return None
    _write(sys.stdout, json.dumps(jobs, indent=2))
    if len(jobs) < count:
        _write(sys.stderr, shown(len(jobs), count, int(str(offset))))
    return target.EXIT_OK


def _jobs(body: bytes) -> list[object] | None:
    """The answer's jobs, if it is a list of job objects with every field a job answer has (and its replicas
    every field of a replica): the shape the full CLI checks. Their values are printed as the server sent
    them, as the full CLI prints them."""
    try:
        jobs = json.loads(body)
    except ValueError:
        return None
    return jobs if isinstance(jobs, list) and all(_has(job, JOB_FIELDS) for job in jobs) else None


def _has(job: object, fields: Sequence[str]) -> bool:
    if not isinstance(job, dict) or any(name not in job for name in fields):
        return False
    replicas = job.get("replicas", [])
    return fields is REPLICA_FIELDS or (
        isinstance(replicas, list) and all(_has(r, REPLICA_FIELDS) for r in replicas)
    )


def _write(stream: TextIO, line: str) -> None:
    stream.write(line + "\n")
    stream.flush()
