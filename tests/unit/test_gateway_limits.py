"""The concurrency limiter: slots, FIFO hand-over, queue full, timeout, cancellation."""

from __future__ import annotations

import asyncio

import pytest

from sparkllm.gateway.limits import ConcurrencyLimiter, SlotResult


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_slots_then_queue_then_queue_full() -> None:
    async def scenario() -> None:
        limiter = ConcurrencyLimiter(max_in_flight=2, queue_size=1, timeout=60)
        assert await limiter.acquire() is SlotResult.ACQUIRED
        assert await limiter.acquire() is SlotResult.ACQUIRED
        waiting = asyncio.ensure_future(limiter.acquire())
        await _settle()
        assert (limiter.in_flight, limiter.queued) == (2, 1)
        assert await limiter.acquire() is SlotResult.QUEUE_FULL
        limiter.release()  # handed to the waiter: in_flight stays 2
        assert await waiting is SlotResult.ACQUIRED
        assert (limiter.in_flight, limiter.queued) == (2, 0)
        limiter.release()
        limiter.release()
        assert limiter.in_flight == 0

    asyncio.run(scenario())


def test_waiters_are_served_first_in_first_out() -> None:
    async def scenario() -> list[int]:
        limiter = ConcurrencyLimiter(max_in_flight=1, queue_size=5, timeout=60)
        await limiter.acquire()
        order: list[int] = []

        async def wait(number: int) -> None:
            assert await limiter.acquire() is SlotResult.ACQUIRED
            order.append(number)
            limiter.release()

        tasks = []
        for number in range(5):
            tasks.append(asyncio.ensure_future(wait(number)))
            await _settle()
        limiter.release()
        await asyncio.gather(*tasks)
        assert limiter.in_flight == 0
        return order

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 4]


def test_a_newcomer_does_not_overtake_the_queue() -> None:
    async def scenario() -> None:
        limiter = ConcurrencyLimiter(max_in_flight=1, queue_size=2, timeout=60)
        await limiter.acquire()
        first = asyncio.ensure_future(limiter.acquire())
        await _settle()
        limiter.release()  # the slot goes to `first`, not to whoever asks next
        second = asyncio.ensure_future(limiter.acquire())
        await _settle()
        assert first.done()
        assert not second.done()
        limiter.release()
        assert await second is SlotResult.ACQUIRED

    asyncio.run(scenario())


def test_waiting_too_long_times_out_and_frees_the_queue_place() -> None:
    async def scenario() -> None:
        limiter = ConcurrencyLimiter(max_in_flight=1, queue_size=1, timeout=0.05)
        await limiter.acquire()
        assert await limiter.acquire() is SlotResult.TIMED_OUT
        assert (limiter.in_flight, limiter.queued) == (1, 0)
        limiter.release()
        assert await limiter.acquire() is SlotResult.ACQUIRED

    asyncio.run(scenario())


def test_a_cancelled_waiter_passes_a_handed_over_slot_on() -> None:
    async def scenario() -> None:
        limiter = ConcurrencyLimiter(max_in_flight=1, queue_size=2, timeout=60)
        await limiter.acquire()
        doomed = asyncio.ensure_future(limiter.acquire())
        patient = asyncio.ensure_future(limiter.acquire())
        await _settle()
        limiter.release()  # hands the slot to `doomed`...
        doomed.cancel()  # ...which is cancelled before it could run
        with pytest.raises(asyncio.CancelledError):
            await doomed
        assert await patient is SlotResult.ACQUIRED
        assert (limiter.in_flight, limiter.queued) == (1, 0)

    asyncio.run(scenario())


def test_a_cancelled_waiter_leaves_the_queue() -> None:
    async def scenario() -> None:
        limiter = ConcurrencyLimiter(max_in_flight=1, queue_size=1, timeout=60)
        await limiter.acquire()
        waiter = asyncio.ensure_future(limiter.acquire())
        await _settle()
        waiter.cancel()
        await _settle()
        assert limiter.queued == 0
        limiter.release()
        assert limiter.in_flight == 0

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "arguments",
    [
        {"max_in_flight": 0, "queue_size": 1, "timeout": 1},
        {"max_in_flight": 1, "queue_size": -1, "timeout": 1},
        {"max_in_flight": 1, "queue_size": 1, "timeout": 0},
    ],
)
def test_invalid_limits_are_refused(arguments: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="required"):
        ConcurrencyLimiter(**arguments)  # type: ignore[arg-type]
