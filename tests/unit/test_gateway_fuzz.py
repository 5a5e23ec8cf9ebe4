"""Fuzzing the ASGI app: arbitrary paths, methods, headers and bodies never crash it.

The app is driven directly (no HTTP parser in between, so hypothesis reaches shapes a
real client would never send), with a real upstream up behind it. The properties: the
app never raises, answers exactly once with a complete response, never with a 5xx, and
every error it produces itself is an OpenAI-style JSON error body.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sparkllm.gateway.app import GatewayApp, build_gateway_app
from tests.unit.gateway_fixtures import (
    MODEL,
    UpstreamRecorder,
    gateway_config,
    running,
    train_tokenizer,
    write_keys,
    write_model_dir,
)

KEY = "fuzz-key"
PATHS = ["/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/"]


@pytest.fixture(scope="module")
def harness(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[GatewayApp, asyncio.AbstractEventLoop]]:
    root = tmp_path_factory.mktemp("fuzz")
    model_dir = write_model_dir(root / "model", train_tokenizer())
    keys_dir = write_keys(root / "keys", {"fuzzer": KEY})
    upstream = UpstreamRecorder(honour_markers=False)
    with running(upstream, lifespan="off") as server:
        config = gateway_config(
            model_dir=model_dir,
            keys_dir=keys_dir,
            upstream_url=server.url,
            max_input_tokens=256,
            context_length=512,
            max_body_bytes=64 * 1024,
        )
        app = build_gateway_app(config)
        loop = asyncio.new_event_loop()
        try:
            yield app, loop
        finally:
            loop.run_until_complete(app.upstream.aclose())
            loop.close()


async def _call(app: GatewayApp, scope: dict[str, Any], body: bytes) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    delivered = False
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await never.wait()  # the client stays connected
        raise AssertionError("unreachable")

    async def send(message: Any) -> None:
        sent.append(dict(message))

    await app(scope, receive, send)
    return sent


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
_text = st.text(max_size=60) | st.sampled_from(["", "\ud800", "<|im_start|>", "fox " * 200])
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant", "tool", "x"]) | _json_values},
    optional={
        "content": _text
        | _json_values
        | st.lists(
            st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]), "text": _text}),
            max_size=3,
        ),
        "tool_calls": _json_values,
    },
)
_valid_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant", "tool"]), "content": _text}
)
_chat_body = st.fixed_dictionaries(
    {"model": st.sampled_from([MODEL] * 6 + ["gpt-4o", "other"]) | _json_values},
    optional={
        "messages": st.lists(_valid_message, min_size=1, max_size=4)
        | st.lists(_message, max_size=4)
        | _json_values,
        "prompt": _text | st.lists(st.integers(-2, 2000), max_size=300) | _json_values,
        "max_tokens": st.integers(1, 1000) | st.integers(-5, 100_000) | _json_values,
        "max_completion_tokens": st.integers(-5, 100_000) | _json_values,
        "stream": st.booleans() | _json_values,
        "tools": _json_values,
        "tool_choice": st.sampled_from(["none", "auto", "required"]) | _json_values,
        "chat_template_kwargs": _json_values,
        "continue_final_message": st.booleans() | _json_values,
        "reasoning_effort": _json_values,
    },
)
_tool = st.fixed_dictionaries(
    {
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {"name": st.sampled_from(["weather", "search"])},
            optional={"parameters": _json_values, "description": _text},
        ),
    }
)
# Mostly well-formed requests with edge values: these get past validation and exercise
# rendering, counting, clamping and the relay rather than the first type check.
_plausible_body = st.fixed_dictionaries(
    {"model": st.sampled_from([MODEL, "gpt-4o"])},
    optional={
        "messages": st.lists(_valid_message, min_size=1, max_size=4),
        "prompt": _text | st.lists(st.integers(0, 2000), min_size=1, max_size=600),
        "max_tokens": st.integers(1, 20_000),
        "max_completion_tokens": st.integers(1, 20_000),
        "stream": st.booleans(),
        "tools": st.lists(_tool, max_size=2),
        "tool_choice": st.sampled_from(["none", "auto", "required"])
        | st.just({"type": "function", "function": {"name": "search"}}),
        "chat_template_kwargs": st.dictionaries(
            st.sampled_from(["thinking", "enable_thinking", "x"]), _json_values, max_size=2
        ),
        "continue_final_message": st.booleans(),
        "reasoning_effort": st.sampled_from(["low", "high"]),
    },
)
_bodies = st.one_of(
    _chat_body.map(lambda body: json.dumps(body).encode()),
    _json_values.map(lambda value: json.dumps(value).encode()),
    st.binary(max_size=200),
)
_auth = st.sampled_from([f"Bearer {KEY}".encode(), b"Bearer nope", b"", b"Basic x"]) | st.binary(
    max_size=30
)
_headers = st.lists(
    st.tuples(
        st.sampled_from([b"content-length", b"accept", b"x-request-id"]) | st.binary(max_size=10),
        st.binary(max_size=30),
    ),
    max_size=4,
)


def _check_response(app: GatewayApp, sent: list[dict[str, Any]]) -> int:
    starts = [message for message in sent if message["type"] == "http.response.start"]
    assert len(starts) == 1
    assert sent[0] is starts[0]
    body = b"".join(message.get("body", b"") for message in sent[1:])
    assert starts[0]["status"] < 500, body
    assert sent[-1]["type"] == "http.response.body"
    assert sent[-1].get("more_body", False) is False
    if starts[0]["status"] >= 400:
        assert set(json.loads(body)["error"]) == {"message", "type", "param", "code"}
    assert app.limiter.in_flight == 0
    return int(starts[0]["status"])


_FUZZ_SETTINGS = settings(  # examples: the profile's (conftest.py)
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_FUZZ_SETTINGS
@given(
    method=st.sampled_from(["POST", "GET", "PUT", "DELETE"]) | st.text(max_size=8),
    path=st.sampled_from(PATHS) | st.text(max_size=30),
    headers=st.builds(
        lambda auth, others: [*others, *([(b"authorization", auth)] if auth is not None else [])],
        st.none() | _auth,
        _headers,
    ),
    body=_bodies,
)
def test_any_request_gets_one_complete_non_5xx_answer(
    harness: tuple[GatewayApp, asyncio.AbstractEventLoop],
    method: str,
    path: str,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
) -> None:
    app, loop = harness
    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    _check_response(app, loop.run_until_complete(_call(app, scope, body)))


@_FUZZ_SETTINGS
@given(
    path=st.sampled_from(PATHS[:2]),
    body=(_plausible_body | _chat_body).map(lambda b: json.dumps(b).encode()),
)
def test_authenticated_generation_bodies_never_break_admission(
    harness: tuple[GatewayApp, asyncio.AbstractEventLoop], path: str, body: bytes
) -> None:
    app, loop = harness
    headers = [(b"authorization", f"Bearer {KEY}".encode())]
    scope = {"type": "http", "method": "POST", "path": path, "headers": headers}
    status = _check_response(app, loop.run_until_complete(_call(app, scope, body)))
    event(f"status {status}")


def test_fuzz_harness_reaches_the_upstream(
    harness: tuple[GatewayApp, asyncio.AbstractEventLoop],
) -> None:
    """Guard: a valid request goes all the way (so the fuzz really covers the relay)."""
    app, loop = harness
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).encode()
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": [(b"authorization", f"Bearer {KEY}".encode())],
    }
    sent = loop.run_until_complete(_call(app, scope, body))
    assert sent[0]["status"] == 200
    assert json.loads(b"".join(m.get("body", b"") for m in sent[1:]))["model"] == MODEL
