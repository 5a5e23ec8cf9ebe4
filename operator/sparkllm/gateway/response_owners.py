"""Who owns a stored response: the user whose request the gateway relayed it for.

Why: SGLang and the router answer ``GET /v1/responses/{id}`` and ``POST
/v1/responses/{id}/cancel`` for whoever asks — they know no tenants — so any key that
learns a response id could read another user's answer or cancel it. The gateway records
the owner of every response id it relays from ``/v1/responses`` (before the answer's
bytes that carry the id reach the client, so the owner's own retrieve can never race the
record) and relays a retrieve or cancel only for its owner. Any other id — another
user's, one never made, one evicted or expired — gets one and the same 404, answered here
after the same single look-up, so the answer is no oracle for which ids exist.

Where: the governance store's backend. With Redis configured the records are shared by
the replicas and kept across restarts (one ``SET NX EX`` per response, one ``GET`` per
retrieve); otherwise they live in this process, bounded (``MAX_IN_PROCESS``, oldest
dropped first). Either way a record expires after ``TTL_SECONDS``. The first owner
recorded for an id keeps it (an engine echoing an id it was given cannot move it).
"""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, Protocol

import redis.asyncio as redis
from redis.exceptions import RedisError

from sparkllm.errors import GovernanceStoreError
from sparkllm.gateway.asgi import Message, Send
from sparkllm.gateway.governance.redis_store import RedisStore
from sparkllm.gateway.governance.store import GovernanceStore

TTL_SECONDS: Final = 7 * 86400
MAX_IN_PROCESS: Final = 100_000
MAX_ID_LENGTH: Final = 256  # SGLang's are "resp_" + 32 hex digits; longer is nobody's
# How far into an answer the id is looked for: a Responses object (and a stream's
# response.created event) names its id first, before any generated text.
_SNIFF_BYTES: Final = 64 * 1024
# The first "id" naming a response. Generated text is JSON-escaped (\"), so it cannot
# fake this sequence.
_RESPONSE_ID = re.compile(rb'"id"\s*:\s*"(resp_[A-Za-z0-9_-]{1,250})"')

log = logging.getLogger(__name__)


class ResponseOwners(Protocol):
    """Owner records: ``claim`` when relayed, ``owner`` when retrieved or cancelled."""

    async def claim(self, response_id: str, user: str) -> None: ...

    async def owner(self, response_id: str) -> str | None: ...


class MemoryOwners:
    """In-process records, bounded and expiring (one gateway replica, lost on restart)."""

    def __init__(
        self,
        *,
        capacity: int = MAX_IN_PROCESS,
        ttl_seconds: float = TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._records: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._capacity, self._ttl, self._clock = capacity, ttl_seconds, clock

    async def claim(self, response_id: str, user: str) -> None:
        if await self.owner(response_id) is not None:
            return
        self._records[response_id] = (user, self._clock() + self._ttl)
        while len(self._records) > self._capacity:
            self._records.popitem(last=False)

    async def owner(self, response_id: str) -> str | None:
        record = self._records.get(response_id)
        if record is None:
            return None
        user, expires = record
        if expires <= self._clock():
            del self._records[response_id]
            return None
        return user


class RedisOwners:
    """Records in the governance Redis: shared by replicas, kept across restarts."""

    def __init__(self, client: redis.Redis, *, key_prefix: str, ttl_seconds: int = TTL_SECONDS):
        self._client, self._prefix, self._ttl = client, f"{key_prefix}:resp-owner:", ttl_seconds

    async def claim(self, response_id: str, user: str) -> None:
        try:
            await self._client.set(self._prefix + response_id, user, nx=True, ex=self._ttl)
        except RedisError as exc:  # the answer is made; its owner cannot retrieve it
            log.warning("response owner not recorded id=%s error=%s", response_id, exc)

    async def owner(self, response_id: str) -> str | None:
        try:
            value = await self._client.get(self._prefix + response_id)
        except RedisError as exc:
            raise GovernanceStoreError(f"the governance store cannot be reached: {exc}") from exc
        return value.decode() if isinstance(value, bytes) else value


def owners_for(store: GovernanceStore) -> ResponseOwners:
    """The records beside the governance state: in its Redis, else in process."""
    if isinstance(store, RedisStore):
        return RedisOwners(store.client, key_prefix=store.key_prefix)
    return MemoryOwners()


async def owned_by(owners: ResponseOwners, response_id: str, user: str) -> bool:
    """Whether ``user`` owns ``response_id`` (an over-long id is nobody's)."""
    if len(response_id) > MAX_ID_LENGTH:
        return False
    return await owners.owner(response_id) == user


def claiming_send(send: Send, owners: ResponseOwners, *, user: str) -> Send:
    """``send`` that records ``user`` as the owner of the response id the answer names,
    before the bytes naming it are passed on."""
    seen = bytearray()
    done = False

    async def claim_then_send(message: Message) -> None:
        nonlocal done
        if not done and message["type"] == "http.response.body":
            seen.extend(message.get("body", b""))
            found = _RESPONSE_ID.search(seen)
            if found is not None:
                await owners.claim(found.group(1).decode(), user)
            done = found is not None or len(seen) > _SNIFF_BYTES
        await send(message)

    return claim_then_send
