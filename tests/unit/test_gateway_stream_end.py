"""A client that hangs up right after a stream's final event got all of it: ``ok``, charged.

Found on the demo: ``sparkllm bench --scenarios short-c8`` read 120/120 answers whole,
yet the gateway logged 14 ``outcome=client_closed status=0`` and the ledger missed 3 x
128 output tokens: the bench (like the SDKs) returns on ``[DONE]`` and closes the
connection, and when the gateway saw that hang-up before the upstream's end of body, its
disconnect watch cancelled an exchange that was already complete. Load decided the race;
here it is decided on purpose: the upstream (a raw socket server) holds its end of body
until the client has hung up after the final event, on each protocol's stream (chat's
``[DONE]``, Messages' ``message_stop``, Responses' ``response.completed``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from sparkllm.gateway.app import _relay_outcome
from sparkllm.gateway.governance.meter import UsageMeter
from sparkllm.gateway.metrics import Outcome
from sparkllm.gateway.proxy import RelayResult, StreamEnd, UpstreamClient

PROMPT, OUTPUT = 9, 128  # the engine's usage in every stream below


def _event(data: dict[str, Any], name: str | None = None) -> bytes:
    head = b"" if name is None else f"event: {name}\n".encode()
    return head + b"data: " + json.dumps(data).encode() + b"\n\n"


def _named(name: str, **fields: Any) -> bytes:
    return _event({"type": name, **fields}, name)


# As SGLang 0.5.23 frames them (its serving_chat, anthropic/serving, serving_responses).
STREAMS: dict[str, list[bytes]] = {
    "/v1/chat/completions": [
        _event({"choices": [{"index": 0, "delta": {"content": "says [DONE] and stop"}}]}),
        _event({"choices": [], "usage": {"prompt_tokens": PROMPT, "completion_tokens": OUTPUT}}),
        b"data: [DONE]\n\n",
    ],
    "/v1/messages": [
        _named("message_start", message={"usage": {"input_tokens": PROMPT, "output_tokens": 1}}),
        _named("content_block_delta", delta={"type": "text_delta", "text": "message_stop"}),
        _named(
            "message_delta", delta={"stop_reason": "max_tokens"}, usage={"output_tokens": OUTPUT}
        ),
        _named("message_stop"),
    ],
    "/v1/responses": [
        _named("response.created", response={"status": "in_progress"}),
        _named("response.output_text.delta", delta="event: response.completed"),
        _named(
            "response.completed",
            response={
                "status": "completed",
                "output": [{"text": "x" * 300}],
                "usage": {"input_tokens": PROMPT, "output_tokens": OUTPUT},
            },
        ),
    ],
}


def _chunks(events: list[bytes]) -> list[bytes]:
    """The events as the upstream's body chunks; the final event split in the middle of
    its name (a boundary the watch must not be fooled by)."""
    *body, final = events
    return [*body, final[:9], final[9:]]


@pytest.mark.parametrize("route", STREAMS)
def test_stream_end_sees_only_the_final_event_whole(route: str) -> None:
    end = StreamEnd()
    *body, final = _chunks(STREAMS[route])
    assert [end.passed(chunk) for chunk in body] == [False] * len(body)  # text naming it too
    assert end.passed(final)
    assert not end.passed(b"data: [DONE]\n\n")  # once


def test_stream_end_without_a_final_event_never_fires() -> None:
    end = StreamEnd()
    cut = _named("message_stop")[:-1]  # its blank line never came
    chunks = [b"data: " + b"x" * 500 + b"\n", b"\ndata: [DON", b"E]-not\n\n", cut]
    assert not any(end.passed(chunk) for chunk in chunks)


async def _serve_then_hold(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, chunks: list[bytes],
    client_has_final: asyncio.Event, closed: asyncio.Event, *, cut: bool,
) -> None:  # fmt: skip
    """The upstream: a chunked SSE answer whose end of body comes only once the client
    has the final event and the event loop has run the gateway's disconnect handling."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )  # fmt: skip
    await reader.readexactly(length)
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    for chunk in chunks:
        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await writer.drain()
    if cut:  # the engine is still generating when the client hangs up
        await reader.read()
        writer.close()
        closed.set()
        return
    await client_has_final.wait()
    for _ in range(20):  # event-loop turns, not time: the watch acts on the hang-up in one
        await asyncio.sleep(0)
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    await reader.read()  # until the gateway's pool closes the connection
    writer.close()
    await writer.wait_closed()
    closed.set()


async def _relay_to_a_client_that_hangs_up(
    route: str, *, cut: bool = False
) -> tuple[RelayResult, UsageMeter]:
    """Right after the final event; with ``cut``, after the second event instead."""
    chunks = _chunks(STREAMS[route])
    hang_up_after = chunks[1] if cut else chunks[-1]
    client_has_final, closed = asyncio.Event(), asyncio.Event()
    served = chunks[:2] if cut else chunks
    server = await asyncio.start_server(
        lambda r, w: _serve_then_hold(r, w, served, client_has_final, closed, cut=cut),
        "127.0.0.1",
        0,
    )
    port = server.sockets[0].getsockname()[1]
    upstream = UpstreamClient(
        base_url=f"http://127.0.0.1:{port}",
        api_key=None,
        connect_timeout=5,
        read_timeout=10,
        max_connections=2,
    )
    received: list[bytes] = []

    async def client(message: dict[str, Any]) -> None:  # uvicorn's send, as the client reads
        received.append(message.get("body", b""))
        if b"".join(received).endswith(hang_up_after):  # the upstream's chunks may coalesce
            client_has_final.set()  # it has what it wanted, and hangs up at once

    async def receive() -> dict[str, Any]:
        await client_has_final.wait()
        return {"type": "http.disconnect"}

    meter = UsageMeter(client)
    try:
        result = await asyncio.wait_for(
            upstream.relay(
                method="POST", path=route, body=b"{}", headers=(), send=meter.send,
                receive=receive,
            ),
            timeout=10,
        )  # fmt: skip
    finally:
        await upstream.aclose()
        server.close()
    await asyncio.wait_for(closed.wait(), timeout=10)
    assert hang_up_after in b"".join(received)
    return result, meter


@pytest.mark.parametrize("route", STREAMS)
def test_a_client_hanging_up_after_the_final_event_is_ok_and_charged_the_engines_usage(
    route: str,
) -> None:
    result, meter = asyncio.run(_relay_to_a_client_that_hangs_up(route))
    assert (result.status, result.complete, result.client_closed) == (200, True, False)
    assert _relay_outcome(result) is Outcome.OK
    used = meter.used(  # as the gateway asks (app.py, Governor.measure)
        input_tokens=7, reserved_output=OUTPUT, answered=result.upstream_answered, count=None,
        client_closed=result.client_closed,
    )  # fmt: skip
    assert (used.output_tokens, used.measured) == (OUTPUT, True)


@pytest.mark.parametrize("route", STREAMS)
def test_a_stream_cut_before_its_end_is_client_closed_and_charged_what_it_streamed(
    route: str,
) -> None:
    """The disconnect still aborts a stream before its final event (the engine stops);
    before, such a relay said the router never answered, so the meter charged nothing at
    all, whatever text had gone out."""
    result, meter = asyncio.run(_relay_to_a_client_that_hangs_up(route, cut=True))
    assert (result.status, result.upstream_answered, result.complete) == (200, True, False)
    assert _relay_outcome(result) is Outcome.CLIENT_CLOSED
    used = meter.used(
        input_tokens=7, reserved_output=OUTPUT, answered=result.upstream_answered,
        count=lambda text: len(text.split()), client_closed=result.client_closed,
    )  # fmt: skip
    # chat: its usage chunk had passed (the engine's counts); the others: their text's words
    expected = {"/v1/chat/completions": (PROMPT, OUTPUT), "/v1/messages": (7, 1)}
    assert (used.input_tokens, used.output_tokens) == expected.get(route, (7, 2))
    assert used.measured
