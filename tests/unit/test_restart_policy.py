"""The one restart budget of a launch: a failure within ``max_restarts`` restarts it, past it the job
fails; a launch that does not start is tried once more, then its job fails. The reasons are the events'."""

from __future__ import annotations

from scheduler.elastic.policy import FAILURE, TIMEOUT, Fail, Restart, after_failure, after_timeout

WHAT = "replica 1 exited with code 3"


def test_a_failure_within_the_budget_restarts_from_the_checkpoint() -> None:
    assert after_failure(WHAT, failures=0, allowed=3) == Restart(
        FAILURE, f"{WHAT}; restarting from the checkpoint (failure 1 of max_restarts 3)"
    )
    assert after_failure(WHAT, failures=2, allowed=3) == Restart(
        FAILURE, f"{WHAT}; restarting from the checkpoint (failure 3 of max_restarts 3)"
    )


def test_a_failure_past_the_budget_fails_the_job() -> None:
    assert after_failure(WHAT, failures=3, allowed=3) == Fail(f"{WHAT} after 3 restarts (max_restarts 3)")
    assert after_failure(WHAT, failures=0, allowed=0) == Fail(f"{WHAT} after 0 restarts (max_restarts 0)")


def test_a_stuck_launch_is_retried_once_then_fails() -> None:
    what = "the launch at 2 replicas did not start its workers within 1.5 s"
    assert after_timeout(2, 1.5, retries=0) == Restart(TIMEOUT, f"{what}; trying once more")
    assert after_timeout(2, 1.5, retries=1) == Fail(f"{what}, twice: giving up")
