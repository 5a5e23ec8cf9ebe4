"""Hostile and careless clients on the Messages and Responses routes: each case here
failed before its fix (a template in an error message, a request SGLang refuses relayed,
router text unreadable, a cut stream charged next to nothing).

The whole list of inputs tried, and what each gets, is in docs/gateway.md ("Hostile
input on the client routes").
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pydantic
import pytest

from sparkllm.gateway import router_errors
from sparkllm.gateway.admission import Admission, Admitted, Route
from sparkllm.gateway.asgi import Message
from sparkllm.gateway.governance.meter import UsageMeter
from sparkllm.gateway.replies import ErrorReply
from tests.unit import sglang_reference
from tests.unit.gateway_fixtures import MODEL, clamp_policy, counting_parts


@pytest.fixture(scope="module")
def admission() -> Admission:
    counter, template = counting_parts()
    return Admission(policy=clamp_policy(), counter=counter, template=template)


def _messages(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]} | (
        fields
    )


def test_a_wrong_role_is_named_with_its_value(admission: Admission) -> None:
    body = _messages(messages=[{"role": 1, "content": "x"}])
    reply = admission.decide(Route.MESSAGES, json.dumps(body).encode())
    assert isinstance(reply, ErrorReply)
    assert reply.message.endswith("got 1.")  # was the literal "{json.dumps(role)}"
    assert reply.param == "messages[0].role"


def test_messages_without_max_tokens_are_refused_as_sglang_refuses_them(
    admission: Admission,
) -> None:
    """Anthropic's protocol requires max_tokens; the gateway used to write one in and
    relay a request the engine's own model refuses."""
    body = _messages()
    del body["max_tokens"]
    anthropic_protocol = sglang_reference.converters()[0]
    with pytest.raises(pydantic.ValidationError, match="max_tokens"):
        anthropic_protocol.AnthropicMessagesRequest.model_validate(body)
    reply = admission.decide(Route.MESSAGES, json.dumps(body).encode())
    assert isinstance(reply, ErrorReply)
    assert (reply.status, reply.code, reply.param) == (
        400,
        "missing_required_parameter",
        "max_tokens",
    )
    counted = admission.decide(Route.COUNT_TOKENS, json.dumps({**body, "model": MODEL}).encode())
    assert isinstance(counted, Admitted)  # a count has no output limit


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        (Route.RESPONSES, '{"model": "%s", "input": "a\\udfffb", "max_output_tokens": 4}', "input"),
        (Route.MESSAGES, '{"model": "%s", "max_tokens": 4, "messages": '
         '[{"role": "user", "content": "a\\ud800b"}]}', "messages"),
    ],
)  # fmt: skip
def test_an_unpaired_surrogate_names_the_field_the_client_wrote(
    admission: Admission, route: Route, body: str, field: str
) -> None:
    """A Responses body has no 'messages' (it was named so, the chat SGLang makes)."""
    reply = admission.decide(route, (body % MODEL).encode())
    assert isinstance(reply, ErrorReply)
    assert (reply.status, reply.param) == (400, field)
    assert reply.message == f"'{field}' contains invalid Unicode (an unpaired surrogate)."


def test_the_routers_anthropic_refusal_is_readable_and_names_the_field() -> None:
    """smg 1.13.0 on /v1/messages with temperature 5 (recorded from tests/unit/smg_stack.py)."""
    body = json.dumps(
        {"type": "error", "error": {"type": "invalid_request_error",
         "message": "__all__: temperature: range: 0..1"}, "request_id": "msg_x"}
    ).encode()  # fmt: skip
    reply = router_errors.readable(400, body)
    assert reply is not None
    assert (reply.message, reply.param) == ("'temperature' must be from 0 to 1.", "temperature")
    assert json.loads(reply.body())["error"]["code"] == "invalid_value"


def test_a_deserialize_refusal_names_its_field_as_param() -> None:
    message = (
        "Failed to deserialize the JSON body into the target type: top_k: invalid type: "
        'string "5", expected a non-negative integer at line 1 column 93'
    )
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error"}})
    reply = router_errors.readable(400, body.encode())
    assert reply is not None
    assert reply.param == "top_k"


def _sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


WORDS = [f" word{i}" for i in range(20)]
MESSAGES_CUT = _sse(
    {"type": "message_start", "message": {"usage": {"input_tokens": 7, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    *({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}}
      for w in WORDS),
)  # fmt: skip
RESPONSES_CUT = _sse(
    {"type": "response.created", "response": {"id": "resp_1", "usage": None}},
    *({"type": "response.output_text.delta", "delta": w} for w in WORDS),
)


@pytest.mark.parametrize("stream", [MESSAGES_CUT, RESPONSES_CUT], ids=["messages", "responses"])
def test_a_stream_the_client_cut_is_charged_what_it_streamed(stream: bytes) -> None:
    """Before: a Messages stream cut before message_delta was charged message_start's 1
    output token, a Responses stream cut before response.completed 0 — however much
    text had gone out."""

    async def exchange() -> UsageMeter:
        async def client(_message: Message) -> None:
            return None

        meter = UsageMeter(client)
        headers = [(b"content-type", b"text/event-stream")]
        await meter.send({"type": "http.response.start", "status": 200, "headers": headers})
        await meter.send({"type": "http.response.body", "body": stream, "more_body": True})
        return meter

    counted: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return len(text.split())

    used = asyncio.run(exchange()).used(
        input_tokens=5, reserved_output=100, answered=True, count=count, client_closed=True
    )
    assert counted == ["".join(WORDS)]
    assert (used.input_tokens, used.output_tokens, used.measured) == (5, 20, True)
