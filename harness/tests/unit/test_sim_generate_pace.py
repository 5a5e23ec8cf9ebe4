"""The simulator's decode clock: tokens are due on a fixed schedule from the first token."""

from __future__ import annotations

import asyncio

import pytest

from sparkllm_dev.sim import generate
from sparkllm_dev.sim.health import Progress


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


def test_a_late_token_does_not_shift_the_ones_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(100.0)
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(round(seconds, 9))
        clock.now += seconds

    monkeypatch.setattr(generate, "time", clock)
    monkeypatch.setattr(generate.asyncio, "sleep", fake_sleep)
    pace = generate._DecodePace(0.1, start=100.0, progress=Progress())

    async def scenario() -> None:
        clock.now = 100.05  # streaming the first token took 50 ms
        await pace.next_token()  # token 1 due at 100.1
        clock.now = 100.35  # the process was descheduled for a while
        await pace.next_token()  # token 2 was due at 100.2: no wait
        await pace.next_token()  # token 3 was due at 100.3: no wait
        await pace.next_token()  # token 4 due at 100.4: back on the clock

    asyncio.run(scenario())
    assert slept == [0.05, 0.0, 0.0, 0.05]
    assert clock.now == pytest.approx(100.4)
