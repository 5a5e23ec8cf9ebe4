"""Request rule ``authenticate``: who sent the request (401 without a known API key).

First of all, before the body is read: an unauthenticated client costs one header
lookup and a constant-time comparison against every key (auth.py), nothing more.
"""

from __future__ import annotations

from sparkllm.gateway.asgi import header
from sparkllm.gateway.auth import ApiKeyStore
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.rules.context import Request, Verdict


class Authenticate:
    """``Authorization: Bearer <key>`` or ``x-api-key`` names ``request.user``, or the 401
    to send (auth.py)."""

    def __init__(self, keys: ApiKeyStore) -> None:
        self.keys = keys

    async def __call__(self, request: Request) -> Verdict:
        scope = request.scope
        user = self.keys.authenticate(header(scope, b"authorization"), header(scope, b"x-api-key"))
        if isinstance(user, ErrorReply):
            return user
        request.user = request.key = user
        return None
