"""The words and figures a researcher reads about a forecast, and the durations they may type."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from api.client.cli.eta_words import eta_cell, eta_sentence, parse_duration, span
from api.client.client_types import EtaPublic, JobPublic

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("3600", 3600),
        ("90m", 5400),
        ("2h", 7200),
        ("1h30m", 5400),
        ("1d", 86400),
        ("45s", 45),
        ("1.5h", 5400),
    ],
)
def test_durations_a_researcher_types(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["2 hours", "h", "", "0", "-5", "1h-5m", "inf"])
def test_what_is_no_duration_says_what_to_type(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_spans_keep_the_two_largest_units() -> None:
    assert [span(s) for s in (5, 720, 3600, 4800, 86400, 93600)] == ["5s", "12m", "1h", "1h20m", "1d", "1d2h"]


def _job(status: str = "pending", **fields: Any) -> JobPublic:
    base: dict[str, Any] = {
        "project": "a", "name": "j", "status": status, "workers": 0, "min_replicas": 1, "max_replicas": 4,
        "gpus_per_replica": 1, "replicas_now": 0, "allocated_gpus": 0, "pending_reason": None,
        "queue_position": 1, "restarts": 0, "interactive": False, "priority": 0, "image": None,
        "command": ["x"], "env_names": [], "message": None, "created_at": NOW, "finished_at": None,
        "replicas": [],
    }  # fmt: skip
    return JobPublic(**(base | fields))


def _eta(
    p50: float | None, p90: float | None, *, after: str | None = "a/big", source: str = "project"
) -> EtaPublic:
    def at(minutes: float | None) -> datetime | None:
        return None if minutes is None else NOW + timedelta(minutes=minutes)

    return EtaPublic(at(p50), at(p90), 2, after, source, NOW)


def test_a_pending_job_with_a_band() -> None:
    job = _job(eta=_eta(80, 125))
    assert eta_cell(job, NOW) == "~1h20m..2h05m"
    assert eta_sentence(job, NOW) == (
        "expected to start in about 1h20m (around 13:20 UTC), most likely by 14:05 UTC, with 2 replicas, "
        "when a/big ends (its end estimated from its project's recent jobs of the same shape)"
    )


def test_free_gpus_growth_and_no_time_within_the_horizon() -> None:
    free = _job(eta=_eta(0, 0, after=None))
    assert eta_cell(free, NOW) == "~0s"
    assert eta_sentence(free, NOW) == (
        "expected to start in about 0s (around 12:00 UTC), with 2 replicas: the GPUs it needs are free or being freed"
    )
    grows = _job("running", grow_at=_eta(5, 5, source="default"))
    assert eta_cell(grows, NOW) == "grow ~5m"
    assert "expected to grow to 2 replicas in about 5m" in (eta_sentence(grows, NOW) or "")
    never = _job(eta=_eta(None, None))
    assert eta_cell(never, NOW) == "not soon"
    assert eta_sentence(never, NOW) == "not expected to start within the next 7 days if nothing changes"


def test_no_forecast_no_words() -> None:
    assert eta_cell(_job(), NOW) == "" and eta_sentence(_job(), NOW) is None
    assert eta_sentence(_job("succeeded", eta=_eta(1, 2))) is None
    assert eta_cell(_job("running", eta=_eta(1, 2))) == ""
