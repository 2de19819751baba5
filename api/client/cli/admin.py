"""Admin and cluster commands: ``project``, ``department``, ``cluster``, ``events``, ``token create|list|delete``.

Contract: HTTP only (``api.client.cli.context.session``); every read takes ``--json``; tables fit the terminal
(``-o wide``: every column).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import Annotated, Any

import typer

from api.client.cli import context, notice_flag, pod_flag, resize_cost_flag, target
from api.client.cli.context import Column, FitTable
from api.client.cli.eta_words import parse_duration, span
from api.client.cli.flag_words import Typed
from api.client.cli.jobs import Json, Output, Token, Url
from api.client.cli.nodes import node_table
from api.client.client_types import EventPublic, NodePublic, ProjectPublic, TokenPublic

project_app = typer.Typer(help="Projects: quotas, weights, limits.", no_args_is_help=True)
department_app = typer.Typer(help="Departments: parents of projects.", no_args_is_help=True)
token_app = typer.Typer(help="Project tokens.", no_args_is_help=True)

Deserved = Annotated[int | None, typer.Option("--deserved", "-q", help="Guaranteed GPUs (quota).")]
Weight = Annotated[float | None, typer.Option("--weight", help="Over-quota weight.")]
Limit = Annotated[int | None, typer.Option("--limit", help="Hard cap on GPUs.")]
Dept = Annotated[str | None, typer.Option("--department", "-d", help="Parent department.")]
MinRuntime = Annotated[
    str | None,
    typer.Option(
        "--min-runtime",
        help="Minimum runtime: a job started or resized less than this ago is not taken by reclaim for "
        "another project unless that one is below its guarantee. 30s, 10m, 1h or seconds; 0 or off: none.",
    ),
]
INHERIT = "inherit"


def _min_runtime(text: str | None, *, inherit: bool = False) -> float | None:
    """Seconds from ``--min-runtime`` (``0``/``off``: 0); ``None`` when not given, or for ``inherit`` (a
    project's update: back to its department's)."""
    if text is None or (inherit and text.strip().lower() == INHERIT):
        return None
    if text.strip().lower() in ("0", "off", "none"):
        return 0.0
    try:
        return parse_duration(text)
    except ValueError as e:
        context.fail(f"--min-runtime {e}", target.EXIT_BAD_INPUT)


def _flags(
    kind: str,
    *,
    min_runtime: str | None = None,
    notice: str | None = None,
    resize_cost: str | None = None,
    **typed: object,
) -> dict[str, Typed]:
    """Where a project's or department's body fields came from (``kind``: project or department), so that
    the server's refusals name the flags: ``--min-runtime 45d: must be at most 30d``."""
    flags = {
        "name": Typed(f"the {kind} name"),
        "min_runtime_seconds": Typed("--min-runtime", min_runtime, seconds=True),
        "preemption_notice_seconds": Typed("--preemption-notice", notice, seconds=True),
        "resize_cost_seconds": Typed("--resize-cost", resize_cost, seconds=True),
    }
    for key, value in typed.items():
        flags[FIELDS.get(key, key)] = Typed(f"--{key}", None if value is None else str(value))
    return flags


def _runtime_words(seconds: float | None) -> str:
    return "-" if not seconds else span(seconds)


FIELDS = {"weight": "over_quota_weight", "limit": "limit_gpus", "deserved": "deserved_gpus"}  # flag -> field


def _body(**values: object) -> dict[str, object]:
    return {FIELDS.get(key, key): value for key, value in values.items() if value is not None}


def _projects_table(projects: list[ProjectPublic], wide: bool = False) -> FitTable:
    # fair share over time: the weight the last cycle used and the usage that lowered it, once there is usage
    usage = any(p.usage_gpu_hours > 0 for p in projects)
    # minimum runtime (its own or its department's), once any project has one
    runtime = any(p.effective_min_runtime_seconds > 0 for p in projects)
    extra: tuple[Column, ...] = (Column("WEIGHT", drop=4), Column("USAGE GPU-H", drop=5)) if usage else ()
    extra += (Column("MIN RUN", drop=6),) if runtime else ()
    notices = any(p.effective_preemption_notice_seconds > 0 for p in projects)
    extra += (Column("NOTICE", drop=7),) if notices else ()
    costs = any(p.effective_resize_cost_seconds is not None for p in projects)  # R18
    extra += (Column("RESIZE COST", drop=8),) if costs else ()
    # a narrow terminal leaves out these extras first, then OVER, LIMIT and DEPT: never a quota or a count
    table = context.table(
        "PROJECT",
        Column("DEPT", drop=1),
        "DESERVED",
        "FAIR",
        "ALLOC",
        Column("OVER", drop=3),
        Column("LIMIT", drop=2),
        *extra,
        "JOBS R/P",
        wide=wide,
    )
    for p in projects:
        limit = "-" if p.limit_gpus is None else str(p.limit_gpus)
        figures: tuple[str, ...] = (f"{p.effective_weight:.2g}", f"{p.usage_gpu_hours:.1f}") if usage else ()
        figures += (_runtime_words(p.effective_min_runtime_seconds),) if runtime else ()
        figures += (notice_flag.words(p.effective_preemption_notice_seconds),) if notices else ()
        figures += (resize_cost_flag.words(p.effective_resize_cost_seconds),) if costs else ()
        table.add_row(
            p.name,
            p.department or "-",
            str(p.deserved_gpus),
            str(p.fair_share_gpus),
            str(p.allocated_gpus),
            str(p.over_quota_gpus),
            limit,
            *figures,
            f"{p.running_jobs}/{p.pending_jobs}",
        )
    return table


@project_app.command("list")
def project_list(as_json: Json = False, output: Output = None, url: Url = None, token: Token = None) -> None:
    """List projects with quota, fair share and allocation.

    Example: tide project list
    """
    wide = context.wide(output)
    with context.session(url, token) as client:
        projects = client.projects()
    if as_json:
        context.dump_json(projects)
    elif not projects:
        context.console().print("No projects. Create one: tide project create NAME --deserved 2")
    else:
        context.console().print(_projects_table(projects, wide))
        _warn(w for p in projects for w in p.warnings)


@project_app.command("create")
def project_create(
    *,
    name: Annotated[str, typer.Argument(help="Project name.")],
    deserved: Deserved = 0,
    weight: Weight = None,
    limit: Limit = None,
    department: Dept = None,
    min_runtime: MinRuntime = None,
    preemption_notice: notice_flag.Option = None,
    pod_defaults: pod_flag.Option = None,
    resize_cost: resize_cost_flag.Option = None,
    url: Url = None,
    token: Token = None,
) -> None:
    """Create a project.

    Example: tide project create team-a --deserved 2 --weight 1 --min-runtime 10m
    """
    body = _body(name=name, deserved=deserved, weight=weight, limit=limit, department=department)
    body |= _body(min_runtime_seconds=_min_runtime(min_runtime))
    notice_flag.add(body, preemption_notice)
    pod_flag.add(body, pod_defaults)
    resize_cost_flag.add(body, resize_cost)
    flags = _flags(
        "project", min_runtime=min_runtime, notice=preemption_notice, resize_cost=resize_cost,
        deserved=deserved, weight=weight, limit=limit, department=department,
    )  # fmt: skip
    with context.session(url, token, flags) as client:
        p = client.create_project(body)
    typer.echo(
        f"Created project {p.name}: deserved {p.deserved_gpus} GPU(s), weight {p.over_quota_weight}"
        f"{_runtime_sentence(p.effective_min_runtime_seconds)}"
        f"{notice_flag.sentence(p.effective_preemption_notice_seconds)}"
        f"{resize_cost_flag.sentence(p.effective_resize_cost_seconds)}{_pods_sentence(p.pod_defaults)}."
    )
    _warn(p.warnings)


def _warn(warnings: Iterable[str]) -> None:
    """One line on stderr for quotas that add up to more than they divide (each warning once, in order)."""
    unique = list(dict.fromkeys(warnings))
    if unique:
        typer.echo(f"warning: {'; '.join(unique)}", err=True)


def _pods_sentence(defaults: dict[str, Any] | None) -> str:
    return ", with pod defaults" if defaults else ""


def _runtime_sentence(seconds: float) -> str:
    return f", minimum runtime {span(seconds)}" if seconds else ""


@project_app.command("update")
def project_update(
    *,
    name: Annotated[str, typer.Argument(help="Project name.")],
    deserved: Deserved = None,
    weight: Weight = None,
    limit: Limit = None,
    department: Dept = None,
    min_runtime: MinRuntime = None,
    preemption_notice: notice_flag.Option = None,
    pod_defaults: pod_flag.Option = None,
    resize_cost: resize_cost_flag.Option = None,
    url: Url = None,
    token: Token = None,
) -> None:
    """Change a project's quota, weight, limit, department, minimum runtime, preemption notice (``inherit``:
    its department's) or pod defaults (``none``: its department's only).

    Example: tide project update team-a --deserved 4 --min-runtime 10m --pod-defaults team-a-pods.yaml
    """
    body = _body(deserved=deserved, weight=weight, limit=limit, department=department)
    if min_runtime is not None:
        body["min_runtime_seconds"] = _min_runtime(min_runtime, inherit=True)
    notice_flag.add(body, preemption_notice, inherit=True)
    resize_cost_flag.add(body, resize_cost, inherit=True)
    pod_flag.add(body, pod_defaults, clear=True)
    if not body:
        context.fail(
            "nothing to change: give --deserved, --weight, --limit, --department, --min-runtime, "
            "--preemption-notice, --resize-cost or --pod-defaults",
            2,
        )
    flags = _flags(
        "project", min_runtime=min_runtime, notice=preemption_notice, resize_cost=resize_cost,
        deserved=deserved, weight=weight, limit=limit, department=department,
    )  # fmt: skip
    with context.session(url, token, flags) as client:
        p = client.update_project(name, body)
    limit_text = "none" if p.limit_gpus is None else str(p.limit_gpus)
    typer.echo(
        f"Updated project {p.name}: deserved {p.deserved_gpus}, weight {p.over_quota_weight}, limit {limit_text}"
        f"{_runtime_sentence(p.effective_min_runtime_seconds)}"
        f"{notice_flag.sentence(p.effective_preemption_notice_seconds)}"
        f"{resize_cost_flag.sentence(p.effective_resize_cost_seconds)}{_pods_sentence(p.pod_defaults)}."
    )
    _warn(p.warnings)


@project_app.command("delete")
def project_delete(
    name: Annotated[str, typer.Argument(help="Project name.")], url: Url = None, token: Token = None
) -> None:
    """Delete a project (refused while it has active jobs).

    Example: tide project delete team-a
    """
    with context.session(url, token) as client:
        client.delete_project(name)
    typer.echo(f"Deleted project {name}.")


@department_app.command("list")
def department_list(
    as_json: Json = False, output: Output = None, url: Url = None, token: Token = None
) -> None:
    """List departments.

    Example: tide department list
    """
    wide = context.wide(output)
    with context.session(url, token) as client:
        departments = client.departments()
    if as_json:
        context.dump_json(departments)
        return
    runtime = any(d.min_runtime_seconds > 0 for d in departments)
    notices = any(d.preemption_notice_seconds for d in departments)
    extra: tuple[Column, ...] = (Column("MIN RUN", drop=2),) if runtime else ()
    extra += (Column("NOTICE", drop=3),) if notices else ()
    costs = any(d.resize_cost_seconds is not None for d in departments)  # R18
    extra += (Column("RESIZE COST", drop=4),) if costs else ()
    table = context.table(
        "DEPARTMENT",
        "DESERVED",
        "FAIR",
        "ALLOC",
        Column("LIMIT", drop=1),
        *extra,
        Column("PROJECTS", wraps=True),
        wide=wide,
    )
    for d in departments:
        limit = "-" if d.limit_gpus is None else str(d.limit_gpus)
        table.add_row(
            d.name,
            str(d.deserved_gpus),
            str(d.fair_share_gpus),
            str(d.allocated_gpus),
            limit,
            *((_runtime_words(d.min_runtime_seconds),) if runtime else ()),
            *((notice_flag.words(d.preemption_notice_seconds),) if notices else ()),
            *((resize_cost_flag.words(d.resize_cost_seconds),) if costs else ()),
            ", ".join(d.projects),
        )
    context.console().print(table if departments else "No departments.")
    _warn(w for d in departments for w in d.warnings)


@department_app.command("create")
def department_create(
    *,
    name: Annotated[str, typer.Argument(help="Department name.")],
    deserved: Deserved = 0,
    weight: Weight = None,
    limit: Limit = None,
    min_runtime: MinRuntime = None,
    preemption_notice: notice_flag.Option = None,
    pod_defaults: pod_flag.Option = None,
    resize_cost: resize_cost_flag.Option = None,
    url: Url = None,
    token: Token = None,
) -> None:
    """Create a department (its minimum runtime is its projects' unless they set their own).

    Example: tide department create research --deserved 8 --min-runtime 10m
    """
    body = _body(name=name, deserved=deserved, weight=weight, limit=limit)
    body |= _body(min_runtime_seconds=_min_runtime(min_runtime))
    notice_flag.add(body, preemption_notice)
    pod_flag.add(body, pod_defaults)
    resize_cost_flag.add(body, resize_cost)
    flags = _flags(
        "department", min_runtime=min_runtime, notice=preemption_notice, resize_cost=resize_cost,
        deserved=deserved, weight=weight, limit=limit,
    )  # fmt: skip
    with context.session(url, token, flags) as client:
        d = client.create_department(body)
    typer.echo(
        f"Created department {d.name}: deserved {d.deserved_gpus} GPU(s){_runtime_sentence(d.min_runtime_seconds)}"
        f"{notice_flag.sentence(d.preemption_notice_seconds)}{resize_cost_flag.sentence(d.resize_cost_seconds)}{_pods_sentence(d.pod_defaults)}."
    )
    _warn(d.warnings)


@department_app.command("update")
def department_update(
    name: Annotated[str, typer.Argument(help="Department name.")],
    *,
    deserved: Deserved = None,
    weight: Weight = None,
    limit: Limit = None,
    min_runtime: MinRuntime = None,
    preemption_notice: notice_flag.Option = None,
    pod_defaults: pod_flag.Option = None,
    resize_cost: resize_cost_flag.Option = None,
    url: Url = None,
    token: Token = None,
) -> None:
    """Change a department's quota, weight, limit, minimum runtime, preemption notice or pod defaults
    (``none``: none).

    Example: tide department update research --deserved 12 --min-runtime 10m
    """
    body = _body(deserved=deserved, weight=weight, limit=limit, min_runtime_seconds=_min_runtime(min_runtime))
    notice_flag.add(body, preemption_notice)
    resize_cost_flag.add(body, resize_cost, inherit=True)
    pod_flag.add(body, pod_defaults, clear=True)
    if not body:
        context.fail(
            "nothing to change: give --deserved, --weight, --limit, --min-runtime, --preemption-notice, --resize-cost or "
            "--pod-defaults",
            target.EXIT_BAD_INPUT,
        )
    flags = _flags(
        "department", min_runtime=min_runtime, notice=preemption_notice, resize_cost=resize_cost, deserved=deserved, weight=weight,
        limit=limit,
    )  # fmt: skip
    with context.session(url, token, flags) as client:
        d = client.update_department(name, body)
    typer.echo(
        f"Updated department {d.name}: deserved {d.deserved_gpus}, weight {d.over_quota_weight}"
        f"{_runtime_sentence(d.min_runtime_seconds)}{notice_flag.sentence(d.preemption_notice_seconds)}"
        f"{resize_cost_flag.sentence(d.resize_cost_seconds)}{_pods_sentence(d.pod_defaults)}."
    )
    _warn(d.warnings)


@department_app.command("delete")
def department_delete(
    name: Annotated[str, typer.Argument(help="Department name.")], url: Url = None, token: Token = None
) -> None:
    """Delete a department.

    Example: tide department delete research
    """
    with context.session(url, token) as client:
        client.delete_department(name)
    typer.echo(f"Deleted department {name}.")


NODES_LISTED = 20  # up to this many nodes, tide cluster lists them all; above, a summary
TOP_NODES = 10


def cluster(
    *,
    nodes: Annotated[
        bool,
        typer.Option("--nodes", "--all", help="List every node, however many (else a summary above 20)."),
    ] = False,
    as_json: Json = False,
    output: Output = None,
    url: Url = None,
    token: Token = None,
) -> None:
    """Show GPUs per project (deserved, fair share, allocated, over quota) and the nodes: each one on a small
    cluster, a summary on a big one (counts by state and use, the nodes with most free GPUs).

    Example: tide cluster --nodes
    """
    wide = context.wide(output)
    with context.session(url, token) as client:
        state = client.cluster()
    if as_json:
        context.dump_json(state)
        return
    out = context.console()
    out.print(f"GPUs: {state.total_gpus} total, {state.allocated_gpus} allocated, {state.free_gpus} free")
    if state.projects:
        out.print(_projects_table(state.projects, wide))
    if nodes or len(state.nodes) <= NODES_LISTED:
        out.print(node_table(state.nodes, wide))
    else:
        _node_summary(state.nodes, wide)


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{n:,} {what}" for what, n in counter.most_common())


def _node_summary(nodes: list[NodePublic], wide: bool) -> None:
    out = context.console()
    use = Counter(
        "idle" if n.allocated_gpus == 0 else "full" if n.allocated_gpus >= n.gpus else "partly used"
        for n in nodes
    )
    out.print(f"Nodes: {len(nodes):,} ({_counts(Counter(n.state for n in nodes))}); {_counts(use)}")
    roomy = sorted(
        (n for n in nodes if n.schedulable and n.gpus > n.allocated_gpus),
        key=lambda n: (n.allocated_gpus - n.gpus, n.name),
    )[:TOP_NODES]
    if roomy:
        out.print(f"Most free GPUs (where the next replicas fit), top {len(roomy)}:")
        out.print(node_table(roomy, wide))
    else:
        out.print("No schedulable node has a free GPU.")
    out.print(f"{len(nodes):,} nodes: tide cluster --nodes (or tide node list) lists them all.")


def _print_events(events: list[EventPublic]) -> None:
    out = context.console()
    for e in events:
        replicas = f" [{','.join(map(str, e.replicas))}]" if e.replicas else ""  # none: cancel, finish
        out.print(f"{e.time:%H:%M:%S}  {e.kind:<6} {e.project}/{e.job}{replicas}  {e.reason}", markup=False)


def events(
    *,
    project: Annotated[str | None, typer.Option("--project", "-p", help="Only this project.")] = None,
    job: Annotated[str | None, typer.Option("--job", help="Only this job.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="How many recent events.")] = 50,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events.")] = False,
    as_json: Json = False,
    url: Url = None,
    token: Token = None,
) -> None:
    """Show scheduling decisions (start, grow, shrink, evict, finish, ...) with their reasons.

    Example: tide events -p team-a --follow
    """
    with context.session(url, token) as client:
        found = client.events(project=project, job=job, limit=limit)
        if as_json:
            context.dump_json(found)
            return
        _print_events(found)
        last = max((e.id for e in found), default=0)
        while follow:
            time.sleep(1)
            found = client.events(project=project, job=job, after_id=last)
            _print_events(found)
            last = max((e.id for e in found), default=last)


@token_app.command("create")
def token_create(
    project: Annotated[str, typer.Argument(help="Project the token acts for.")],
    name: Annotated[str, typer.Option("--name", help="A label for the token.")] = "default",
    url: Url = None,
    token: Token = None,
) -> None:
    """Create a project token (admin only); the secret is shown once.

    Example: tide token create team-a --name ci
    """
    with context.session(url, token) as client:
        created = client.create_token(project, name)
    typer.echo(f"Token {created.name} for project {created.project} (shown once, keep it):")
    typer.echo(created.token or "")
    typer.echo(f"Use it: tide login URL --token {created.token}")


@token_app.command("list")
def token_list(
    project: Annotated[str, typer.Argument(help="Project.")],
    as_json: Json = False,
    url: Url = None,
    token: Token = None,
) -> None:
    """List a project's tokens (admin; secrets are never shown again).

    Example: tide token list team-a
    """
    with context.session(url, token) as client:
        tokens = client.tokens(project)
    if as_json:
        context.dump_json(tokens)
        return
    table = context.table("ID", "NAME", "CREATED")
    for t in tokens:
        table.add_row(str(t.id), t.name, f"{t.created_at:%Y-%m-%d %H:%M}")
    context.console().print(table if tokens else f"No tokens for project {project}.")


@token_app.command("delete")
def token_delete(
    project: Annotated[str, typer.Argument(help="Project.")],
    which: Annotated[str, typer.Argument(metavar="TOKEN", help="The token's ID or name (tide token list).")],
    url: Url = None,
    token: Token = None,
) -> None:
    """Revoke a project token (admin): requests with it are refused from then on.

    Example: tide token delete team-a ci
    """
    with context.session(url, token) as client:
        found = _token(client.tokens(project), project, which)
        client.delete_token(project, found.id)
    typer.echo(f"Deleted token {found.name} (ID {found.id}) of project {project}; it no longer works.")


def _token(tokens: list[TokenPublic], project: str, which: str) -> TokenPublic:
    """The token ``which`` names (its ID, else its name); exits 3 when none, 2 when the name is not unique."""
    matches = [t for t in tokens if str(t.id) == which] or [t for t in tokens if t.name == which]
    if not matches:
        context.fail(
            f"no token {which!r} in project {project}; see `tide token list {project}`", target.EXIT_NOT_FOUND
        )
    if len(matches) > 1:
        ids = ", ".join(str(t.id) for t in matches)
        context.fail(
            f"{len(matches)} tokens of project {project} are named {which!r}: give the ID ({ids})",
            target.EXIT_BAD_INPUT,
        )
    return matches[0]


def register(app: typer.Typer) -> None:
    app.add_typer(project_app, name="project")
    app.add_typer(department_app, name="department")
    app.command("cluster")(cluster)
    app.command("events")(events)
    app.add_typer(token_app, name="token")
