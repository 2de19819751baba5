"""The pod agent without the service: the ``tide-agent`` wheel (deploy/agent/build.py) imports and runs with
the standard library, httpx and torch only.

The wheel is built offline from this checkout; its metadata names httpx as its one dependency and it holds
only the agent's modules and the pure launch modules they import. Unpacked on its own (the checkout not on
the path), with an import hook that refuses every package of the server and the CLI (FastAPI, SQLAlchemy,
typer, pydantic, Kubernetes' client, ...), each of its modules imports, ``tide agent`` answers a missing
setting with exit 2 and its message, and any other ``tide`` command is refused with exit 2.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFUSED = (
    "fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg", "pydantic", "typer", "click",
    "rich", "yaml", "kubernetes", "prometheus_client", "api", "matplotlib",
)  # fmt: skip
HOOK = """
import importlib.abc, sys
REFUSED = {refused!r}
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in REFUSED:
            raise ImportError(f"{{name}} is not in a job image with the agent alone")
        if name.startswith(("scheduler.core", "scheduler.engine", "scheduler.store", "scheduler.executors")):
            raise ImportError(f"{{name}} is the service's")
sys.meta_path.insert(0, Refuse())
sys.path[:0] = [{unpacked!r}, {site!r}]
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("agent-wheel")
    result = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "agent" / "build.py"), str(out)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    return Path(result.stdout.strip())


def test_the_wheel_needs_httpx_only_and_holds_the_agent_alone(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = next(archive.read(n).decode() for n in names if n.endswith("/METADATA"))
        scripts = next(archive.read(n).decode() for n in names if n.endswith("/entry_points.txt"))
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]  # fmt: skip
    assert requires == ["httpx>=0.27"]
    modules = sorted(n for n in names if n.endswith(".py"))
    assert all(
        n.startswith("scheduler/elastic/agent/")
        or n in ("scheduler/__init__.py", "scheduler/elastic/__init__.py", "scheduler/elastic/environment.py",
                 "scheduler/elastic/launch.py", "scheduler/elastic/torchrun_argv.py")
        for n in modules
    ), modules  # fmt: skip
    assert "scheduler/elastic/agent/pod.py" in modules and "scheduler/elastic/agent/__main__.py" in modules
    assert "tide = scheduler.elastic.agent.__main__:tide" in scripts


def run_unpacked(wheel: Path, tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
    site = sysconfig.get_paths()["purelib"]  # httpx (and torch) come from here; the hook refuses the rest
    script = HOOK.format(refused=REFUSED, unpacked=str(unpacked), site=site) + code
    return subprocess.run(
        [sys.executable, "-I", "-c", script],  # isolated: neither this checkout nor PYTHONPATH on the path
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        timeout=120,
    )


def test_the_agent_imports_and_runs_with_the_standard_library_and_httpx(wheel: Path, tmp_path: Path) -> None:
    code = """
import importlib, pkgutil
import scheduler, scheduler.elastic.agent as agent
assert scheduler.__file__.startswith(sys.path[0]), scheduler.__file__  # the wheel's, not a checkout's
for module in pkgutil.iter_modules(agent.__path__):
    importlib.import_module(f"scheduler.elastic.agent.{module.name}")
assert "httpx" in sys.modules
from scheduler.elastic.agent.__main__ import tide
print("exit", tide(["agent", "--", "torchrun", "--nproc-per-node", "1", "train.py"]))
print("exit", tide(["list"]))
"""
    result = run_unpacked(wheel, tmp_path, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["exit 2", "exit 2"], result.stdout
    assert "tide agent: TIDE_AGENT_URL is not set" in result.stderr
    assert "this is the agent-only install (tide-agent)" in result.stderr


def test_the_hook_does_refuse_the_service(wheel: Path, tmp_path: Path) -> None:
    """The check above can fail: the full CLI's agent command imports typer, which the hook refuses."""
    result = run_unpacked(wheel, tmp_path, "import typer\n")
    assert result.returncode != 0 and "not in a job image" in result.stderr
