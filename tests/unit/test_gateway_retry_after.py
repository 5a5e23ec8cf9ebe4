"""A 429's Retry-After is the real expected wait: the queue's service rate, the window's end.

Before, a full queue said ``Retry-After: 60`` (the queue timeout): a default OpenAI SDK
client slept a minute before each retry while slots freed every fraction of a second.
"""

from __future__ import annotations

import pytest

from sparkllm.gateway.governance.replies import duration, queue_refused, retry_after_ms
from sparkllm.gateway.governance.store import Limit
from sparkllm.gateway.limits import (
    COLD_CAP_SECONDS,
    COLD_SERVICE_SECONDS,
    SERVICE_SAMPLES,
    SERVICE_WINDOW_SECONDS,
    ConcurrencyLimiter,
)


def _limiter(clock: list[float]) -> ConcurrencyLimiter:
    return ConcurrencyLimiter(max_in_flight=2, queue_size=4, timeout=60, clock=lambda: clock[0])


def test_the_wait_follows_the_observed_service_rate() -> None:
    clock = [1000.0]
    limiter = _limiter(clock)
    assert limiter.expected_wait(1) == 10  # nothing given back yet: the cold guess, capped
    for _ in range(10):  # a slot every 0.2 s: 5 a second
        assert limiter.try_acquire()
        clock[0] += 0.2
        limiter.release()
    assert limiter.expected_wait(1) == pytest.approx(0.2)
    assert limiter.expected_wait(4) == pytest.approx(0.8)  # the fourth in line
    clock[0] += 1.0  # nothing finished for a second: the rate is lower now
    assert limiter.expected_wait(1) == pytest.approx(2.8 / 9)
    clock[0] += SERVICE_WINDOW_SECONDS + 1  # stale samples say nothing
    assert limiter.expected_wait(1) == 10


def test_a_cold_burst_is_told_a_short_capped_guess_not_the_queue_timeout() -> None:
    """The demo's first burst got ``Retry-After: 60`` (the queue timeout: no slot given
    back in the last 60 s), and a default SDK slept a minute. With no rate known each
    slot is assumed busy ``COLD_SERVICE_SECONDS``, shared by the slots, capped."""
    assert (COLD_SERVICE_SECONDS, COLD_CAP_SECONDS) == (20.0, 10.0)
    limiter = ConcurrencyLimiter(max_in_flight=8, queue_size=32, timeout=60)
    assert limiter.expected_wait(1) == 2.5  # the next in line: 20 s over 8 slots
    assert limiter.expected_wait(3) == 7.5
    assert limiter.expected_wait(33) == 10  # behind a full queue: the cap
    short = ConcurrencyLimiter(max_in_flight=8, queue_size=32, timeout=4)
    assert short.expected_wait(33) == 4  # never past the queue's own bound
    limiter.try_acquire()
    limiter.release()  # one slot given back is no rate yet
    assert limiter.expected_wait(1) == 2.5


def test_only_the_latest_samples_count() -> None:
    clock = [0.0]
    limiter = _limiter(clock)
    for step in (1.0,) * SERVICE_SAMPLES + (0.1,) * SERVICE_SAMPLES:  # slow, then fast
        assert limiter.try_acquire()
        clock[0] += step
        limiter.release()
    assert limiter.expected_wait(1) == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0123, "13ms"), (1, "1s"), (1.5, "1.5s"), (30, "30s"), (360, "6m0s"), (3723, "1h2m3s")],
)
def test_reset_durations_read_as_openai_writes_them(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_a_queue_refusal_says_the_wait_to_the_millisecond() -> None:
    reply = queue_refused(Limit.QUEUE_FULL, retry_after=0.2345)
    headers = dict(reply.headers())
    assert headers[b"retry-after"] == b"1"  # whole seconds, rounded up: at least one
    assert headers[b"retry-after-ms"] == b"235"  # what OpenAI's SDKs read first
    assert retry_after_ms(0.0) == 1
