"""A 429's Retry-After is the real expected wait: the queue's service rate, the window's end.

Before, a full queue said ``Retry-After: 60`` (the queue timeout): a default OpenAI SDK
client slept a minute before each retry while slots freed every fraction of a second.
"""

from __future__ import annotations

import pytest

from sparkllm.gateway.governance.replies import duration, queue_refused, retry_after_ms
from sparkllm.gateway.governance.store import Limit
from sparkllm.gateway.limits import SERVICE_SAMPLES, SERVICE_WINDOW_SECONDS, ConcurrencyLimiter


def _limiter(clock: list[float]) -> ConcurrencyLimiter:
    return ConcurrencyLimiter(max_in_flight=2, queue_size=4, timeout=60, clock=lambda: clock[0])


def test_the_wait_follows_the_observed_service_rate() -> None:
    clock = [1000.0]
    limiter = _limiter(clock)
    assert limiter.expected_wait(1) == 60  # nothing given back yet: the rate is unknown
    for _ in range(10):  # a slot every 0.2 s: 5 a second
        assert limiter.try_acquire()
        clock[0] += 0.2
        limiter.release()
    assert limiter.expected_wait(1) == pytest.approx(0.2)
    assert limiter.expected_wait(4) == pytest.approx(0.8)  # the fourth in line
    clock[0] += 1.0  # nothing finished for a second: the rate is lower now
    assert limiter.expected_wait(1) == pytest.approx(2.8 / 9)
    clock[0] += SERVICE_WINDOW_SECONDS + 1  # stale samples say nothing
    assert limiter.expected_wait(1) == 60


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
