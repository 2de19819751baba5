"""The command line that starts a real ``tide serve`` of this tree, shared by the tests and the benches.

``serve_argv(port, *options)`` runs the CLI's module with this interpreter (so the tree under test, not an
installed ``tide``, answers), on ``port``, logging at ``log_level``; ``options`` follow as given.
"""

from __future__ import annotations

import sys


def serve_argv(port: int, *options: str, log_level: str = "warning") -> list[str]:
    """``python -m api.client.cli.main serve --port PORT --log-level LEVEL *options``."""
    argv = [sys.executable, "-m", "api.client.cli.main", "serve", "--port", str(port)]
    return [*argv, "--log-level", log_level, *options]
