"""The Redis governance store against a real ``redis-server`` (sparkllm_dev.redis_fixture).

What is pinned: it decides exactly as the in-process MemoryStore does (the same scripted
sequences give the same grants and refusals, limit and window), settles to what was
used, keeps the ledger across a new client (a gateway restart), lets no lease held by
a gateway that stopped leak past its expiry (settled at the reservation), keeps the
leases of a live one, bounds global slots across clients, and says clearly when Redis
cannot be reached. The concurrency properties are in test_governance_redis_shared.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import TypeVar

import pytest

from sparkllm.errors import GovernanceStoreError
from sparkllm.gateway.governance.redis_store import RedisStore, parse_address
from sparkllm.gateway.governance.store import (
    Admit,
    AdmitRequest,
    Limit,
    MemoryStore,
    Refusal,
    TokenWindow,
    UsageRow,
    UserLimits,
    utc_day,
    window_start,
)
from sparkllm_dev.devcluster.gateway_io import free_port
from sparkllm_dev.redis_fixture import RedisServer

T = TypeVar("T")
HOUR = TokenWindow("hour", 3600, 1000)
DAY = TokenWindow("day", 86400, 1500)
HOUR_AND_DAY = UserLimits(token_windows=(HOUR, DAY))


def store_for(server: RedisServer, prefix: str, *, lease: float = 30.0) -> RedisStore:
    return RedisStore.connect(
        server.address, password=server.password, key_prefix=prefix, lease_seconds=lease
    )


def request(
    now: float,
    *,
    user: str = "alice",
    input_tokens: int = 100,
    output: int = 200,
    min_output: int = 1,
    limits: UserLimits = HOUR_AND_DAY,
) -> AdmitRequest:
    return AdmitRequest(
        user=user,
        input_tokens=input_tokens,
        requested_output_tokens=output,
        min_output_tokens=min_output,
        limits=limits,
        now=now,
    )


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await scenario()

    return asyncio.run(main())


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("redis", ("redis", 6379)),
        ("redis.ns.svc:6380", ("redis.ns.svc", 6380)),
        ("127.0.0.1:7000", ("127.0.0.1", 7000)),
        ("[::1]:7000", ("::1", 7000)),
        ("::1", ("::1", 6379)),
    ],
)
def test_address_forms(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["", ":6379", "redis:port", "redis:0", "redis:70000", "[::1]x"])
def test_bad_addresses_are_refused_by_name(address: str) -> None:
    with pytest.raises(ValueError, match="invalid Redis address"):
        parse_address(address)


@dataclass(frozen=True)
class Step:
    """One call of a scripted sequence: admit ``req`` (and maybe settle it at once)."""

    req: AdmitRequest
    settle_output: int | None = None  # settle right after admitting, with this output


def _outcome(result: Admit | Refusal) -> tuple[object, ...]:
    if isinstance(result, Admit):
        return ("admit", result.granted_output_tokens)
    return ("refuse", result.limit, result.window, round(result.retry_after, 3),
            result.remaining_tokens)  # fmt: skip


async def _replay(store: MemoryStore | RedisStore, steps: list[Step]) -> list[tuple[object, ...]]:
    outcomes = []
    for step in steps:
        result = await store.admit(step.req)
        outcomes.append(_outcome(result))
        if isinstance(result, Admit) and step.settle_output is not None:
            await store.settle(
                result.ticket,
                input_tokens=step.req.input_tokens,
                output_tokens=step.settle_output,
                outcome="ok",
                now=step.req.now,
            )
    return outcomes


def _sequences(now: float) -> dict[str, list[Step]]:
    tight = UserLimits(max_concurrent_requests=2, requests_per_minute=3, token_windows=(HOUR,))
    return {
        # Reservations shrink the grant; a window leaves less than the minimum, then none.
        "budget": [
            Step(request(now, output=800)),
            Step(request(now, input_tokens=50, output=500, min_output=100)),
            Step(request(now, input_tokens=50, output=500)),
            Step(request(now, output=500)),
        ],
        # Settling below the grant gives the rest back to the windows.
        "settle frees": [
            Step(request(now, output=700), settle_output=10),
            Step(request(now, output=700), settle_output=10),
            Step(request(now, output=700)),
        ],
        "concurrency then rpm": [
            Step(request(now, limits=tight)),
            Step(request(now, limits=tight)),
            Step(request(now, limits=tight)),  # two in progress
            Step(request(now, user="bob", limits=tight), settle_output=5),
            Step(request(now, user="bob", limits=tight), settle_output=5),
            Step(request(now, user="bob", limits=tight), settle_output=5),
            Step(request(now, user="bob", limits=tight)),  # fourth this minute
        ],
        "users apart": [
            Step(request(now, input_tokens=990, output=10)),
            Step(request(now, output=10)),
            Step(request(now, user="bob", output=10)),
        ],
        "next hour": [
            Step(request(now, input_tokens=900, output=100), settle_output=100),
            Step(request(now, output=10)),
            Step(request(window_start(now, 3600) + 3600 + 1, output=10)),
        ],
        "unlimited": [Step(request(now, limits=UserLimits(), output=5000))],
        # A request may ask for less than the minimum: it gets it while it fits.
        "less than the minimum": [
            Step(request(now, input_tokens=900, output=80)),
            Step(request(now, input_tokens=5, output=10, min_output=50)),
            Step(request(now, input_tokens=2, output=20, min_output=50)),
        ],
    }


@pytest.mark.parametrize("name", sorted(_sequences(0.0)))
def test_decides_as_the_memory_store(
    redis_server: RedisServer, redis_prefix: str, name: str
) -> None:
    steps = _sequences(time.time())[name]

    async def both() -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
        store = store_for(redis_server, redis_prefix)
        try:
            return await _replay(MemoryStore(), steps), await _replay(store, steps)
        finally:
            await store.aclose()

    expected, got = run(both)
    assert got == expected


def test_the_sequences_reach_every_store_limit() -> None:
    """The control: the sequences above meet each limit a store decides, and a freed grant."""

    async def outcomes() -> dict[str, list[tuple[object, ...]]]:
        return {
            name: await _replay(MemoryStore(), steps)
            for name, steps in _sequences(time.time()).items()
        }

    seen = run(outcomes)
    limits = {o[1] for results in seen.values() for o in results if o[0] == "refuse"}
    assert limits == {Limit.CONCURRENCY, Limit.REQUESTS_PER_MINUTE, Limit.TOKENS, Limit.MIN_OUTPUT}
    assert seen["settle frees"] == [("admit", 700), ("admit", 700), ("admit", 680)]
    assert seen["budget"][0] == ("admit", 800)
    assert seen["budget"][2] == ("admit", 50)
    assert seen["less than the minimum"][1] == ("admit", 10)
    assert seen["less than the minimum"][2][:2] == ("refuse", Limit.MIN_OUTPUT)


def test_settle_charges_what_was_used_and_is_idempotent(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    now = time.time()
    client = redis_server.client()

    async def scenario() -> Admit | Refusal:
        store = store_for(redis_server, redis_prefix)
        try:
            first = await store.admit(request(now, output=300))
            assert isinstance(first, Admit)
            assert first.granted_output_tokens == 300
            key = f"{redis_prefix}:tokens:hour:{window_start(now, 3600)}:alice"
            assert int(client.get(key) or 0) == 400  # input + granted, reserved
            for _ in range(2):  # the second settle of one ticket changes nothing
                await store.settle(
                    first.ticket, input_tokens=100, output_tokens=42, outcome="ok", now=now
                )
            assert int(client.get(key) or 0) == 142
            assert client.zcard(f"{redis_prefix}:leases") == 0
            assert client.get(f"{redis_prefix}:busy:alice") is None
            return await store.admit(request(now, output=10_000))
        finally:
            await store.aclose()

    last = run(scenario)
    assert isinstance(last, Admit)
    assert last.granted_output_tokens == 1000 - 142 - 100  # the hour window's rest
    day = utc_day(now)
    rows = run(lambda: _usage(redis_server, redis_prefix, day_from=day, day_to=day))
    assert [(r.user, dict(r.requests), r.input_tokens, r.output_tokens) for r in rows] == [
        ("alice", {"ok": 1}, 100, 42)
    ]


async def _usage(
    server: RedisServer, prefix: str, *, day_from: date, day_to: date
) -> list[UsageRow]:
    store = store_for(server, prefix)
    try:
        return await store.usage(day_from=day_from, day_to=day_to)
    finally:
        await store.aclose()


def test_ledger_survives_a_new_client_per_user_per_day(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    """A gateway restart is a new client on the same Redis: the ledger is all there."""
    now = time.time()
    days = [now, now + 86400, now + 2 * 86400]
    calls = [(days[0], "alice", 10, 5, "ok"), (days[0], "bob", 20, 0, "client_disconnected"),
             (days[1], "alice", 30, 7, "ok"), (days[1], "alice", 1, 1, "error"),
             (days[2], "carol", 2, 2, "ok")]  # fmt: skip

    async def record(store: MemoryStore | RedisStore) -> None:
        for at, user, used_in, used_out, outcome in calls:
            admitted = await store.admit(request(at, user=user, limits=UserLimits()))
            assert isinstance(admitted, Admit)
            await store.settle(admitted.ticket, input_tokens=used_in, output_tokens=used_out,
                               outcome=outcome, now=at)  # fmt: skip

    async def scenario() -> tuple[list[UsageRow], list[UsageRow]]:
        memory, first = MemoryStore(), store_for(redis_server, redis_prefix)
        await record(memory)
        await record(first)
        await first.aclose()  # the gateway stops
        day_from, day_to = utc_day(days[0]), utc_day(days[1])
        return (
            await memory.usage(day_from=day_from, day_to=day_to),
            await _usage(redis_server, redis_prefix, day_from=day_from, day_to=day_to),
        )

    expected, got = run(scenario)
    assert len(got) == 3  # carol's day is outside the range
    assert got == expected
    assert got[0].day == utc_day(now)
    assert got[2].day == utc_day(now) + timedelta(days=1)


def test_a_dead_gateways_reservation_lapses_settled_at_what_it_reserved(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    now = time.time()
    one_at_a_time = UserLimits(max_concurrent_requests=1, token_windows=(HOUR,))

    async def scenario() -> tuple[Admit | Refusal, Admit | Refusal]:
        dead = store_for(redis_server, redis_prefix, lease=0.3)
        held = await dead.admit(request(now, output=250, limits=one_at_a_time))
        assert isinstance(held, Admit)
        await dead.aclose()  # stops refreshing, never settles: a crashed gateway
        other = store_for(redis_server, redis_prefix, lease=0.3)
        try:
            during = await other.admit(request(now, limits=one_at_a_time))
            await asyncio.sleep(0.5)
            after = await other.admit(request(now, output=10_000, limits=one_at_a_time))
            return during, after
        finally:
            await other.aclose()

    during, after = run(scenario)
    assert isinstance(during, Refusal)
    assert during.limit is Limit.CONCURRENCY
    assert isinstance(after, Admit)  # the place came back...
    assert after.granted_output_tokens == 1000 - 350 - 100  # ...the reservation did not
    day = utc_day(time.time())
    rows = run(lambda: _usage(redis_server, redis_prefix, day_from=day, day_to=day))
    assert [(r.user, dict(r.requests), r.input_tokens, r.output_tokens) for r in rows] == [
        ("alice", {"expired": 1}, 100, 250)
    ]


def test_a_live_gateway_keeps_its_leases(redis_server: RedisServer, redis_prefix: str) -> None:
    now = time.time()
    one_at_a_time = UserLimits(max_concurrent_requests=1)

    async def scenario() -> tuple[Admit | Refusal, bool, Admit | Refusal]:
        live = store_for(redis_server, redis_prefix, lease=0.3)
        other = store_for(redis_server, redis_prefix, lease=0.3)
        try:
            held = await live.admit(request(now, limits=one_at_a_time))
            assert isinstance(held, Admit)
            assert await live.acquire_slot("live-1", limit=1)
            await asyncio.sleep(1.0)  # three leases long: only refreshing keeps them
            blocked = await other.admit(request(now, limits=one_at_a_time))
            slot = await other.acquire_slot("other-1", limit=1)
            await live.settle(held.ticket, input_tokens=1, output_tokens=1, outcome="ok", now=now)
            return blocked, slot, await other.admit(request(now, limits=one_at_a_time))
        finally:
            await live.aclose()
            await other.aclose()

    blocked, slot, later = run(scenario)
    assert isinstance(blocked, Refusal)
    assert blocked.limit is Limit.CONCURRENCY
    assert slot is False
    assert isinstance(later, Admit)


def test_slots_are_bounded_across_clients_and_lapse_when_a_holder_dies(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    async def scenario() -> list[bool]:
        first = store_for(redis_server, redis_prefix, lease=0.3)
        second = store_for(redis_server, redis_prefix, lease=0.3)
        try:
            got = [
                await first.acquire_slot("a", limit=2),
                await second.acquire_slot("b", limit=2),
                await second.acquire_slot("c", limit=2),  # full
                await first.acquire_slot("a", limit=2),  # a holder asking again keeps its one
                await second.acquire_slot("a", limit=2),  # one name, another replica: not its
            ]
            await first.release_slot("a")
            got.append(await second.acquire_slot("a", limit=2))
            await second.aclose()  # b and c are held by a gateway that stopped
            got.append(await first.acquire_slot("d", limit=2))
            await asyncio.sleep(0.5)
            got.append(await first.acquire_slot("d", limit=2))
            return got
        finally:
            await first.aclose()

    assert run(scenario) == [True, True, False, True, False, True, False, True]


def test_an_unreachable_redis_is_a_clear_error_never_a_silent_admit() -> None:
    port = free_port("127.0.0.1")

    async def scenario() -> None:
        store = RedisStore.connect(f"127.0.0.1:{port}", password="x", key_prefix="p")
        try:
            with pytest.raises(GovernanceStoreError, match=r"governance store \(Redis\)"):
                await store.admit(request(time.time()))
            with pytest.raises(GovernanceStoreError, match="take a slot"):
                await store.acquire_slot("h", limit=1)
            with pytest.raises(GovernanceStoreError, match="be reached"):
                await store.ping()
            # After the answer went out: logged, and the lease settles it.
            await store.settle("t", input_tokens=1, output_tokens=1, outcome="ok", now=0.0)
            await store.release_slot("h")
        finally:
            await store.aclose()

    run(scenario)


def test_a_wrong_password_is_a_clear_error(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        store = RedisStore.connect(redis_server.address, password="wrong", key_prefix="p")
        try:
            with pytest.raises(GovernanceStoreError, match="could not admit"):
                await store.admit(request(time.time()))
        finally:
            await store.aclose()

    run(scenario)
