"""Fewer round trips to the shared store, and every slot still paired (real ``redis-server``).

What is pinned, counting the store's calls to Redis: a request that finds a local slot
free costs two scripts — ``admit`` takes the budget and the global slot together, and
``finish`` settles and releases in one — and nothing in between. The other paths keep
every guarantee: a request that must queue locally takes the global slot only once it
has its local one; one that finds every global slot taken at admission waits for one;
a finished request's global slot goes to the next local request without a trip (the
spare), never past the global bound; slots taken at admission and never asked for, a
refusal and an unreachable store all give the local slot back and leave no global one.
The same pairing under a burst in process (MemoryStore) is in test_governance_slots.py;
across two gateway processes on one Redis in test_governance_redis_shared.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sparkllm.gateway.admission import Admitted
from sparkllm.gateway.governance import redis_scripts as scripts
from sparkllm.gateway.governance.gate import Governor, Pass
from sparkllm.gateway.governance.meter import Used
from sparkllm.gateway.governance.policy import UNGOVERNED, Policy
from sparkllm.gateway.governance.redis_scripts import WINDOW_GRACE_SECONDS
from sparkllm.gateway.governance.redis_store import RedisStore
from sparkllm.gateway.governance.redis_wire import parse
from sparkllm.gateway.governance.store import (
    Admit,
    AdmitRequest,
    GovernanceStore,
    Refusal,
    SlotRequest,
    TokenWindow,
    UserLimits,
)
from sparkllm.gateway.limits import ConcurrencyLimiter
from sparkllm.gateway.metrics import UserMetrics
from sparkllm.gateway.replies import ErrorReply
from sparkllm_dev.devcluster.gateway_io import free_port
from sparkllm_dev.redis_fixture import RedisServer

HOUR = TokenWindow("hour", 3600, 1000)
# Every request of a test in one set of windows, whatever the wall clock does meanwhile
# (the windows are aligned: an hour ending mid-test would split the charges).
NOW = time.time()
USER = "alice"


def store_for(server: RedisServer, prefix: str) -> RedisStore:
    # The trips counted are a running gateway's: its scripts are in Redis's script cache
    # after their first use. Load them here, so that a test counts the same trips whether
    # or not a test before it on this session's server ran the same scripts (a first
    # EVALSHA of a script is NOSCRIPT, SCRIPT LOAD, EVALSHA).
    client = server.client()
    try:
        for script in (scripts.ADMIT, scripts.SETTLE, scripts.REFRESH, scripts.ACQUIRE_SLOT):
            client.script_load(script)
    finally:
        client.close()
    return RedisStore.connect(server.address, password=server.password, key_prefix=prefix)


def governor_for(store: GovernanceStore, *, slots: int, queue_timeout: float = 10.0) -> Governor:
    return Governor(
        store=store,
        limiter=ConcurrencyLimiter(max_in_flight=slots, queue_size=64, timeout=queue_timeout),
        metrics=UserMetrics(CollectorRegistry()),
        policy=None,
        max_in_flight=slots,
        queue_timeout=queue_timeout,
        clock=lambda: NOW,
    )


def decision(*, input_tokens: int = 10, output: int = 50) -> Admitted:
    body = json.dumps({"model": "m", "prompt": "p", "max_tokens": output}).encode()
    return Admitted(
        body=body,
        input_tokens=input_tokens,
        input_tokens_exact=True,
        max_output_tokens=output,
        stream=False,
    )


def request(*, output: int = 200, min_output: int = 1, now: float | None = None) -> AdmitRequest:
    return AdmitRequest(
        user=USER,
        input_tokens=100,
        requested_output_tokens=output,
        min_output_tokens=min_output,
        limits=UserLimits(token_windows=(HOUR,)),
        now=NOW if now is None else now,
    )


async def settle(store: RedisStore, ticket: str, *, output: int, release: str) -> None:
    await store.settle(
        ticket, input_tokens=100, output_tokens=output, outcome="ok", now=NOW, release=release
    )


class Trips:
    """The commands a store sends to Redis (each one a round trip), on either of its
    connections: redis-py's and the lean one of the request path's scripts."""

    def __init__(self, store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[str] = []
        client = store._client
        send: Callable[..., Awaitable[Any]] = client.execute_command

        async def counted(*args: Any, **options: Any) -> Any:
            self.sent.append(str(args[0]))
            return await send(*args, **options)

        monkeypatch.setattr(client, "execute_command", counted)
        wire = store.wire
        exchange: Callable[..., Awaitable[Any]] = wire._exchange

        async def written(protocol: Any, command: bytes) -> Any:
            words, _ = parse(command, 0)
            assert isinstance(words, list)
            assert isinstance(words[0], bytes)
            self.sent.append(words[0].decode())
            return await exchange(protocol, command)

        monkeypatch.setattr(wire, "_exchange", written)

    def take(self) -> list[str]:
        sent, self.sent = self.sent, []
        return sent


@pytest.fixture
def slots_of(redis_server: RedisServer, redis_prefix: str) -> Iterator[Callable[[], int]]:
    with redis_server.client() as client:
        yield lambda: int(client.zcard(f"{redis_prefix}:slots"))


async def never_disconnects() -> dict[str, Any]:
    await asyncio.Event().wait()
    return {}


async def admitted(governor: Governor, *, policy: Policy = UNGOVERNED) -> Pass:
    granted = await governor.admit(USER, decision(), policy=policy)
    assert isinstance(granted, Pass), granted
    return granted


async def finish(governor: Governor, granted: Pass, *, holder: str | None) -> None:
    if holder is not None:
        await governor.release(holder)
    await governor.finish(granted, used=Used(10, 5, measured=True), outcome="ok")


async def finish_clean(
    governor: Governor, granted: Pass, *, holder: str | None, slots_of: Callable[[], int]
) -> None:
    """Finish ``granted``; then no global slot and no local one is held."""
    await finish(governor, granted, holder=holder)
    assert slots_of() == 0
    assert governor.limiter.in_flight == 0


async def queued(governor: Governor, granted: Pass, *, settle: float) -> asyncio.Future[Any]:
    """``wait_for_slot`` started, and still waiting after ``settle`` seconds."""
    waiting = asyncio.ensure_future(governor.wait_for_slot(granted, never_disconnects))
    await asyncio.sleep(settle)
    assert not waiting.done()
    return waiting


@asynccontextmanager
async def rig(
    server: RedisServer, prefix: str, *, slots: int = 1
) -> AsyncIterator[tuple[RedisStore, Governor]]:
    """A store on ``server`` and a governor with ``slots`` local and global slots."""
    store = store_for(server, prefix)
    try:
        yield store, governor_for(store, slots=slots)
    finally:
        await store.aclose()


@asynccontextmanager
async def closing(*stores: RedisStore) -> Any:
    try:
        yield
    finally:
        for store in stores:
            await store.aclose()


def test_admit_takes_the_global_slot_with_the_budget_and_settle_releases_it(
    redis_server: RedisServer, redis_prefix: str, slots_of: Callable[[], int]
) -> None:
    async def scenario() -> None:
        first, second = store_for(redis_server, redis_prefix), store_for(redis_server, redis_prefix)
        async with closing(first, second):
            one = await first.admit(request(), slot=SlotRequest("a", 1))
            assert isinstance(one, Admit)
            assert one.slot
            assert first.holds("a")
            assert slots_of() == 1
            full = await second.admit(request(), slot=SlotRequest("b", 1))
            assert isinstance(full, Admit)  # admitted all the same, without the slot
            assert not full.slot
            assert not second.holds("b")
            assert slots_of() == 1
            over = await second.admit(request(output=900, min_output=900), slot=SlotRequest("c", 2))
            assert isinstance(over, Refusal)  # a refusal takes no slot, even a free one
            assert slots_of() == 1
            await settle(first, one.ticket, output=7, release="a")
            assert slots_of() == 0
            assert not first.holds("a")
            again = await second.admit(request(output=10), slot=SlotRequest("b", 1))
            assert isinstance(again, Admit)
            assert again.slot
            # A settled (unknown) ticket still releases the slot named with it.
            await settle(second, one.ticket, output=1, release="b")
            assert slots_of() == 0

    asyncio.run(scenario())
    with redis_server.client() as client:
        hour = int(NOW // 3600) * 3600
        charged = int(client.get(f"{redis_prefix}:tokens:hour:{hour}:{USER}") or 0)
    assert charged == (100 + 7) + (100 + 200) + (100 + 10)  # one settled, two still reserved


def test_window_keys_expire_an_hour_after_their_window_whoever_made_them(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    """The expiry is set when a key is made (not on every admit) and is the window's."""
    now = time.time()

    async def scenario() -> None:
        store = store_for(redis_server, redis_prefix)
        async with closing(store):
            for _ in range(3):
                assert isinstance(await store.admit(request(now=now)), Admit)

    asyncio.run(scenario())
    hour, minute = int(now // 3600) * 3600, int(now // 60) * 60
    with redis_server.client() as client:
        tokens = f"{redis_prefix}:tokens:hour:{hour}:{USER}"
        per_minute = f"{redis_prefix}:rpm:{minute}:{USER}"
        assert int(client.get(tokens) or 0) == 3 * 300
        assert client.expiretime(tokens) == hour + 3600 + WINDOW_GRACE_SECONDS
        assert int(client.get(per_minute) or 0) == 3  # counted with no limit set
        assert client.expiretime(per_minute) == minute + 60 + WINDOW_GRACE_SECONDS


def test_a_slot_lost_to_its_lease_is_no_longer_vouched_for(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    async def scenario() -> None:
        store = store_for(redis_server, redis_prefix)
        async with closing(store):
            assert await store.acquire_slot("h", limit=1)
            assert store.holds("h")
            with redis_server.client() as client:  # as if its lease had lapsed
                client.delete(f"{redis_prefix}:slots")
            assert await store.refresh() == 1
            assert not store.holds("h")

    asyncio.run(scenario())


def test_a_free_slot_costs_two_round_trips_per_request(
    redis_server: RedisServer,
    redis_prefix: str,
    slots_of: Callable[[], int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> list[list[str]]:
        async with rig(redis_server, redis_prefix, slots=2) as (store, governor):
            await store.ping()
            trips = Trips(store, monkeypatch)
            sent = []
            for _ in range(3):
                granted = await admitted(governor)
                sent.append(trips.take())
                holder = await governor.wait_for_slot(granted, never_disconnects)
                assert isinstance(holder, str)
                assert slots_of() == 1
                assert governor.limiter.in_flight == 1
                sent.append(trips.take())
                await finish(governor, granted, holder=holder)
                sent.append(trips.take())
                assert slots_of() == 0
                assert governor.limiter.in_flight == 0
            return sent

    assert asyncio.run(scenario()) == [["EVALSHA"], [], ["EVALSHA"]] * 3


def test_a_request_that_must_queue_takes_the_global_slot_after_its_local_one(
    redis_server: RedisServer,
    redis_prefix: str,
    slots_of: Callable[[], int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> None:
        async with rig(redis_server, redis_prefix) as (store, governor):
            trips = Trips(store, monkeypatch)
            assert governor.limiter.try_acquire()  # the local slot is gone: someone holds it
            granted = await admitted(governor)
            assert trips.take() == ["EVALSHA"]
            assert slots_of() == 0
            waiting = await queued(governor, granted, settle=0.05)
            assert governor.limiter.queued == 1
            governor.limiter.release()  # handed to the waiter, who then asks for the global
            holder = await waiting
            assert isinstance(holder, str)
            assert store.holds(holder)
            assert trips.take() == ["EVALSHA"]
            assert slots_of() == 1
            await finish_clean(governor, granted, holder=holder, slots_of=slots_of)

    asyncio.run(scenario())


def test_every_global_slot_taken_at_admission_is_waited_for(
    redis_server: RedisServer, redis_prefix: str, slots_of: Callable[[], int]
) -> None:
    async def scenario() -> None:
        store, other = store_for(redis_server, redis_prefix), store_for(redis_server, redis_prefix)
        governor = governor_for(store, slots=1)
        async with closing(store, other):
            assert await other.acquire_slot("elsewhere", limit=1)  # another replica's
            granted = await admitted(governor)  # a local slot, but no global one free
            waiting = await queued(governor, granted, settle=0.15)
            assert slots_of() == 1
            assert governor.limiter.in_flight == 1
            await other.release_slot("elsewhere")
            holder = await asyncio.wait_for(waiting, timeout=5)
            assert isinstance(holder, str)
            assert store.holds(holder)
            assert slots_of() == 1
            await finish_clean(governor, granted, holder=holder, slots_of=slots_of)

    asyncio.run(scenario())


def test_a_finished_requests_global_slot_goes_to_the_next_local_request_without_a_trip(
    redis_server: RedisServer,
    redis_prefix: str,
    slots_of: Callable[[], int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> None:
        async with rig(redis_server, redis_prefix) as (store, governor):
            trips = Trips(store, monkeypatch)
            first = await admitted(governor)
            held = await governor.wait_for_slot(first, never_disconnects)
            assert isinstance(held, str)
            second = await admitted(governor)  # queues locally: asks for no global slot
            waiting = asyncio.ensure_future(governor.wait_for_slot(second, never_disconnects))
            await asyncio.sleep(0.05)
            trips.take()
            await governor.release(held)  # first's answer is out: the local slot is handed on
            assert await asyncio.wait_for(waiting, timeout=5) == held  # ...with the global one
            assert trips.take() == []
            assert slots_of() == 1
            await governor.finish(first, used=Used(10, 5, measured=True), outcome="ok")
            assert slots_of() == 1  # second still holds it: first settled without a release
            await finish_clean(governor, second, holder=held, slots_of=slots_of)

    asyncio.run(scenario())


def test_slots_taken_at_admission_and_never_asked_for_are_given_back(
    redis_server: RedisServer, redis_prefix: str, slots_of: Callable[[], int]
) -> None:
    async def scenario() -> None:
        async with rig(redis_server, redis_prefix) as (_store, governor):
            granted = await admitted(governor)
            assert slots_of() == 1
            assert governor.limiter.in_flight == 1
            await finish_clean(
                governor, granted, holder=None, slots_of=slots_of
            )  # e.g. the client left at once

    asyncio.run(scenario())


def test_a_refusal_gives_back_the_local_slot_and_takes_no_global_one(
    redis_server: RedisServer, redis_prefix: str, slots_of: Callable[[], int]
) -> None:
    policy = Policy.parse("defaults: {tokensPerHour: 30}\nminOutputTokens: 25\n")

    async def scenario() -> ErrorReply | Pass:
        async with rig(redis_server, redis_prefix) as (_store, governor):
            refused = await governor.admit(USER, decision(), policy=policy)
            assert slots_of() == 0
            assert governor.limiter.in_flight == 0
            return refused

    refused = asyncio.run(scenario())
    assert isinstance(refused, ErrorReply)
    assert refused.status == 429


def test_an_unreachable_store_gives_back_the_local_slot() -> None:
    async def scenario() -> ErrorReply | Pass:
        address = f"127.0.0.1:{free_port('127.0.0.1')}"
        store = RedisStore.connect(address, password="x", key_prefix="p")
        governor = governor_for(store, slots=1)
        async with closing(store):
            refused = await governor.admit(USER, decision(), policy=UNGOVERNED)
            assert governor.limiter.in_flight == 0
            return refused

    refused = asyncio.run(scenario())
    assert isinstance(refused, ErrorReply)
    assert refused.status == 503
