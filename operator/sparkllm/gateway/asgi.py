"""The few ASGI primitives the gateway needs, typed: body reading, replies, headers.

Why no framework: the gateway serves five routes and its budget is about a millisecond
per request; a raw ASGI app has no middleware stack, no request object, no validation
layer of its own, and streams with exactly the ``more_body`` messages it sends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from sparkllm.gateway.replies import ErrorReply

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON_HEADERS = [(b"content-type", b"application/json")]


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of request header ``name`` (lower-case bytes), or None."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


def declared_length(scope: Scope) -> int | None:
    """The Content-Length the client declared, or None if absent or not a number."""
    value = header(scope, b"content-length")
    if value is None or not value.isdigit():
        return None
    return int(value)


class ClientDisconnectedError(Exception):
    """The client went away while we were reading its request body."""


async def read_body(receive: Receive, *, limit: int) -> bytes | None:
    """The request body, or None as soon as it exceeds ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnectedError
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def wait_for_disconnect(receive: Receive) -> None:
    """Return when the client disconnects (call only after the body was read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def send_bytes(
    send: Send, *, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    """A complete response in one body message."""
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_reply(send: Send, reply: ErrorReply) -> None:
    """An OpenAI-style error response."""
    await send_bytes(send, status=reply.status, body=reply.body(), headers=reply.headers())
