"""Fair queuing over users (limits.py): by weighted tokens served, decayed, not first come;
bounds per user."""

from __future__ import annotations

import asyncio

import pytest

from sparkllm.gateway.limits import (
    DECAY_HALF_LIFE_SECONDS,
    OUTPUT_TOKEN_COST,
    ConcurrencyLimiter,
    Measure,
    SlotResult,
)


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
        assert limiter.try_acquire("heavy", input_tokens=500)
        assert limiter.try_acquire("heavy", input_tokens=500)
        heavy = [
            asyncio.ensure_future(limiter.acquire("heavy", input_tokens=500)) for _ in range(6)
        ]
        await asyncio.sleep(0)
        limiter.release()  # one heavy request is served: heavy's service grows
        await asyncio.sleep(0)
        light = asyncio.ensure_future(limiter.acquire("light", input_tokens=500))
        await asyncio.sleep(0)
        rest = [w for w in heavy if not w.done()]
        return await _served_order(limiter, [light, *rest], ["light"] + ["heavy"] * len(rest))

    order = asyncio.run(scenario())
    assert order[0] == "light"
    assert order.count("heavy") == 5


def _tokens_served(
    *, measure: Measure, users: dict[str, tuple[int, int]], grants: int
) -> dict[str, int]:
    """Both users backlogged behind one slot; the prompt tokens each was given over
    ``grants`` slots. ``users``: name -> (prompt tokens per request, weight)."""

    async def scenario() -> dict[str, int]:
        limiter = ConcurrencyLimiter(
            max_in_flight=1, queue_size=2 * grants, timeout=60, measure=measure
        )
        assert limiter.try_acquire("nobody")
        waiters: list[asyncio.Future[SlotResult]] = []
        names: list[str] = []
        for _ in range(grants):
            for user, (prompt, weight) in users.items():
                waiter = limiter.acquire(user, weight=weight, input_tokens=prompt)
                waiters.append(asyncio.ensure_future(waiter))
                names.append(user)
        await asyncio.sleep(0)
        served = {user: 0 for user in users}
        pending = dict(zip(waiters, names, strict=True))
        for _ in range(grants):
            limiter.release()
            await asyncio.sleep(0)
            done = [w for w in pending if w.done()]
            assert len(done) == 1
            served[pending.pop(done[0])] += users[names[waiters.index(done[0])]][0]
        for waiter in pending:
            waiter.cancel()
        await asyncio.sleep(0)
        return served

    return asyncio.run(scenario())


def test_a_long_prompt_and_a_short_prompt_user_get_equal_tokens_not_equal_slots() -> None:
    users = {"long": (8000, 1), "short": (200, 1)}
    by_tokens = _tokens_served(measure=Measure.TOKENS, users=users, grants=90)
    # Equal within one long prompt: 80 short prompts for every two long ones.
    assert abs(by_tokens["long"] - by_tokens["short"]) <= 8000
    by_slots = _tokens_served(measure=Measure.REQUESTS, users=users, grants=90)
    assert by_slots["long"] == 40 * by_slots["short"]  # the slot order: 45 grants each


def test_backlogged_users_share_tokens_by_weight() -> None:
    users = {"gold": (100, 2), "basic": (100, 1)}
    served = _tokens_served(measure=Measure.TOKENS, users=users, grants=30)
    assert served == {"gold": 2000, "basic": 1000}  # two to one while both are backlogged


def test_output_is_charged_at_its_engine_cost_and_a_refund_lowers_service() -> None:
    limiter = ConcurrencyLimiter(max_in_flight=1, queue_size=1, timeout=1, clock=lambda: 0.0)
    limiter.charge("alice", input_tokens=100, output_tokens=10)
    assert limiter.attained("alice") == 100 + OUTPUT_TOKEN_COST * 10
    limiter.charge("alice", weight=2, input_tokens=-40)
    assert limiter.attained("alice") == 140 - 20
    limiter.charge("bob", input_tokens=-5)  # never below zero
    assert limiter.attained("bob") == 0.0


def test_attained_service_decays_by_half_each_half_life() -> None:
    now = [0.0]
    limiter = ConcurrencyLimiter(
        max_in_flight=1, queue_size=1, timeout=1, clock=lambda: now[0], half_life=60
    )
    limiter.charge("alice", input_tokens=1000)
    now[0] = 60.0
    assert limiter.attained("alice") == pytest.approx(500)
    limiter.charge("alice", input_tokens=100)
    now[0] = 180.0
    assert limiter.attained("alice") == pytest.approx(600 / 4)
    assert DECAY_HALF_LIFE_SECONDS == 60.0  # the documented default


def test_a_user_served_long_ago_goes_before_one_served_just_now() -> None:
    async def scenario() -> list[str]:
        now = [0.0]
        limiter = ConcurrencyLimiter(
            max_in_flight=1, queue_size=8, timeout=600, clock=lambda: now[0], half_life=60
        )
        limiter.charge("old", input_tokens=8000)  # much more, but ten minutes ago
        now[0] = 600.0
        limiter.charge("recent", input_tokens=100)
        assert limiter.try_acquire("other")
        waiters = [
            asyncio.ensure_future(limiter.acquire("recent")),
            asyncio.ensure_future(limiter.acquire("old")),
        ]
        await asyncio.sleep(0)
        return await _served_order(limiter, waiters, ["recent", "old"])

    assert asyncio.run(scenario()) == ["old", "recent"]


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
