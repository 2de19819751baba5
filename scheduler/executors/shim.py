"""The parent of every local replica process: runs argv, records its exit code in a file, nothing more.

Usage: ``python -I -S shim.py EXIT_FILE -- ARGV...``. Contract: the command runs as given (argv, never a
shell) in the shim's process group, with the shim's environment and output. SIGTERM and SIGINT sent to the
group reach the command; the shim itself survives them to wait for the command and write its exit code
(``-N`` when killed by signal N, 127 when argv[0] cannot be run) to EXIT_FILE atomically, so the code is
known even when the service that started it restarted meanwhile. Standard library only, no package imports:
it runs as a plain script.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def _write_exit(path: str, code: int) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as handle:
        handle.write(str(code))
    os.replace(tmp, path)


def main(args: list[str]) -> int:
    if len(args) < 3 or args[1] != "--":
        print("usage: shim.py EXIT_FILE -- ARGV...", file=sys.stderr)
        return 2
    exit_file, argv = args[0], args[2:]
    # A Python handler (unlike SIG_IGN) is reset to the default in the child at exec.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    try:
        child = subprocess.Popen(argv)
    except OSError as error:
        print(f"tide: cannot run {argv[0]!r}: {error.strerror}", file=sys.stderr, flush=True)
        _write_exit(exit_file, 127)
        return 127
    code = child.wait()
    _write_exit(exit_file, code)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
