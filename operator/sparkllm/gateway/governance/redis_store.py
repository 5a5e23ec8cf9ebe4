"""The shared governance store: per-user budgets, the ledger and global slots in Redis.

Why Redis: with one gateway replica the state can live in the process (store.py's
MemoryStore), but then a restart forgets every budget and the ledger, and a second
replica would keep budgets of its own — a user could spend each budget once per
replica, and each replica would let ``maxConcurrentRequests`` through. Here every
decision that must hold across replicas is one Lua script (redis_scripts.py), run by
Redis atomically; the gateway keeps nothing but the leases it must refresh.

Leases: a ticket (a reservation) and a global slot each carry a deadline on the
server's clock. A background task extends the ones this process holds every third of
the lease; a gateway that dies stops extending them, and once they lapse the next
admit (or any replica's refresh) settles the reservation at what it reserved and
frees the slot. Nothing held by a dead gateway leaks for longer than one lease.
``holds`` trusts a slot only while its last confirmed extension is younger than half
a lease (a refresh that failed, or found it gone, makes it untrusted at once).

Round trips per request: ``admit`` (with the slot when asked) and ``settle`` (with the
release when asked) are one script each; redis_scripts.py says which costs what. The
scripts of the request path (``admit``, ``settle``, ``acquire_slot``) go over a lean
connection of their own (redis_wire.py: redis-py's asyncio client costs about a round
trip's time again around each command); the refresh, the ledger and ``ping`` use redis-py.

Failures: ``admit`` and ``acquire_slot`` raise ``GovernanceStoreError`` when Redis
cannot answer (the gateway answers 503: it cannot promise a budget it cannot check).
``settle`` and ``release_slot`` log and return instead: the request is already
answered, and the lease's expiry settles it at its reservation (conservative).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from datetime import date
from typing import TYPE_CHECKING, Final, cast

import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError

from sparkllm.errors import GovernanceStoreError
from sparkllm.gateway.governance import redis_scripts as scripts
from sparkllm.gateway.governance.redis_ledger import epoch_day, read_rows
from sparkllm.gateway.governance.redis_wire import Script, ScriptConnection
from sparkllm.gateway.governance.store import (
    MINUTE_SECONDS,
    Admit,
    AdmitRequest,
    GovernanceStore,
    MemoryStore,
    Refusal,
    SlotRequest,
    UsageRow,
    grant,
    window_start,
)

if TYPE_CHECKING:  # config.py imports parse_address from here
    from sparkllm.gateway.config import GatewayConfig

DEFAULT_PORT: Final = 6379
DEFAULT_LEASE_SECONDS: Final = 30.0
CONNECT_TIMEOUT_SECONDS: Final = 2.0
COMMAND_TIMEOUT_SECONDS: Final = 2.0
RETRY_BACKOFF_SECONDS: Final = 0.1
NO_LIMIT: Final = -1

log = logging.getLogger("sparkllm.gateway.governance")


def parse_address(address: str) -> tuple[str, int]:
    """``host``, ``host:port`` or ``[v6]:port`` -> (host, port); the port defaults to 6379."""
    text = address.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":") if rest.startswith(":") else rest
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:  # a bare host name or IPv6 address
        host, port = text, ""
    if not host or (port and not (port.isdigit() and 0 < int(port) < 65536)):
        raise ValueError(f"invalid Redis address {address!r}: expected host or host:port")
    return host, int(port) if port else DEFAULT_PORT


def _unavailable(what: str, exc: RedisError) -> GovernanceStoreError:
    return GovernanceStoreError(f"the shared governance store (Redis) could not {what}: {exc}")


class RedisStore:
    """``GovernanceStore`` over one Redis; state shared by replicas and kept across restarts."""

    shared = True

    def __init__(
        self,
        client: redis.Redis,
        *,
        key_prefix: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be > 0")
        self._client = client
        self._prefix = key_prefix
        self._lease_ms = max(1, round(lease_seconds * 1000))
        self._leases_key = f"{key_prefix}:leases"
        self._slots_key = f"{key_prefix}:slots"
        self._admit = Script(scripts.ADMIT)
        self._settle = Script(scripts.SETTLE)
        self._acquire = Script(scripts.ACQUIRE_SLOT)
        self._refresh = client.register_script(scripts.REFRESH)
        self.wire = _wire_for(client)
        self._tickets: set[str] = set()  # leases this process must keep alive
        self._holders: set[str] = set()  # as members of the slots zset: _member(holder)
        self._confirmed: dict[str, float] = {}  # member -> when its lease was last extended
        # Holder names are the caller's (e.g. "local:1"); another replica may use the
        # same ones, so each store's members carry an id of their own.
        self._instance = uuid.uuid4().hex[:12]
        # Tickets: unique across replicas and restarts (a random prefix per store), made
        # by a counter (a uuid4 per request cost more than the rest of the packing).
        self._tickets_from = f"{uuid.uuid4().hex}."
        self._ticket_ids = itertools.count(1)
        self._refresher: asyncio.Task[None] | None = None
        self._closing = False

    @classmethod
    def connect(
        cls,
        address: str,
        *,
        password: str | None,
        key_prefix: str,
        database: int = 0,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> RedisStore:
        """A store on ``address`` (``host:port``); connects lazily, on the first call."""
        host, port = parse_address(address)
        client = redis.Redis(
            host=host,
            port=port,
            db=database,
            password=password or None,
            socket_connect_timeout=CONNECT_TIMEOUT_SECONDS,
            socket_timeout=COMMAND_TIMEOUT_SECONDS,
            client_name="sparkllm-gateway",
            # One quick reconnect (a dropped idle connection, a Redis restart), no more:
            # a request must not wait seconds on an unreachable store before its 503.
            retry=Retry(ExponentialBackoff(cap=RETRY_BACKOFF_SECONDS), retries=1),
        )
        return cls(client, key_prefix=key_prefix, lease_seconds=lease_seconds)

    @property
    def client(self) -> redis.Redis:
        """The connection, for records kept beside the governance state (response_owners)."""
        return self._client

    @property
    def key_prefix(self) -> str:
        return self._prefix

    async def ping(self) -> None:
        """Raise ``GovernanceStoreError`` unless Redis answers (start-up and readiness)."""
        try:
            await self._client.ping()
        except RedisError as exc:
            raise _unavailable("be reached", exc) from exc

    async def admit(self, req: AdmitRequest, *, slot: SlotRequest | None = None) -> Admit | Refusal:
        limits = req.limits
        ticket = f"{self._tickets_from}{next(self._ticket_ids):x}"
        member = "" if slot is None else self._member(slot.holder)
        numbers: list[str | int] = [
            req.input_tokens,
            req.requested_output_tokens,
            req.min_output_tokens,
            _limit(limits.max_concurrent_requests),
            _limit(limits.requests_per_minute),
            window_start(req.now, MINUTE_SECONDS),
            self._lease_ms,
            0 if slot is None else slot.limit,
            len(limits.token_windows),
        ]
        for window in limits.token_windows:  # names: minute, hour, day
            start = window_start(req.now, window.seconds)
            numbers += [window.name, start, window.seconds, window.limit]
        args = [self._prefix, ticket, req.user, member, *numbers]
        self._ensure_refresher()
        asked = time.monotonic()
        try:
            keys = [self._leases_key, self._slots_key]
            state = [int(value) for value in await self.wire.evalsha(self._admit, keys, args)]
        except RedisError as exc:
            raise _unavailable("admit the request", exc) from exc
        admitted, granted, in_progress, this_minute, taken, *charged = state
        if admitted:
            self._tickets.add(ticket)
            if taken:
                self._hold(member, asked)
            return Admit(ticket, granted, slot=bool(taken))
        # The script decided on this state; store.grant() says which limit and until when.
        names = [window.name for window in limits.token_windows]
        _, refusal = grant(
            req=req,
            charged=dict(zip(names, charged, strict=True)),
            requests_this_minute=this_minute,
            in_progress=in_progress,
        )
        if refusal is None:  # the script and grant() disagree: a bug, never a silent admit
            raise GovernanceStoreError(f"the Redis store refused without a reason: {state}")
        return refusal

    async def settle(
        self,
        ticket: str,
        *,
        input_tokens: int,
        output_tokens: int,
        outcome: str,
        now: float,
        release: str | None = None,
    ) -> None:
        self._tickets.discard(ticket)
        member = "" if release is None else self._drop(release)
        day = int(now // 86400)
        args: list[str | int] = [self._prefix, ticket, input_tokens, output_tokens, outcome]
        args += [day, member]
        try:
            await self.wire.evalsha(self._settle, [self._leases_key, self._slots_key], args)
        except RedisError as exc:
            log.warning(
                "governance settle failed; the reservation is charged (and any slot "
                "freed) when its lease ends",
                extra={"ticket": ticket, "error": str(exc)},
            )

    async def usage(self, *, day_from: date, day_to: date) -> list[UsageRow]:
        try:
            return await read_rows(
                self._client, prefix=self._prefix, day_from=day_from, day_to=day_to
            )
        except RedisError as exc:
            raise _unavailable("read the ledger", exc) from exc

    async def acquire_slot(self, holder: str, *, limit: int) -> bool:
        self._ensure_refresher()
        member = self._member(holder)
        asked = time.monotonic()
        try:
            slots = [self._slots_key]
            got = await self.wire.evalsha(self._acquire, slots, [member, limit, self._lease_ms])
        except RedisError as exc:
            raise _unavailable("take a slot", exc) from exc
        if got:
            self._hold(member, asked)
        return bool(got)

    async def release_slot(self, holder: str) -> None:
        member = self._drop(holder)
        try:
            await self._client.zrem(self._slots_key, member)
        except RedisError as exc:
            log.warning(
                "governance slot release failed; the slot frees when its lease ends",
                extra={"holder": holder, "error": str(exc)},
            )

    def holds(self, holder: str) -> bool:
        member = self._member(holder)
        confirmed = self._confirmed.get(member)
        if member not in self._holders or confirmed is None:
            return False
        return time.monotonic() - confirmed < self._lease_ms / 2000

    async def refresh(self) -> int:
        """Extend this process's leases and settle lapsed ones; how many were already lost."""
        tickets, holders = sorted(self._tickets), sorted(self._holders)
        args: list[str | int] = [self._prefix, self._lease_ms, len(tickets), *tickets, *holders]
        asked = time.monotonic()
        try:
            found = await self._refresh([self._leases_key, self._slots_key], args)
        except RedisError:
            self._confirmed.clear()  # unconfirmed: no slot is handed on without asking
            raise
        lost = {cast(bytes, name).decode() for name in found}
        for member in holders:
            if member in lost:
                self._drop_member(member)
            elif member in self._holders:  # not released meanwhile
                self._confirmed[member] = asked
        self._tickets -= lost
        if lost:
            log.warning("governance leases lapsed before refresh", extra={"lost": len(lost)})
        return len(lost)

    async def aclose(self) -> None:
        """Stop refreshing and disconnect (what this process holds lapses with its lease).

        Python 3.11's ``asyncio.timeout`` (inside redis-py) can turn a cancellation that
        meets an expiring socket timeout into a TimeoutError, so the refresher also stops
        on a flag, and the wait for it is bounded.
        """
        self._closing = True
        if self._refresher is not None:
            self._refresher.cancel()
            await asyncio.wait({self._refresher}, timeout=COMMAND_TIMEOUT_SECONDS * 2)
            self._refresher = None
        await self.wire.aclose()
        await self._client.aclose()

    def _member(self, holder: str) -> str:
        return f"{self._instance}/{holder}"

    def _hold(self, member: str, asked: float) -> None:
        self._holders.add(member)
        self._confirmed[member] = asked

    def _drop(self, holder: str) -> str:
        """Forget ``holder``'s slot (stop refreshing it); its member name, to release."""
        member = self._member(holder)
        self._drop_member(member)
        return member

    def _drop_member(self, member: str) -> None:
        self._holders.discard(member)
        self._confirmed.pop(member, None)

    def _ensure_refresher(self) -> None:
        if self._closing:
            raise GovernanceStoreError("the governance store was closed")
        if self._refresher is None or self._refresher.done():
            self._refresher = asyncio.get_running_loop().create_task(self._refresh_forever())

    async def _refresh_forever(self) -> None:
        period = self._lease_ms / 3000
        while not self._closing:
            await asyncio.sleep(period)
            try:
                await self.refresh()
            except RedisError as exc:
                log.warning("governance lease refresh failed", extra={"error": str(exc)})


def _wire_for(client: redis.Redis) -> ScriptConnection:
    """A lean connection to the Redis ``client`` is configured for (its pool's settings)."""
    settings = client.connection_pool.connection_kwargs
    if "host" not in settings:
        raise ValueError("the governance store needs Redis over TCP (host and port)")
    timeout = settings.get("socket_timeout") or COMMAND_TIMEOUT_SECONDS
    return ScriptConnection(
        host=settings["host"],
        port=int(settings.get("port", DEFAULT_PORT)),
        password=settings.get("password"),
        username=settings.get("username"),
        database=int(settings.get("db", 0)),
        timeout=timeout,
        connect_timeout=settings.get("socket_connect_timeout") or CONNECT_TIMEOUT_SECONDS,
    )


def open_store(config: GatewayConfig) -> GovernanceStore:
    """Redis when an address is configured, else the in-process store (and says which)."""
    address = config.governance_redis_address
    if address is None:
        log.info("governance state in process: lost on restart, not shared by replicas")
        return MemoryStore()
    password = config.governance_redis_password
    log.info(
        "governance state in Redis: shared by replicas, kept across restarts",
        extra={"address": address, "prefix": config.governance_key_prefix},
    )
    return RedisStore.connect(
        address,
        password=None if password is None else password.get_secret_value(),
        key_prefix=config.governance_key_prefix,
        database=config.governance_redis_database,
    )


def read_ledger(
    address: str,
    *,
    password: str | None,
    key_prefix: str,
    database: int,
    day_from: date,
    day_to: date,
) -> list[UsageRow]:
    """The ledger's rows from a shared store, without a gateway (``sparkllm usage --redis``)."""

    async def read() -> list[UsageRow]:
        store = RedisStore.connect(
            address, password=password, key_prefix=key_prefix, database=database
        )
        try:
            return await store.usage(day_from=day_from, day_to=day_to)
        finally:
            await store.aclose()

    return asyncio.run(read())


def _limit(value: int | None) -> int:
    return NO_LIMIT if value is None else value


__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "RedisStore",
    "epoch_day",  # redis_ledger's, for callers of this module
    "open_store",
    "parse_address",
    "read_ledger",
]
