"""Debian packages the tests need, installed when missing: Chromium for the browser tests, Prometheus for the
observability test.

``ensure(package, binary)`` returns the binary's path. When it is missing it runs ``apt-get install`` (the
tests run as root on the project's machines and in CI), updating the package lists once if the first try
fails. When that cannot work (no apt-get, not root, the package does not provide the binary) the test is
skipped with the reason, unless ``CI`` is set: then it fails loudly, since CI must run every capability.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def unavailable(reason: str) -> None:
    """Skip with ``reason``, or fail when ``CI`` is set."""
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but these tests cannot run: {reason}")
    pytest.skip(f"{reason} (set CI to make this a failure)")


def _found(binary: str) -> Path | None:
    if os.path.isabs(binary):
        return Path(binary) if Path(binary).exists() else None
    where = shutil.which(binary)
    return Path(where) if where else None


def _apt_install(package: str, binary: str) -> str | None:
    """Install ``package``; None when ``binary`` is then there, else what went wrong."""
    if shutil.which("apt-get") is None:
        return f"{binary} is missing and apt-get is not available to install {package}"
    if os.geteuid() != 0:
        return f"{binary} is missing and installing it needs root: run `apt-get install -y {package}`"
    lock = ["-o", "DPkg::Lock::Timeout=300"]
    install = ["apt-get", "install", "-y", "-q", *lock, package]
    update = ["apt-get", "update", "-q", *lock]
    said = []
    # Try with the package lists as they are; if they are stale or absent, update them and try again.
    for argv in (install, update, install):
        done = subprocess.run(
            argv,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )
        said.append(f"$ {' '.join(argv)}\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
        if argv is install and _found(binary):
            return None
    return f"`apt-get install -y {package}` did not provide {binary}:\n" + "\n".join(said)


def ensure(package: str, binary: str) -> Path:
    """The path of ``binary`` (a name on PATH or an absolute path), installing Debian's ``package`` if needed."""
    found = _found(binary)
    if found is None:
        print(f"\n{binary} is missing: installing Debian's {package} package", file=sys.stderr)
        problem = _apt_install(package, binary)
        found = _found(binary)
        if problem or found is None:
            unavailable(problem or f"{binary} is still missing after installing {package}")
            raise AssertionError("unreachable")  # unavailable() always raises
    return found
