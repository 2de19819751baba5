"""Job commands, shaped like Run:ai's: ``submit-dist pytorch``, ``list``, ``describe job``, ``logs``,
``delete job``.

Contract: each talks to the service over HTTP (``api.client.cli.context.session``); reads take ``--json``. A job is
found by name in ``-p PROJECT`` (else the default project, else any project the token reads); an unknown
name exits 3 and suggests close names, a name in several other projects exits 2 and names them. A 422 names
the flags the person typed (``api.client.cli.flag_words``).
"""

from __future__ import annotations

import difflib
import os
import shlex
import time
from datetime import UTC, datetime
from typing import Annotated, NoReturn

import typer

from api.client.cli import context, pod_flag, quick, target
from api.client.cli.eta_words import eta_cell, eta_sentence, parse_duration, span
from api.client.cli.flag_words import Typed
from api.client.client_types import JobPublic
from api.client.rest import TideClient
from api.shared import replica_sizes
from scheduler.statuses import JobStatus

Url = Annotated[str | None, typer.Option("--url", help="Server URL (else TIDE_URL, config, local server).")]
Token = Annotated[str | None, typer.Option("--token", help="Bearer token (else TIDE_TOKEN, config).")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
Output = Annotated[
    str | None,
    typer.Option(
        "--output", "-o", metavar="wide", help="wide: every column, however wide (else fit the terminal)."
    ),
]
Project = Annotated[str | None, typer.Option("--project", "-p", help="Project (else the default one).")]

submit_app = typer.Typer(help="Submit a distributed job.", no_args_is_help=True)
describe_app = typer.Typer(help="Describe a resource.", no_args_is_help=True)
delete_app = typer.Typer(help="Delete a resource.", no_args_is_help=True)


def age(created: datetime, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    seconds = max(0, int((now - created.replace(tzinfo=created.tzinfo or UTC)).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _env(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            context.fail(f"-e expects KEY=VALUE, got {pair!r}", target.EXIT_BAD_INPUT)
        env[key] = value
    return env


@submit_app.command("pytorch", context_settings={"allow_interspersed_args": False})
def submit_pytorch(
    *,
    args: Annotated[
        list[str] | None, typer.Argument(help="The command each replica runs (after --).")
    ] = None,
    name: Annotated[str, typer.Option("--name", help="Job name (DNS-1123).")] = "",
    project: Project = None,
    workers: Annotated[int | None, typer.Option("--workers", help="Workers besides the master (0).")] = None,
    min_replicas: Annotated[int | None, typer.Option("--min-replicas", help="Elastic minimum.")] = None,
    max_replicas: Annotated[int | None, typer.Option("--max-replicas", help="Elastic maximum.")] = None,
    allowed_replicas: Annotated[
        str | None,
        typer.Option(
            "--allowed-replicas", help="Only these replica counts: 1,2,4,8 or step:N or powers-of-two."
        ),
    ] = None,
    topology: Annotated[
        str | None,
        typer.Option(
            "--topology",
            help="preferred (default): start inside one topology domain (rack) where it fits; required: only there.",
        ),
    ] = None,
    gpu: Annotated[int, typer.Option("--gpu", "-g", help="GPUs per replica.")] = 1,
    gpu_fraction: GpuFraction = None,
    image: Annotated[str | None, typer.Option("--image", "-i", help="Container image.")] = None,
    environment: Annotated[list[str] | None, typer.Option("--environment", "-e", help="KEY=VALUE.")] = None,
    interactive: Annotated[bool, typer.Option("--interactive", help="Never preempted; quota only.")] = False,
    priority: Annotated[int, typer.Option("--priority", help="Order inside the project.")] = 0,
    command: Annotated[bool, typer.Option("--command", help="Accepted for Run:ai habits (no-op).")] = False,
    expected_duration: Annotated[
        str | None,
        typer.Option(
            "--expected-duration", help="How long it runs: 90m, 2h, 1d or seconds (for start times)."
        ),
    ] = None,
    pod_template: pod_flag.TemplateOption = None,
    wait: Annotated[float, typer.Option("--wait", help="Wait up to this many seconds for it to run.")] = 0,
    url: Url = None,
    token: Token = None,
) -> None:
    """Submit an elastic distributed PyTorch job (master + workers).

    Example: tide submit-dist pytorch --name train -p team-a --workers 3 --min-replicas 2 -g 1 -- python train.py
    """
    if not name:
        context.fail("--name is required", target.EXIT_BAD_INPUT)
    if not args:
        context.fail("give the command after --, e.g. `-- python train.py`", target.EXIT_BAD_INPUT)
    chosen = context.default_project(project)
    body: dict[str, object] = {"name": name, "gpus_per_replica": gpu, "command": args}
    if gpu_fraction is not None:
        body["gpu_fraction"] = check_fraction(gpu_fraction)
    body |= {"env": _env(environment or []), "interactive": interactive, "priority": priority}
    given = (
        ("workers", workers),
        ("min_replicas", min_replicas),
        ("max_replicas", max_replicas),
        ("image", image),
    )
    for key, value in given:
        if value is not None:
            body[key] = value
    if topology is not None:
        if topology not in ("preferred", "required"):
            context.fail(f"--topology {topology!r}: give preferred or required", target.EXIT_BAD_INPUT)
        body["topology"] = topology
    if allowed_replicas is not None:
        try:
            body["allowed_replicas"] = replica_sizes.cli_spec(allowed_replicas)
        except ValueError as error:
            context.fail(str(error), target.EXIT_BAD_INPUT)
    if expected_duration is not None:
        body["expected_duration"] = _expected(expected_duration)
    if pod_template is not None:
        body["pod_template"] = pod_flag.read(pod_template, flag="--pod-template")
    _replicas_fit(workers, min_replicas, max_replicas)
    flags = _submit_flags(body, args, expected_duration, allowed_replicas)
    with context.session(url, token, flags) as client:
        job, warnings = client.submit_warned(chosen, body)
    for warning in warnings:
        typer.echo(f"Warning: {warning}", err=True)
    report_submitted(job, wait, url, token)


_SUBMIT_FLAGS = {
    "name": "--name",
    "gpus_per_replica": "-g/--gpu",
    "workers": "--workers",
    "min_replicas": "--min-replicas",
    "max_replicas": "--max-replicas",
    "image": "-i/--image",
    "priority": "--priority",
    "topology": "--topology",
    "gpu_fraction": "--gpu-fraction",
}


def _submit_flags(
    body: dict[str, object], args: list[str], expected: str | None, allowed: str | None
) -> dict[str, Typed]:
    """Where each field of a submit's body came from: the flag, and the value as typed."""
    shown = {field: str(value) for field, value in body.items() if field != "name"}  # a name is quoted anyway
    flags = {field: Typed(flag, shown.get(field)) for field, flag in _SUBMIT_FLAGS.items()}
    flags["env"] = Typed("-e/--environment")
    flags["command"] = Typed(f"the command after -- ({shlex.join(args)})")
    flags["expected_duration"] = Typed("--expected-duration", expected, seconds=True)
    flags["allowed_replicas"] = Typed("--allowed-replicas", allowed)
    return flags


YEAR_SECONDS = 365 * 86_400  # the longest --expected-duration the API takes


def _expected(text: str) -> float:
    """Seconds from ``--expected-duration``; exits 2 for a value that is not a duration, or above a year."""
    try:
        seconds = parse_duration(text)
    except ValueError as error:
        context.fail(f"--expected-duration: {error}", target.EXIT_BAD_INPUT)
    if seconds > YEAR_SECONDS:
        context.fail(f"--expected-duration {text}: at most a year (365d)", target.EXIT_BAD_INPUT)
    return seconds


def _replicas_fit(workers: int | None, low: int | None, high: int | None) -> None:
    """Exits 2 when ``--workers`` starts more replicas than ``--max-replicas`` allows, or fewer than
    ``--min-replicas`` (said in flags: the API would name ``min_replicas`` the person never typed)."""
    if workers is None or workers < 0:
        return  # the API's bounds say what is wrong with a negative count
    who = f"the master and {workers} worker{'s' if workers > 1 else ''}" if workers else "the master alone"
    starts = f"--workers {workers} starts {workers + 1} replica{'s' if workers else ''} ({who})"
    if high is not None and workers + 1 > high:
        context.fail(f"{starts}, above --max-replicas {high}: lower --workers, or raise --max-replicas", 2)
    if low is not None and workers + 1 < low:
        context.fail(f"{starts}, below --min-replicas {low}: raise --workers, or lower --min-replicas", 2)


GpuFraction = Annotated[
    float | None,
    typer.Option(
        "--gpu-fraction",
        help="A share of one GPU per replica, 0.05 to 0.95, instead of -g whole GPUs (shares a GPU).",
    ),
]
MIN_FRACTION, MAX_FRACTION = 0.05, 0.95  # as the API takes them


def check_fraction(value: float) -> float:
    """``--gpu-fraction``'s value; exits 2 with what to give for one outside 0.05..0.95."""
    if not MIN_FRACTION <= value <= MAX_FRACTION:
        context.fail(
            f"--gpu-fraction {value:g}: give a share of one GPU from {MIN_FRACTION} to {MAX_FRACTION} "
            "(for whole GPUs use -g/--gpu)",
            target.EXIT_BAD_INPUT,
        )
    return value


def gpus_text(job: JobPublic) -> str:
    """A job's GPUs per replica in words: ``2 GPU(s)``, or a fractional job's ``0.5 of a GPU``."""
    if job.gpu_fraction is not None:
        return f"{job.gpu_fraction:g} of a GPU"
    return f"{job.gpus_per_replica} GPU(s)"


def gpus_now(job: JobPublic) -> str:
    """The GPUs a job holds now as ``tide list`` shows them: whole ones, or a fractional job's shares (0.5)."""
    if job.gpu_fraction is not None:
        return f"{job.replicas_now * job.gpu_fraction:g}"
    return str(job.allocated_gpus)


def report_submitted(job: JobPublic, wait: float, url: str | None, token: str | None) -> None:
    """What every submit prints: the job, optionally its start (``--wait``), how to follow it."""
    out = context.console()
    only = f" (only {', '.join(str(n) for n in job.allowed_replicas)})" if job.allowed_replicas else ""
    out.print(
        f"Submitted job {job.name} to project {job.project}: {job.min_replicas}..{job.max_replicas}{only} "
        f"replicas of {gpus_text(job)}, status {job.status}."
    )
    if wait > 0:
        job = _wait_running(job, wait, url, token)
    out.print(f"Follow it:  tide describe job {job.name} -p {job.project}")
    out.print(f"            tide logs {job.name} -p {job.project} --follow")


def _wait_running(job: JobPublic, seconds: float, url: str | None, token: str | None) -> JobPublic:
    out = context.console()
    deadline = time.monotonic() + seconds
    with context.session(url, token) as client, out.status(f"waiting for {job.name} to start..."):
        while job.status == "pending" and time.monotonic() < deadline:
            time.sleep(0.2)
            job = client.job(job.project, job.name)
    if job.status == "pending":
        out.print(f"Still pending after {seconds:g} s: {job.pending_reason or 'no reason given yet'}")
    else:
        out.print(
            f"Job {job.name} is {job.status} with {job.replicas_now} replica(s), {gpus_now(job)} GPU(s)."
        )
    return job


STATUSES = tuple(status.value for status in JobStatus)
# on a narrow terminal ``tide list`` leaves out AGE, then GPUS, then ETA; the reason wraps in what is left
JOB_COLUMNS = (
    "PROJECT",
    "NAME",
    "STATUS",
    "REPLICAS",
    context.Column("GPUS", drop=2),
    context.Column("AGE", drop=3),
    context.Column("ETA", drop=1),
    context.Column("REASON", wraps=True),
)
LIST_LIMIT = 50


def list_jobs(
    *,
    project: Project = None,
    status: Annotated[
        list[str] | None,
        typer.Option("--status", help="Only this status (give it once): " + ", ".join(STATUSES) + "."),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            min=0,
            max=quick.LIST_MAX,
            help=f"At most this many jobs; 0 for all (default: {LIST_LIMIT} in a table, all with --json).",
        ),
    ] = None,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Skip this many jobs first.")] = 0,
    as_json: Json = False,
    output: Output = None,
    url: Url = None,
    token: Token = None,
) -> None:
    """List jobs (by project, then age): replicas now/min/max, GPUs, age, expected start, why a job waits.

    Example: tide list -p team-a --status pending --limit 20
    """
    chosen = _one_status(status or [])
    wide = context.wide(output)
    if limit is None:  # a script reading --json gets every job unless it asks for a page
        limit = 0 if as_json else LIST_LIMIT
    with context.session(url, token) as client:
        jobs, total = client.jobs_page(project, chosen, limit=limit or None, offset=offset)
    note = quick.shown(len(jobs), total, offset) if len(jobs) < total else None
    if as_json:
        context.dump_json(jobs)
        if note:
            typer.echo(note, err=True)
        return
    if not jobs:
        context.console().print(f"No jobs{f' from {offset}' if offset and total else ''}.")
        return
    table = context.table(*JOB_COLUMNS, wide=wide)
    now = datetime.now(UTC)
    for job in jobs:
        reason = job.pending_reason or job.message or ""
        table.add_row(
            job.project,
            job.name,
            job.status,
            f"{job.replicas_now}/{job.min_replicas}/{job.max_replicas}",
            gpus_now(job),
            age(job.created_at),
            eta_cell(job, now),
            reason,
        )
    context.console().print(table)
    if note:
        context.console().print(note)


def _one_status(given: list[str]) -> str | None:
    """The one status ``--status`` asks for (None: all); exits 2 for an unknown one, or for several (the
    API filters by one status: a silent last-one-wins would hide the others)."""
    for status in given:
        if status not in STATUSES:
            context.fail(
                f"--status must be one of {', '.join(STATUSES)}; got {status!r}", target.EXIT_BAD_INPUT
            )
    if len(set(given)) > 1:
        context.fail(
            f"--status takes one status, got {', '.join(given)}: list them one at a time, or leave out "
            "--status to list every job",
            target.EXIT_BAD_INPUT,
        )
    return given[0] if given else None


def find_job(client: TideClient, name: str, project: str | None) -> JobPublic:
    """The job called ``name`` in ``project``, else in the default project, else in any project the token
    reads (active first, else the newest); exits 3 with suggestions when none, 2 when several other projects
    have one (``-p`` says which)."""
    if project:
        return _only_in(client, name, project)
    default = os.environ.get("TIDE_PROJECT") or target.text(target.load_config().get("project"))
    mine = [job for job in client.jobs(default) if job.name == name] if default else []
    if mine:
        return _newest(client, mine)
    everywhere = client.jobs(None)
    matches = [job for job in everywhere if job.name == name]
    if not matches:
        _not_found(name, everywhere, None)
    projects = sorted({job.project for job in matches})
    if len(projects) > 1:
        context.fail(
            f"jobs named {name!r} are in projects {', '.join(projects)}"
            f"{f' (none in the default project {default})' if default else ''}: give -p PROJECT",
            target.EXIT_BAD_INPUT,
        )
    return _newest(client, matches)


def _only_in(client: TideClient, name: str, project: str) -> JobPublic:
    jobs = client.jobs(project)
    matches = [job for job in jobs if job.name == name]
    if not matches:
        _not_found(name, jobs, project)
    return _newest(client, matches)


def _not_found(name: str, jobs: list[JobPublic], project: str | None) -> NoReturn:
    close = difflib.get_close_matches(name, sorted({job.name for job in jobs}), n=3)
    where = f" in project {project}" if project else " in any project"
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    context.fail(f"no job {name!r}{where}{hint}", target.EXIT_NOT_FOUND)


def _newest(client: TideClient, matches: list[JobPublic]) -> JobPublic:
    matches.sort(key=lambda job: (job.status in ("pending", "running"), job.created_at), reverse=True)
    return client.job(matches[0].project, matches[0].name)


@describe_app.command("job")
def describe_job(
    name: Annotated[str, typer.Argument(help="Job name.")],
    project: Project = None,
    as_json: Json = False,
    url: Url = None,
    token: Token = None,
) -> None:
    """Show a job: replicas (role, node, GPUs, status), why it waits or shrank, its events.

    Example: tide describe job train -p team-a
    """
    with context.session(url, token) as client:
        job = find_job(client, name, project)
        events = client.events(project=job.project, job=job.name, limit=20)
    if as_json:
        context.dump_json(job)
        return
    out = context.console()
    out.print(f"Job:        {job.project}/{job.name}")
    out.print(f"Status:     {job.status}  (age {age(job.created_at)}, restarts {job.restarts})")
    out.print(
        f"Replicas:   {job.replicas_now} now, {job.min_replicas}..{job.max_replicas} wanted, "
        f"{gpus_text(job)} each, {gpus_now(job)} GPU(s) allocated"
    )
    shared = [r for r in job.replicas if r.shared_gpu is not None]
    if shared:  # R20
        where = ", ".join(
            f"replica {r.index} on {r.node} (shared GPU {r.shared_gpu}"
            + (f", device {r.gpu_ids[0]})" if r.gpu_ids else ")")
            for r in shared
        )
        out.print(f"Shares:     {where}; its memory cap is TIDE_GPU_FRACTION={job.gpu_fraction:g}")
    if job.allowed_replicas:
        out.print(f"Sizes:      only {', '.join(str(n) for n in job.allowed_replicas)} replicas")
    if job.topology == "required":
        out.print("Topology:   required: starts and grows only inside one topology domain")
    kind = "interactive" if job.interactive else "training (preemptible)"
    out.print(f"Kind:       {kind}, priority {job.priority}")
    out.print(f"Command:    {shlex.join(job.command)}", markup=False)
    if job.checkpointed_at is not None:
        out.print(f"Checkpoint: {age(job.checkpointed_at)} ago (the last one the job reported)")
    if job.speeds:  # R19: what goodput-aware growth fits its scaling from
        at = "; ".join(
            f"{rate:,.1f} samples/s at {n} replica{'s' if n != '1' else ''}" for n, rate in job.speeds.items()
        )
        out.print(f"Speed:      {at} (as the job reported)")
    if job.resize_cost_seconds is not None:  # R18: once measured
        n = job.resizes_measured
        plural = "s" if n != 1 else ""
        out.print(
            f"Resize:     ~{span(job.resize_cost_seconds)} per resize (measured over {n} resize{plural})"
        )
    if job.pending_reason:
        place = f" (place in line: {job.queue_position})" if job.queue_position is not None else ""
        out.print(f"Why:        {job.pending_reason}{place}")
    sentence = eta_sentence(job)
    if sentence:
        out.print(f"ETA:        {sentence[0].upper()}{sentence[1:]}.")
    if job.expected_duration is not None:
        out.print(f"Expected:   runs about {span(job.expected_duration)} (declared)")
    if job.message:
        out.print(f"Message:    {job.message}")
    if job.replicas:
        table = context.table("INDEX", "ROLE", "NODE", "GPU IDS", "STATUS", "EXIT")
        for rep in job.replicas:
            ids = ",".join(map(str, rep.gpu_ids)) if rep.gpu_ids else str(rep.gpus)
            exit_code = "" if rep.exit_code is None else str(rep.exit_code)
            table.add_row(str(rep.index), rep.role, rep.node, ids, rep.status, exit_code)
        out.print(table)
    if events:
        out.print("Events:")
        for event in events:
            out.print(f"  {age(event.time)} ago  {event.kind:<7} {event.reason}")


def logs(
    *,
    name: Annotated[str, typer.Argument(help="Job name.")],
    project: Project = None,
    replica: Annotated[int, typer.Option("--replica", help="Replica index (0 = master).")] = 0,
    tail: Annotated[int | None, typer.Option("--tail", help="Only the last N lines.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until it ends.")] = False,
    url: Url = None,
    token: Token = None,
) -> None:
    """Print a replica's output.

    Example: tide logs train -p team-a --replica 1 --tail 50 --follow
    """
    with context.session(url, token) as client:
        job = find_job(client, name, project)
        if job.status == "pending":
            job = _started(client, job, follow)
        typer.echo(client.logs(job.project, job.name, replica, tail), nl=False)
        text = client.logs(job.project, job.name, replica) if follow else ""
        while follow and job.status in ("pending", "running"):
            time.sleep(1)
            full = client.logs(job.project, job.name, replica)
            typer.echo(full[len(text) :] if full.startswith(text) else full, nl=False)
            text = full
            job = client.job(job.project, job.name)


def _started(client: TideClient, job: JobPublic, follow: bool) -> JobPublic:
    """The job once it has left pending (``--follow`` waits for that); without ``--follow``, exits 3 saying
    that it is pending and why: a job that never started has no output."""
    why = job.pending_reason or "no reason given yet"
    if not follow:
        context.fail(
            f"job {job.project}/{job.name} is pending, so it has no output yet: {why}. "
            f"`tide logs {job.name} -p {job.project} --follow` waits for it to start",
            target.EXIT_NOT_FOUND,
        )
    typer.echo(f"Job {job.project}/{job.name} is pending: {why}. Waiting for it to start...", err=True)
    while job.status == "pending":
        time.sleep(1)
        job = client.job(job.project, job.name)
    return job


@delete_app.command("job")
def delete_job(
    name: Annotated[str, typer.Argument(help="Job name.")],
    project: Project = None,
    url: Url = None,
    token: Token = None,
) -> None:
    """Cancel a job (graceful stop, then forced; master last).

    Example: tide delete job train -p team-a
    """
    with context.session(url, token) as client:
        job = find_job(client, name, project)
        done = client.delete_job(job.project, job.name)
    context.console().print(f"Deleted job {done.project}/{done.name} (status {done.status}).")


def register(app: typer.Typer) -> None:
    app.add_typer(submit_app, name="submit-dist")
    app.command("list")(list_jobs)
    app.add_typer(describe_app, name="describe")
    app.command("logs")(logs)
    app.add_typer(delete_app, name="delete")
