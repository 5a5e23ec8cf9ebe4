"""The in-process governance store: the rules every store keeps, and a property test that
concurrent requests of one user never exceed a token budget."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import date
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkllm.gateway.governance.policy import (
    DEFAULT_MIN_OUTPUT_TOKENS,
    UNGOVERNED,
    Policy,
    PolicySource,
)
from sparkllm.gateway.governance.store import (
    Admit,
    AdmitRequest,
    Limit,
    MemoryStore,
    Refusal,
    TokenWindow,
    UsageRow,
    UserLimits,
    grant,
    retry_after,
    window_start,
)

NOW = 1_780_012_800.0 + 1800.5  # half past midnight UTC, and half a second
HOUR = TokenWindow("hour", 3600, 1000)
DAY = TokenWindow("day", 86400, 5000)
BUDGET = UserLimits(token_windows=(HOUR, DAY))


def req(
    *,
    user: str = "alice",
    input_tokens: int = 100,
    output: int = 500,
    min_output: int = 16,
    limits: UserLimits = BUDGET,
    now: float = NOW,
) -> AdmitRequest:
    return AdmitRequest(user, input_tokens, output, min_output, limits, now)


T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def test_windows_are_aligned_to_utc() -> None:
    assert window_start(NOW, 3600) == NOW - 1800.5
    assert retry_after(NOW, 3600) == 1799.5
    assert retry_after(NOW, 60) == 59.5


def test_the_grant_shrinks_to_what_every_window_still_holds() -> None:
    async def scenario() -> list[Admit | Refusal]:
        store = MemoryStore()
        return [
            await store.admit(req(output=500)),  # 600 of the hour's 1000
            await store.admit(req(input_tokens=50, output=300)),  # 950 of 1000
            await store.admit(req(input_tokens=20, output=500, min_output=40)),  # 30 < 40
            await store.admit(req(input_tokens=60, output=5, min_output=1)),  # input > left
        ]

    first, second, short, empty = run(scenario())
    assert isinstance(first, Admit)
    assert first.granted_output_tokens == 500
    assert isinstance(second, Admit)
    assert second.granted_output_tokens == 300
    assert short == Refusal(
        Limit.MIN_OUTPUT, retry_after=1799.5, window="hour", remaining_tokens=50
    )
    assert isinstance(empty, Refusal)
    assert empty.limit is Limit.TOKENS
    assert empty.window == "hour"


def test_settle_gives_back_what_was_not_used_once() -> None:
    async def scenario() -> tuple[int, int, list[UsageRow]]:
        store = MemoryStore()
        admitted = await store.admit(req(output=800))
        assert isinstance(admitted, Admit)
        reserved = store.charged("alice", HOUR, now=NOW)
        for _ in range(2):  # idempotent: the second settle changes nothing
            await store.settle(
                admitted.ticket, input_tokens=100, output_tokens=42, outcome="ok", now=NOW
            )
        rows = await store.usage(day_from=date(2000, 1, 1), day_to=date(2100, 1, 1))
        return reserved, store.charged("alice", HOUR, now=NOW), rows

    reserved, charged, rows = run(scenario())
    assert (reserved, charged) == (900, 142)
    assert len(rows) == 1
    row = rows[0]
    assert (row.user, dict(row.requests), row.input_tokens, row.output_tokens) == (
        "alice",
        {"ok": 1},
        100,
        42,
    )


def test_concurrency_and_requests_per_minute_refuse_with_their_limit() -> None:
    tight = UserLimits(max_concurrent_requests=2, requests_per_minute=3)

    async def scenario() -> list[Admit | Refusal]:
        store = MemoryStore()
        results = [await store.admit(req(limits=tight)) for _ in range(3)]
        first = results[0]
        assert isinstance(first, Admit)
        await store.settle(first.ticket, input_tokens=1, output_tokens=1, outcome="ok", now=NOW)
        results.append(await store.admit(req(limits=tight)))  # a place is free again
        results.append(await store.admit(req(user="bob", limits=tight)))  # users apart
        second = results[1]
        assert isinstance(second, Admit)
        await store.settle(second.ticket, input_tokens=1, output_tokens=1, outcome="ok", now=NOW)
        results.append(await store.admit(req(limits=tight)))  # 4th this minute
        results.append(await store.admit(req(limits=tight, now=NOW + 60)))  # next minute
        return results

    results = run(scenario())
    kinds = [r.limit if isinstance(r, Refusal) else "admit" for r in results]
    assert kinds == [
        "admit",
        "admit",
        Limit.CONCURRENCY,
        "admit",
        "admit",
        Limit.REQUESTS_PER_MINUTE,
        "admit",
    ]
    rpm = results[5]
    assert isinstance(rpm, Refusal)
    assert rpm.retry_after == 59.5


def test_global_slots_bound_holders() -> None:
    async def scenario() -> list[bool]:
        store = MemoryStore()
        got = [await store.acquire_slot(f"h{n}", limit=2) for n in range(3)]
        await store.release_slot("h0")
        got.append(await store.acquire_slot("h3", limit=2))
        return got

    assert run(scenario()) == [True, True, False, True]


def test_grant_is_pure_and_shared() -> None:
    granted, refusal = grant(
        req=req(output=300), charged={"hour": 500}, requests_this_minute=0, in_progress=0
    )
    assert (granted, refusal) == (300, None)
    granted, refusal = grant(
        req=req(output=300), charged={"hour": 700}, requests_this_minute=0, in_progress=0
    )
    assert (granted, refusal) == (200, None)


# --- the property: concurrent requests of one user never exceed the budget ---------------

_request = st.tuples(
    st.integers(min_value=1, max_value=400),  # input tokens
    st.integers(min_value=1, max_value=600),  # requested output
    st.integers(min_value=1, max_value=64),  # min output
    st.floats(min_value=0.0, max_value=1.5),  # fraction of the grant really used (capped)
    st.integers(min_value=0, max_value=3),  # awaits before settling (interleaving)
)


# 200 in every profile: the property is about interleavings of concurrent requests, which
# few examples rarely reach.
@settings(max_examples=200, deadline=None)
@given(requests=st.lists(_request, min_size=1, max_size=40), limit=st.integers(50, 3000))
def test_concurrent_requests_of_one_user_never_exceed_the_token_budget(
    requests: list[tuple[int, int, int, float, int]], limit: int
) -> None:
    window = TokenWindow("hour", 3600, limit)
    limits = UserLimits(token_windows=(window,))
    store = MemoryStore()
    peak = 0
    used_total = 0

    async def one(request: tuple[int, int, int, float, int]) -> None:
        nonlocal peak, used_total
        input_tokens, output, min_output, fraction, hops = request
        admitted = await store.admit(req(input_tokens=input_tokens, output=output,
                                         min_output=min_output, limits=limits))  # fmt: skip
        peak = max(peak, store.charged("alice", window, now=NOW))
        if isinstance(admitted, Refusal):
            return
        assert min(min_output, output) <= admitted.granted_output_tokens <= output
        for _ in range(hops):
            await asyncio.sleep(0)  # other requests admit and settle meanwhile
        # The engine never produces more than max_tokens, i.e. the grant.
        produced = min(
            admitted.granted_output_tokens, int(admitted.granted_output_tokens * fraction)
        )
        used_total += input_tokens + produced
        await store.settle(
            admitted.ticket, input_tokens=input_tokens, output_tokens=produced, outcome="ok",
            now=NOW,
        )  # fmt: skip
        peak = max(peak, store.charged("alice", window, now=NOW))

    async def everyone() -> None:
        await asyncio.gather(*(one(request) for request in requests))

    asyncio.run(everyone())
    assert peak <= limit  # reservations included, at every step
    assert used_total <= limit
    assert store.charged("alice", window, now=NOW) == used_total  # nothing left reserved


def test_a_users_policy_overrides_the_defaults_field_by_field() -> None:
    policy = Policy.parse(
        "defaults: {tokensPerHour: 1000, requestsPerMinute: 10, weight: 2}\n"
        "users: {alice: {tokensPerDay: 5000, weight: 4, maxQueuedRequests: 3}}\n"
    )
    alice, other = policy.for_user("alice"), policy.for_user("zed")
    assert alice.limits == UserLimits(
        requests_per_minute=10,
        token_windows=(TokenWindow("hour", 3600, 1000), TokenWindow("day", 86400, 5000)),
    )
    assert (alice.weight, alice.max_queued, alice.budgeted) == (4, 3, True)
    assert (other.weight, other.max_queued) == (2, None)
    assert policy.min_output_tokens == DEFAULT_MIN_OUTPUT_TOKENS
    assert not UNGOVERNED.for_user("alice").budgeted
    with pytest.raises(ValueError, match=r"users\.bob\.weight"):
        Policy.parse("users: {bob: {weight: 0}}")
    with pytest.raises(ValueError, match="tokensPerWeek"):
        Policy.parse("defaults: {tokensPerWeek: 1}")


@pytest.mark.parametrize("text", ["", "\n  \n", "# limits to come\n# soon\n", "null\n", "~"])
def test_an_empty_policy_is_refused_not_read_as_no_limits(
    text: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 25: an emptied policy file loaded as a valid policy without limits."""
    with pytest.raises(ValueError, match="the policy is empty"):
        Policy.parse(text)
    assert not Policy.parse("{}").for_user("alice").budgeted  # "no limits", said explicitly
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    source = PolicySource(path, reload_interval=0)
    problem = source.current()
    assert isinstance(problem, str)  # at start: no policy, so every request is refused
    assert problem.startswith(f"governance policy {path} not loaded: the policy is empty")
    path.write_text("defaults: {tokensPerHour: 50}\n")
    good = source.current()
    assert isinstance(good, Policy)
    path.write_text(text + "\n" * 3)  # a later edit empties it (another size: re-read)
    assert source.current() is good  # the last good policy stays, as for an invalid edit
    assert "the policy is empty (" in caplog.text
    assert "keeping the last good policy" in caplog.text
