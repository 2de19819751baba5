"""``tide`` tells a researcher when a waiting job should start: ``--expected-duration`` on submit, an ETA column
in ``tide list``, a sentence in ``tide describe job``; a duration it cannot read exits 2 saying what to type."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from servicekit import wait_for
from test_cli_commands import cli_bridge, tide

from api.server.testing import ASGIBridge


@pytest.fixture
def bridge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ASGIBridge]:
    with cli_bridge(tmp_path, monkeypatch, eta_every=0.2) as bridge:
        yield bridge


@pytest.mark.usefixtures("bridge")
def test_a_waiting_job_shows_when_it_should_start_in_list_and_describe() -> None:
    assert tide("project", "create", "team-a", "--deserved", "4").exit_code == 0
    submit = ["submit-dist", "pytorch", "-p", "team-a"]
    big = tide(*submit, "--name", "big", "--workers", "3", "--expected-duration", "2h", "--", "sleep", "600")
    assert big.exit_code == 0, big.output
    wait_for(lambda: "running" in tide("list", "-p", "team-a").output, what="big to run")
    assert tide(*submit, "--name", "next", "--workers", "1", "--", "sleep", "600").exit_code == 0
    # big declared 2 h (p90: 25 % more) and started a moment ago; the forecast's clock steps 10 s
    listed = wait_for(
        lambda: re.search(r"~(1h59m|2h)\.\.2h(29|30)m", out := tide("list", "-p", "team-a").output) and out,
        timeout=60,
        what="the ETA column",
    )
    assert "ETA" in listed  # type: ignore[operator]
    described = tide("describe", "job", "next", "-p", "team-a").output
    assert re.search(r"ETA: +Expected to start in about (1h59m|2h) \(around \d\d:\d\d UTC\)", described)
    assert (
        "with 2 replicas, when team-a/big ends (its end estimated from its declared duration)." in described
    )
    assert "Expected:   runs about 2h (declared)" in tide("describe", "job", "big", "-p", "team-a").output


@pytest.mark.usefixtures("bridge")
def test_a_duration_the_cli_cannot_read_exits_2_with_what_to_type() -> None:
    assert tide("project", "create", "team-a", "--deserved", "1").exit_code == 0
    result = tide("submit-dist", "pytorch", "-p", "team-a", "--name", "j", "--expected-duration", "2 hours",
                  "--", "true")  # fmt: skip
    assert result.exit_code == 2
    assert "--expected-duration: '2 hours' is not a duration: give seconds, or e.g. 90m, 2h" in result.output
