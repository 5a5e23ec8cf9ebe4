"""Fair queuing over users (limits.py): by weight, not first come; bounds per user."""

from __future__ import annotations

import asyncio

from sparkllm.gateway.limits import ConcurrencyLimiter, SlotResult


async def _served_order(
    limiter: ConcurrencyLimiter, waiters: list[asyncio.Future[SlotResult]], names: list[str]
) -> list[str]:
    """Release one slot at a time and note whose waiter got it."""
    order: list[str] = []
    pending = dict(zip(waiters, names, strict=True))
    while pending:
        limiter.release()
        await asyncio.sleep(0)
        done = [w for w in pending if w.done()]
        assert len(done) == 1, "one freed slot goes to exactly one waiter"
        assert done[0].result() is SlotResult.ACQUIRED
        order.append(pending.pop(done[0]))
    return order


def test_a_light_user_gets_the_next_slot_ahead_of_a_heavy_backlog() -> None:
    async def scenario() -> list[str]:
        limiter = ConcurrencyLimiter(max_in_flight=2, queue_size=32, timeout=60)
        assert limiter.try_acquire()
        assert limiter.try_acquire()
        heavy = [asyncio.ensure_future(limiter.acquire("heavy")) for _ in range(6)]
        await asyncio.sleep(0)
        limiter.release()  # one heavy request is served: virtual time moves on
        await asyncio.sleep(0)
        light = asyncio.ensure_future(limiter.acquire("light"))
        await asyncio.sleep(0)
        rest = [w for w in heavy if not w.done()]
        return await _served_order(limiter, [light, *rest], ["light"] + ["heavy"] * len(rest))

    order = asyncio.run(scenario())
    assert order[0] == "light"
    assert order.count("heavy") == 5


def test_backlogged_users_share_slots_by_weight() -> None:
    async def scenario() -> list[str]:
        limiter = ConcurrencyLimiter(max_in_flight=1, queue_size=64, timeout=60)
        assert limiter.try_acquire()
        waiters: list[asyncio.Future[SlotResult]] = []
        names: list[str] = []
        for _ in range(12):
            for user, weight in (("gold", 2), ("basic", 1)):
                waiters.append(asyncio.ensure_future(limiter.acquire(user, weight=weight)))
                names.append(user)
        await asyncio.sleep(0)
        return await _served_order(limiter, waiters, names)

    order = asyncio.run(scenario())
    first_nine = order[:9]
    assert first_nine.count("gold") == 6  # two to one while both are backlogged
    assert first_nine.count("basic") == 3


def test_one_users_requests_keep_their_order() -> None:
    async def scenario() -> list[str]:
        limiter = ConcurrencyLimiter(max_in_flight=1, queue_size=8, timeout=60)
        assert limiter.try_acquire()
        waiters: list[asyncio.Future[SlotResult]] = [
            asyncio.ensure_future(limiter.acquire("alice")) for _ in range(4)
        ]
        await asyncio.sleep(0)
        return await _served_order(limiter, waiters, ["1", "2", "3", "4"])

    assert asyncio.run(scenario()) == ["1", "2", "3", "4"]


def test_the_users_own_bound_and_push_out_when_the_queue_is_full() -> None:
    async def scenario() -> tuple[SlotResult, SlotResult, list[SlotResult], int]:
        limiter = ConcurrencyLimiter(max_in_flight=1, queue_size=3, timeout=60)
        assert limiter.try_acquire()
        heavy = [asyncio.ensure_future(limiter.acquire("heavy")) for _ in range(3)]
        await asyncio.sleep(0)
        bounded = await limiter.acquire("light", max_queued=0)
        light = asyncio.ensure_future(limiter.acquire("light"))  # full: pushes heavy's newest
        for _ in range(3):
            await asyncio.sleep(0)
        again = await limiter.acquire("heavy")  # heavy cannot push itself out
        pushed = [w.result() for w in heavy if w.done()]
        queued = limiter.queued
        for waiter in [*heavy, light]:
            waiter.cancel()
        return bounded, again, pushed, queued

    bounded, again, pushed, queued = asyncio.run(scenario())
    assert bounded is SlotResult.USER_QUEUE_FULL
    assert again is SlotResult.QUEUE_FULL
    assert pushed == [SlotResult.QUEUE_FULL]
    assert queued == 3
