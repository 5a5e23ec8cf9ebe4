"""The few raw-ASGI pieces the SIMULATOR's two apps share: bodies, responses, lifespan.

Why raw ASGI and not a framework: the allowed dependencies are uvicorn and the standard
library, the simulator's surface is a dozen fixed routes, and raw ASGI keeps streaming
(SSE) explicit. Every response carries ``x-sparkllm-simulator: true`` so nobody mistakes
a simulated engine for a real one in a capture or a log.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SIMULATOR_HEADER = (b"x-sparkllm-simulator", b"true")
JSON_TYPE = "application/json"
SSE_TYPE = "text/event-stream"


def request_header(scope: Scope, name: str) -> str | None:
    wanted = name.lower().encode("latin-1")
    for key, value in scope.get("headers", []):
        if key.lower() == wanted:
            return bytes(value).decode("latin-1")
    return None


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def wait_for_disconnect(receive: Receive) -> None:
    """Return when the client disconnects (after the body was read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _headers(content_type: str | None, extra: list[tuple[bytes, bytes]]) -> list[Any]:
    headers = [SIMULATOR_HEADER, *extra]
    if content_type is not None:
        headers.append((b"content-type", content_type.encode("latin-1")))
    return headers


async def send_response(
    send: Send,
    *,
    status: int,
    body: bytes = b"",
    content_type: str | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    all_headers = _headers(content_type, headers or [])
    all_headers.append((b"content-length", str(len(body)).encode("latin-1")))
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, *, status: int, payload: Any) -> None:
    body = json.dumps(payload, separators=(",", ":")).encode("utf-8")
    await send_response(send, status=status, body=body, content_type=JSON_TYPE)


async def start_stream(send: Send) -> None:
    headers = _headers(SSE_TYPE, [(b"cache-control", b"no-cache")])
    await send({"type": "http.response.start", "status": 200, "headers": headers})


async def send_event(send: Send, data: str) -> None:
    """One SSE event, SGLang style: ``data: <json>\\n\\n`` (no event names, no ids)."""
    body = f"data: {data}\n\n".encode()
    await send({"type": "http.response.body", "body": body, "more_body": True})


async def end_stream(send: Send) -> None:
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def serve_lifespan(receive: Receive, send: Send) -> None:
    """Acknowledge uvicorn's lifespan protocol; the apps have nothing to set up."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
