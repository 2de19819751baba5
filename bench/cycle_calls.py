"""The cycle bench's cost as a count that load does not blur: Python function calls (cProfile) of
``bench/cycle.py`` run in a given checkout. On a shared, loaded machine wall and CPU times of two trees are
hard to compare; the number of calls of the same cycles is exact. Subtract a 2-cycle run from a 12-cycle run
to leave out the imports and the snapshot's construction.

    .venv/bin/python bench/cycle_calls.py /path/to/checkout --gpus 2048 --cycles 12 [--all-rules]
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import pstats
import runpy
import sys


def main() -> None:
    tree, rest = sys.argv[1], sys.argv[2:]
    sys.path.insert(0, tree)  # that checkout's packages first (bench/cycle.py puts its own tree first too)
    sys.argv = [f"{tree}/bench/cycle.py", *rest]
    profile = cProfile.Profile()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        profile.enable()
        try:
            runpy.run_path(f"{tree}/bench/cycle.py", run_name="__main__")
        finally:
            profile.disable()
    print(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
