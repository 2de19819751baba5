"""The installed Tide's version, as its package metadata says (``tide version``, ``GET /healthz``).

Contract: ``package_version()`` is the version of the installed ``tide-scheduler`` distribution (the one
``pyproject.toml`` declares), or ``"unknown"`` when Tide runs from a tree that was never installed.
Standard library only; ``importlib.metadata`` is imported when asked, not by every CLI command.
"""

from __future__ import annotations

DISTRIBUTION = "tide-scheduler"


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 - see the docstring

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"
