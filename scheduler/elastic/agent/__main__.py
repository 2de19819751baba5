"""Tide's pod agent without the CLI: ``python -m scheduler.elastic.agent [--url U] -- torchrun train.py ...``.

Contract: the same command as ``tide agent`` (``api.client.cli.agent``: the same options, settings from the
pod's environment, exit codes), parsed with the standard library's argparse, so that a training image needs
only the agent's own modules, httpx and torch: the ``tide-agent`` distribution (``deploy/agent/build.py``)
installs these modules and a ``tide`` command that runs ``tide agent ...`` through ``tide(argv)`` (the pod's
command, ``tide agent -- ...``, is the same with either install) and refuses every other command with exit
2, naming the full package.
"""

from __future__ import annotations

import argparse
import os
import sys

USAGE_EXIT = 2


def parser(prog: str) -> argparse.ArgumentParser:
    made = argparse.ArgumentParser(
        prog=prog,
        description="Run a torchrun job's replica in a pod, relaunching it at each size the service orders.",
    )
    made.add_argument("--url", default=None, help="The URL job pods reach the Tide service at (default: $TIDE_AGENT_URL).")  # fmt: skip
    made.add_argument(
        "--connect-timeout",
        type=float,
        default=float(os.environ.get("TIDE_AGENT_CONNECT_TIMEOUT", "300")),
        help="Seconds to keep trying a service never reached, then exit 2 (default: 300, TIDE_AGENT_CONNECT_TIMEOUT).",
    )
    made.add_argument("command", nargs=argparse.REMAINDER, help="-- then the training command")
    return made


def main(argv: list[str] | None = None, prog: str = "python -m scheduler.elastic.agent") -> int:
    args = parser(prog).parse_args(sys.argv[1:] if argv is None else argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.connect_timeout < 1:
        print(f"{prog}: --connect-timeout must be at least 1 second", file=sys.stderr)
        return USAGE_EXIT
    from scheduler.elastic.agent.link import settings_from  # noqa: PLC0415 - after the usage checks
    from scheduler.elastic.agent.pod import PodAgent  # noqa: PLC0415

    try:
        settings = settings_from(os.environ, command, args.url)
    except ValueError as error:
        print(f"tide agent: {error}", file=sys.stderr)
        return USAGE_EXIT
    return PodAgent(settings, connect_deadline=args.connect_timeout).run()


def tide(argv: list[str] | None = None) -> int:
    """The ``tide`` command of the agent-only install: ``tide agent ...`` and nothing else."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] != ["agent"]:
        print(
            "tide: this is the agent-only install (tide-agent): it runs `tide agent -- COMMAND` in job pods. "
            "For the CLI and the service, install tide-scheduler.",
            file=sys.stderr,
        )
        return USAGE_EXIT
    return main(args[1:], prog="tide agent")


if __name__ == "__main__":
    sys.exit(main())
