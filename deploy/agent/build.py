"""Build ``tide-agent``: Tide's pod agent alone, for training images (httpx its one dependency; torch is the image's).

Usage, from the repository root:  python deploy/agent/build.py OUT_DIR   (prints the wheel's path)

The wheel holds exactly ``MODULES`` (the agent and the pure launch modules it imports: standard library,
httpx and torch only, as an import-linter contract keeps them), and two commands: ``tide`` (which runs
``tide agent -- ...``, the pod's command, and refuses the rest) and ``tide-agent``. It is built offline
from a staging copy with the installed setuptools (``pip wheel --no-build-isolation``). A job image:

    pip install torch==2.13.0 tide_agent-0.1.0-py3-none-any.whl

Do not install it next to ``tide-scheduler``: both provide the ``tide`` command.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULES = (
    "scheduler/__init__.py",
    "scheduler/elastic/__init__.py",
    "scheduler/elastic/environment.py",
    "scheduler/elastic/launch.py",
    "scheduler/elastic/torchrun_argv.py",
    "scheduler/elastic/agent/*.py",
)


def pyproject() -> str:
    main = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    httpx = next(d for d in main["dependencies"] if d.startswith("httpx"))
    return f'''[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "tide-agent"
version = "{main["version"]}"
description = "Tide's agent for job pods: relaunches a torchrun job in place at each size the service orders"
requires-python = "{main["requires-python"]}"
license = "{main["license"]}"
dependencies = ["{httpx}"]

[project.scripts]
tide = "scheduler.elastic.agent.__main__:tide"
tide-agent = "scheduler.elastic.agent.__main__:main"

[tool.setuptools]
packages = ["scheduler", "scheduler.elastic", "scheduler.elastic.agent"]
'''


def build(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as staging_dir:
        staging = Path(staging_dir)
        for pattern in MODULES:
            for source in sorted(ROOT.glob(pattern)):
                target = staging / source.relative_to(ROOT)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
        (staging / "pyproject.toml").write_text(pyproject())
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
             str(staging)],
            check=True,
        )  # fmt: skip
    return next(out.glob("tide_agent-*.whl"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    print(build(Path(sys.argv[1])))
