"""The dashboard's files as ``tide serve`` ships them: no browser needed (tests/browser drives a real one).

``/`` serves the page with a Content-Security-Policy that allows this origin only and ``no-cache``; every file
the page or its modules reference is served with the right type; nothing points outside the server; every
file sits where ``pyproject.toml``'s package data (``static/*``) ships it.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from servicekit import RunningService

from api.server.dashboard import STATIC

TYPES = {".js": "javascript", ".css": "text/css", ".svg": "image/svg+xml", ".html": "text/html"}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def svc(make_service: Callable[..., RunningService]) -> RunningService:
    return make_service()


def referenced(name: str, text: str) -> set[str]:
    """Local files a static file names: src/href in HTML, module imports in JS."""
    if name.endswith(".html"):
        found = set(re.findall(r'(?:src|href)="([^"#?]+)"', text))
    else:
        found = set(re.findall(r'from "\./([^"]+)"', text))
    return found


def test_the_page_and_everything_it_loads_is_served_from_the_package(svc: RunningService) -> None:
    page = httpx.get(f"{svc.url}/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert '<script type="module" src="app.js"></script>' in page.text
    assert page.headers["cache-control"] == "no-cache"
    assert "default-src 'self'" in page.headers["content-security-policy"]
    again = httpx.get(f"{svc.url}/", headers={"If-None-Match": page.headers["etag"]})
    assert again.status_code == 304

    files = {p.name: p.read_text() for p in STATIC.iterdir()}
    wanted = {"index.html"}
    for name, text in files.items():
        wanted |= referenced(name, text)
        outside = set(re.findall(r"https?://[^\s\"')]+", text)) - {
            "http://www.w3.org/2000/svg"
        }  # a namespace
        assert not outside, f"{name} points outside the server: {outside}"
    assert wanted <= set(files), f"missing: {wanted - set(files)}"
    for name in sorted(wanted):
        answer = httpx.get(f"{svc.url}/{name}")
        assert answer.status_code == 200, name
        assert TYPES[Path(name).suffix] in answer.headers["content-type"], (
            name,
            answer.headers["content-type"],
        )
    assert httpx.get(f"{svc.url}/nothing-here.js").status_code == 404


def test_every_static_file_is_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["setuptools"]["package-data"]["api.server.dashboard"] == ["static/*"]
    assert all(p.is_file() for p in STATIC.iterdir()), "static/* ships files only: keep the folder flat"
