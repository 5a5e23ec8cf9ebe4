"""Restart times survive the status round trip to the millisecond (backoffs are in seconds)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sparkllm.api import RestartPolicySpec
from sparkllm.reconcile.replicas import history_from_status, precise_timestamp, timestamp
from sparkllm.reconcile.restarts import backoff_delay


def test_precise_timestamp_round_trips_milliseconds() -> None:
    moment = datetime(2026, 3, 1, 12, 0, 0, 987_000, tzinfo=UTC)
    text = precise_timestamp(moment)
    assert text == "2026-03-01T12:00:00.987Z"
    history = history_from_status({"restartTimes": [text]}, reset_budget=False)
    assert history.restart_times == (moment,)
    assert timestamp(moment) == "2026-03-01T12:00:00Z"  # conditions keep whole seconds


def test_backoff_is_measured_from_the_precise_restart_time() -> None:
    stopped = datetime(2026, 3, 1, 12, 0, 0, 900_000, tzinfo=UTC)
    history = history_from_status(
        {"restartTimes": [precise_timestamp(stopped)]}, reset_budget=False
    )
    due = history.restart_times[-1] + backoff_delay(RestartPolicySpec(backoff_seconds=(1,)), 1)
    # With whole-second times the restart could start 0.9 s early; now it cannot.
    assert due == stopped + timedelta(seconds=1)


def test_a_spec_change_resets_the_budget_window() -> None:
    status = {"restartTimes": ["2026-03-01T12:00:00.000Z"], "budgetExhausted": True}
    history = history_from_status(status, reset_budget=True)
    assert history.restart_times == ()
    assert history.exhausted is False
