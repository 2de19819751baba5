"""The client commands load nothing of the server: what a ``tide`` process has imported once a command ran.

import-linter (pyproject.toml) checks Tide's own imports; this checks the whole process, dependencies
included (typer 0.29 brought pydantic back into every command through its parameter parsing). How fast
the commands start is bench/cli_start.py's job, not a test's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from api.client.cli.main import COMMAND_MODULES, COMMANDS, build

SERVER_SIDE = ["fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "pydantic", "scheduler"]
# standard library only, shared by the service and the CLI (the words of statuses): not the server's
SHARED = ["scheduler", "scheduler.statuses"]
PROBE = """
import json, sys
args, watched, shared = json.loads(sys.argv[1]), set(json.loads(sys.argv[2])), set(json.loads(sys.argv[3]))
from api.client.cli.main import main
sys.argv = ["tide", *args]
try:
    main()
except SystemExit as end:
    code = end.code
loaded = sorted({name.split(".")[0] for name, module in sys.modules.items() if module and name not in shared} & watched)
sys.__stdout__.write("\\nPROBE " + json.dumps({"code": code, "loaded": loaded}) + "\\n")
"""


def _probe(tmp_path: Path, watched: list[str], *args: str) -> dict[str, object]:
    """Run ``tide ARGS`` in a fresh process: its exit code, which of ``watched`` it loaded (a module kept out
    by a ``None`` entry is not loaded, a ``SHARED`` one does not count) and what it printed (``out``)."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "TIDE_DATA_DIR": str(tmp_path / "data")}
    env.pop("TIDE_URL", None)
    command = [sys.executable, "-c", PROBE, json.dumps(args), json.dumps(watched), json.dumps(SHARED)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    out, _, line = done.stdout.rpartition("\nPROBE ")
    assert line, done.stdout + done.stderr
    result: dict[str, object] = json.loads(line)
    return result | {"out": out}


@pytest.mark.parametrize(
    "args",
    [
        ["list", "--json", "--url", "http://127.0.0.1:9"],  # unreachable: exit 4, after the client ran
        ["list", "--json", "--status", "running", "--url", "http://127.0.0.1:9"],
        ["list", "--url", "http://127.0.0.1:9"],  # a table: the full CLI
        ["describe", "job", "x", "--url", "http://127.0.0.1:9"],
        ["version"],
        ["--help"],
        ["serve", "--help"],  # the server-side command's help, without the server
        ["submit", "--help"],
    ],
)
def test_a_client_command_imports_nothing_of_the_server(tmp_path: Path, args: list[str]) -> None:
    probe = _probe(tmp_path, SERVER_SIDE, *args)
    assert probe["code"] in (0, 4)
    assert probe["loaded"] == []


def test_a_command_that_prints_json_loads_no_terminal_drawing(tmp_path: Path) -> None:
    """rich and pygments come with tables and help only (httpx's own CLI would bring them: it is kept out)."""
    probe = _probe(tmp_path, ["rich", "pygments", "click"], "list", "--json", "--url", "http://127.0.0.1:9")
    assert probe["code"] == 4
    assert probe["loaded"] == []


def test_each_command_is_registered_by_the_module_main_names_for_it() -> None:
    """``COMMANDS`` is how a command starts with its module alone: it must say what the modules register."""
    for module in COMMAND_MODULES:
        group = typer.main.get_command(build([module]))
        assert isinstance(group, typer.core.TyperGroup)
        assert set(group.commands) == {name for name, owner in COMMANDS.items() if owner == module}, module


def test_a_command_loads_only_the_module_that_registers_it(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "TIDE_DATA_DIR": str(tmp_path / "data")}
    probe = (
        "import sys\nfrom api.client.cli.main import main\n"
        "sys.argv = ['tide', 'list', '--url', 'http://127.0.0.1:9']\n"  # a table: the full CLI's
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('LOADED', sorted(m for m in sys.modules if m.startswith('api.client.cli.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    loaded = done.stdout.rpartition("LOADED ")[2].strip()
    assert "'api.client.cli.jobs'" in loaded, done.stdout + done.stderr
    assert not any(
        f"'api.client.cli.{other}'" in loaded for other in ("admin", "serve", "nodes", "config", "submit")
    )
