"""Request rule ``body_size``: the body is read only up to ``maxBodyBytes`` (413 beyond).

Refused from ``Content-Length`` before a byte is read when the client declares more, and
otherwise as soon as the bytes read pass the limit: a client cannot make the gateway
buffer more than it admits.
"""

from __future__ import annotations

from sparkllm.gateway import replies
from sparkllm.gateway.asgi import declared_length, read_body
from sparkllm.gateway.rules.context import Request, Verdict


class BodySize:
    """Read ``request.body`` (at most ``limit`` bytes), or the 413 to send."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    async def __call__(self, request: Request) -> Verdict:
        limit = self.limit
        declared = declared_length(request.scope)
        if declared is not None and declared > limit:
            return replies.request_too_large(limit)
        body = await read_body(request.receive, limit=limit)
        if body is None:
            return replies.request_too_large(limit)
        request.body = body
        return None
