"""Priority classes and the tokens the fair queue charges (limits.py, policy.py, gate.py).

The rules pinned: an interactive waiter goes before every batch waiter, whenever they
came; batch requests never hold the slots reserved for interactive ones (a free reserved
slot is an interactive newcomer's at once, with batch work queued); the reservation
never locks batch out; the policy's classes (``sparkllm:bench`` is batch unless named);
and the governor charges a request's prompt when it takes a slot, its output at the
engine's cost when it settles, and nothing for a request that never held a slot.
"""

from __future__ import annotations

import asyncio

import pytest

from sparkllm.gateway.governance.gate import Pass
from sparkllm.gateway.governance.meter import Used
from sparkllm.gateway.governance.policy import Policy
from sparkllm.gateway.governance.store import MemoryStore
from sparkllm.gateway.limits import OUTPUT_TOKEN_COST, ConcurrencyLimiter, Priority, SlotResult
from sparkllm.render.names import BENCH_USER
from tests.unit.test_governance_redis_roundtrips import (
    USER,
    decision,
    governor_for,
    never_disconnects,
)

BATCH, INTERACTIVE = Priority.BATCH, Priority.INTERACTIVE


def test_an_interactive_waiter_goes_before_batch_waiters_that_came_first() -> None:
    async def scenario() -> list[str]:
        limiter = ConcurrencyLimiter(max_in_flight=1, queue_size=8, timeout=60)
        assert limiter.try_acquire("someone")
        batch = [asyncio.ensure_future(limiter.acquire("jobs", priority=BATCH)) for _ in range(3)]
        await asyncio.sleep(0)
        chat = asyncio.ensure_future(limiter.acquire("alice", input_tokens=10**6))
        await asyncio.sleep(0)
        pending = dict(zip([*batch, chat], ["b1", "b2", "b3", "alice"], strict=True))
        order: list[str] = []
        held = INTERACTIVE
        while pending:
            limiter.release(held)  # given back as the class it was taken as
            await asyncio.sleep(0)
            (done,) = [w for w in pending if w.done()]
            order.append(pending.pop(done))
            held = INTERACTIVE if order[-1] == "alice" else BATCH
        return order

    # alice has been charged nothing yet but would go first even if served the most:
    # the class is compared before the service.
    assert asyncio.run(scenario()) == ["alice", "b1", "b2", "b3"]


def test_batch_never_takes_the_reserved_slots_and_interactive_finds_them_free() -> None:
    async def scenario() -> tuple[bool, bool, SlotResult, bool, int]:
        limiter = ConcurrencyLimiter(max_in_flight=3, queue_size=8, timeout=60)
        limiter.reserve(1)
        assert limiter.try_acquire("jobs", priority=BATCH)
        assert limiter.try_acquire("jobs", priority=BATCH)
        third = limiter.try_acquire("jobs", priority=BATCH)  # only the reserved slot is free
        waiting = asyncio.ensure_future(limiter.acquire("jobs", priority=BATCH))
        await asyncio.sleep(0)
        chat = limiter.try_acquire("alice")  # batch is queued, yet the reserved slot is hers
        limiter.release(BATCH)  # a batch slot frees: the queued batch request takes it
        await asyncio.sleep(0)
        got = waiting.result()
        limiter.release(INTERACTIVE)  # the reserved slot frees: batch may not have it
        still_free = limiter.try_acquire("bob")
        return third, chat, got, still_free, limiter.in_flight

    third, chat, got, still_free, in_flight = asyncio.run(scenario())
    assert (third, chat, got, still_free, in_flight) == (False, True, SlotResult.ACQUIRED, True, 3)


def test_the_reservation_never_locks_batch_out_and_a_lower_one_lets_batch_go() -> None:
    async def scenario() -> tuple[int, bool, SlotResult]:
        limiter = ConcurrencyLimiter(max_in_flight=2, queue_size=8, timeout=60)
        limiter.reserve(5)  # at most all slots but one
        reserved = limiter.reserved_slots
        assert limiter.try_acquire("jobs", priority=BATCH)
        second = limiter.try_acquire("jobs", priority=BATCH)
        waiting = asyncio.ensure_future(limiter.acquire("jobs", priority=BATCH))
        await asyncio.sleep(0)
        limiter.reserve(0)  # the policy changed: the free slot is batch's now
        await asyncio.sleep(0)
        return reserved, second, waiting.result()

    assert asyncio.run(scenario()) == (1, False, SlotResult.ACQUIRED)


def test_the_policy_classes_and_the_operators_jobs_run_as_batch_by_default() -> None:
    policy = Policy.parse("users: {carol: {priority: batch}}\n")
    assert policy.for_user("alice").priority is INTERACTIVE  # the default class
    assert policy.for_user("carol").priority is BATCH
    assert policy.for_user(BENCH_USER).priority is BATCH
    assert policy.reserved_interactive_slots == 1  # the default reservation
    named = Policy.parse(
        f"reservedInteractiveSlots: 3\nusers: {{'{BENCH_USER}': {{priority: interactive}}}}\n"
    )
    assert named.for_user(BENCH_USER).priority is INTERACTIVE
    assert named.reserved_interactive_slots == 3
    everyone = Policy.parse("defaults: {priority: batch}\n")
    assert everyone.for_user("alice").priority is BATCH
    with pytest.raises(ValueError, match="priority"):
        Policy.parse("defaults: {priority: urgent}\n")


def test_the_governor_charges_the_prompt_at_the_slot_and_the_output_when_settled() -> None:
    async def scenario() -> tuple[float, float, float]:
        governor = governor_for(MemoryStore(), slots=1)
        limiter = governor.limiter
        granted = await governor.admit(USER, decision(input_tokens=300), policy=Policy.parse("{}"))
        assert isinstance(granted, Pass)
        holder = await governor.wait_for_slot(granted, never_disconnects)
        assert isinstance(holder, str)
        at_slot = limiter.attained(USER)
        await governor.release(holder)
        # The engine said the prompt was 280 (the slot was charged 300) and made 20 tokens.
        await governor.finish(granted, used=Used(280, 20, measured=True), outcome="ok")
        settled = limiter.attained(USER)
        # A request refused in the queue (the user's own bound) never held a slot.
        assert limiter.try_acquire("carol")  # the only slot is taken
        other = await governor.admit("bob", decision(), policy=Policy.parse("{}"))
        assert isinstance(other, Pass)
        refused = await governor.slots.wait(
            ticket=other.ticket,
            user="bob",
            weight=1,
            max_queued=0,
            receive=never_disconnects,
            input_tokens=10,
        )
        assert not isinstance(refused, str)
        await governor.finish(other, used=Used(0, 0, measured=False), outcome="rate_limited")
        return at_slot, settled, limiter.attained("bob")

    at_slot, settled, bob = asyncio.run(scenario())
    assert at_slot == pytest.approx(300, rel=1e-3)  # decay over a test's milliseconds
    assert settled == pytest.approx(280 + OUTPUT_TOKEN_COST * 20, rel=1e-3)
    assert bob == 0.0
