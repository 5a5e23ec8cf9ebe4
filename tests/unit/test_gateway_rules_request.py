"""The front door's request rules, one by one, and the order the app walks them in.

Each rule is awaited directly on a ``Request`` (real parts: a key directory, a policy
file, the in-process governance store, the admission decision; the ASGI ``receive`` is
a list of messages). The app's behaviour end to end — the same refusals through a real
server and smg — stays in test_gateway_proxy.py and test_governance_gateway.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sparkllm.gateway.admission import Admission
from sparkllm.gateway.asgi import Message, Receive
from sparkllm.gateway.auth import ApiKeyStore
from sparkllm.gateway.governance.gate import Governor, Pass
from sparkllm.gateway.governance.policy import UNGOVERNED, Policy, PolicySource
from sparkllm.gateway.governance.store import MemoryStore
from sparkllm.gateway.limits import ConcurrencyLimiter
from sparkllm.gateway.metrics import Outcome, UserMetrics
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.rules.api_key import Authenticate
from sparkllm.gateway.rules.body_size import BodySize
from sparkllm.gateway.rules.context import Admitted, Request, Route, Stop, Verdict
from sparkllm.gateway.rules.decide import OFFLOAD_BODY_BYTES, Decide
from sparkllm.gateway.rules.governance import PolicyLoaded, ReserveBudget, TakeSlot
from sparkllm.gateway.rules.pipeline import RequestRule, front_door, walk
from tests.unit.gateway_fixtures import MODEL, clamp_policy, counting_parts, write_keys

KEY = "alice-key"


@pytest.fixture(scope="module")
def admission() -> Admission:
    counter, template = counting_parts()
    return Admission(policy=clamp_policy(), counter=counter, template=template)


def _receive(messages: Iterable[Message]) -> Receive:
    pending = list(messages)

    async def receive() -> Message:
        if not pending:
            await asyncio.Event().wait()  # a client that sends nothing more
        return pending.pop(0)

    return receive


def _request(
    *, headers: dict[bytes, bytes] | None = None, chunks: Iterable[bytes] = (), gone: bool = False
) -> Request:
    pieces = list(chunks)
    messages: list[Message] = [
        {"type": "http.request", "body": piece, "more_body": i < len(pieces) - 1}
        for i, piece in enumerate(pieces)
    ]
    if gone:
        messages.append({"type": "http.disconnect"})
    scope = {"type": "http", "headers": list((headers or {}).items())}
    return Request(Route.CHAT, scope, _receive(messages), arrived=0.0)


def _governor(*, slots: int = 1, queue: int = 4, policy: Path | None = None) -> Governor:
    return Governor(
        store=MemoryStore(),
        limiter=ConcurrencyLimiter(max_in_flight=slots, queue_size=queue, timeout=30),
        metrics=UserMetrics(CollectorRegistry()),
        policy=None if policy is None else PolicySource(policy),
        max_in_flight=slots,
        queue_timeout=30,
    )


def _run(rule: RequestRule, request: Request) -> Verdict:
    async def once() -> Verdict:
        return await rule(request)

    return asyncio.run(once())


def _chat_body(**fields: Any) -> bytes:
    messages = [{"role": "user", "content": "hello"}]
    return json.dumps({"model": MODEL, "messages": messages, **fields}).encode()


def _decided(admission: Admission, user: str = "alice") -> Request:
    request = _request()
    request.user, request.body = user, _chat_body(max_tokens=10)
    decision = admission.decide(Route.CHAT, request.body, user=user)
    assert isinstance(decision, Admitted)
    request.decision = decision
    return request


def test_authenticate_names_the_user_or_answers_401(tmp_path: Path) -> None:
    rule = Authenticate(ApiKeyStore(write_keys(tmp_path / "keys", {"alice": KEY})))
    request = _request(headers={b"authorization": f"Bearer {KEY}".encode()})
    assert _run(rule, request) is None
    assert request.user == "alice"
    for headers, code in [
        ({}, "missing_api_key"),
        ({b"authorization": b"Bearer nope"}, "invalid_api_key"),
    ]:
        request = _request(headers=headers)
        reply = _run(rule, request)
        assert isinstance(reply, ErrorReply)
        assert (reply.status, reply.code, request.user) == (401, code, None)


def test_policy_loaded_takes_the_policy_or_fails_closed_with_503(tmp_path: Path) -> None:
    request = _request()
    assert _run(PolicyLoaded(_governor()), request) is None
    assert request.policy is UNGOVERNED
    broken = tmp_path / "policy.yaml"
    broken.write_text("defaults: [not, a, mapping]\n")
    reply = _run(PolicyLoaded(_governor(policy=broken)), _request())
    assert isinstance(reply, ErrorReply)
    assert (reply.status, reply.code) == (503, "governance_policy_unavailable")


def test_body_size_reads_up_to_the_limit_and_refuses_beyond_it() -> None:
    rule = BodySize(1024)
    request = _request(chunks=[b"a" * 1000, b"b" * 24])
    assert _run(rule, request) is None
    assert request.body == b"a" * 1000 + b"b" * 24
    over = _run(rule, _request(chunks=[b"a" * 1000, b"b" * 25]))
    assert isinstance(over, ErrorReply)
    assert (over.status, over.code) == (413, "request_too_large")
    # A declared length over the limit is refused before a byte is read (none is sent).
    declared = _run(rule, _request(headers={b"content-length": b"1025"}))
    assert isinstance(declared, ErrorReply)
    assert declared.status == 413


def test_decide_keeps_the_decision_and_its_time_or_refuses(admission: Admission) -> None:
    rule = Decide(admission)
    request = _request()
    request.user, request.body = "alice", _chat_body()
    assert _run(rule, request) is None
    assert isinstance(request.decision, Admitted)
    assert request.deciding is not None
    assert request.deciding >= 0
    refused = _request()
    refused.user, refused.body = "alice", _chat_body(model="llama")
    reply = _run(rule, refused)
    assert isinstance(reply, ErrorReply)
    assert (reply.status, refused.decision) == (404, None)
    assert refused.deciding is not None  # refusals are timed too
    large = _request()  # decided on a worker thread: the same decision
    filler = "x" * OFFLOAD_BODY_BYTES
    large.user, large.body = "alice", _chat_body(max_tokens=10, user=filler)
    assert _run(rule, large) is None
    assert isinstance(large.decision, Admitted)
    assert large.decision.body == large.body


def test_reserve_budget_reserves_or_answers_429_naming_the_limit(
    admission: Admission, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("defaults: {requestsPerMinute: 1}\n")
    governor = _governor(policy=policy)
    rule = ReserveBudget(governor, admission)

    async def twice() -> tuple[Request, Verdict]:
        first = _decided(admission)
        first.policy = _current_policy(governor)
        assert await rule(first) is None
        second = _decided(admission)
        second.policy = first.policy
        return first, await rule(second)

    first, reply = asyncio.run(twice())
    assert isinstance(first.granted, Pass)
    assert first.granted.user == "alice"
    assert isinstance(reply, ErrorReply)
    assert (reply.status, reply.code) == (429, "rate_limit_exceeded")
    assert "requests_per_minute" in reply.message


def _current_policy(governor: Governor) -> Policy:
    policy = governor.policy()
    assert not isinstance(policy, ErrorReply)
    return policy


def test_take_slot_holds_a_slot_or_refuses_when_the_queue_is_full(admission: Admission) -> None:
    governor = _governor(slots=1, queue=0)
    budget, slot = ReserveBudget(governor, admission), TakeSlot(governor)

    async def two() -> tuple[Request, Request, Verdict]:
        holding, full = _decided(admission), _decided(admission, user="bob")
        for request in (holding, full):
            assert await budget(request) is None
        assert await slot(holding) is None
        return holding, full, await slot(full)

    holding, full, refused = asyncio.run(two())
    assert holding.holder is not None
    assert isinstance(refused, ErrorReply)
    assert (refused.status, refused.code, full.holder) == (429, "rate_limit_exceeded", None)
    assert "queue_full" in refused.message
    assert full.outcome is Outcome.RATE_LIMITED  # what its reservation is settled as


def test_take_slot_stops_without_an_answer_for_a_client_gone_while_queued(
    admission: Admission,
) -> None:
    governor = _governor(slots=1, queue=4)
    budget, slot = ReserveBudget(governor, admission), TakeSlot(governor)

    async def queued_then_gone() -> tuple[Request, Verdict]:
        holding, leaving = _decided(admission), _decided(admission, user="bob")
        leaving.receive = _request(gone=True).receive
        for request in (holding, leaving):
            assert await budget(request) is None
        assert await slot(holding) is None
        return leaving, await slot(leaving)

    leaving, verdict = asyncio.run(queued_then_gone())
    assert verdict is Stop.CLIENT_LEFT
    assert (leaving.holder, governor.limiter.queued) == (None, 0)


def test_the_front_door_walks_its_rules_in_order_and_stops_at_the_first_refusal(
    admission: Admission, tmp_path: Path
) -> None:
    keys = ApiKeyStore(write_keys(tmp_path / "keys", {"alice": KEY}))
    rules = front_door(keys=keys, governor=_governor(), admission=admission, max_body_bytes=1024)
    auth = {b"authorization": f"Bearer {KEY}".encode()}
    # No key and an oversized body: the key is refused first, the body never read.
    request = _request(chunks=[b"x" * 2048])
    reply = asyncio.run(walk(rules, request))
    assert isinstance(reply, ErrorReply)
    assert (reply.status, request.body) == (401, b"")
    # A policy that never loaded and an oversized body: 503 before the body is read.
    broken = tmp_path / "policy.yaml"
    broken.write_text("defaults: [not, a, mapping]\n")
    closed = front_door(
        keys=keys, governor=_governor(policy=broken), admission=admission, max_body_bytes=1024
    )
    request = _request(headers=auth, chunks=[b"x" * 2048])
    reply = asyncio.run(walk(closed, request))
    assert isinstance(reply, ErrorReply)
    assert (reply.status, request.user, request.body) == (503, "alice", b"")
    # A key and an oversized body: 413, nothing decided.
    request = _request(headers=auth, chunks=[b"x" * 2048])
    reply = asyncio.run(walk(rules, request))
    assert isinstance(reply, ErrorReply)
    assert (reply.status, request.deciding) == (413, None)
    # A refused decision: no reservation is made.
    request = _request(headers=auth, chunks=[_chat_body(model="llama")])
    reply = asyncio.run(walk(rules, request))
    assert isinstance(reply, ErrorReply)
    assert (reply.status, request.granted) == (404, None)
    # Everything passes: the request holds a reservation and a slot.
    request = _request(headers=auth, chunks=[_chat_body(max_tokens=10)])
    assert asyncio.run(walk(rules, request)) is None
    assert (request.user, request.granted is not None, request.holder is not None) == (
        "alice",
        True,
        True,
    )
