"""The request path's scripts on a lean Redis connection: one round trip, little else.

Why not redis-py for these: a request's admission waits for one script (``ADMIT``), and
redis-py's asyncio client spends about as long around each command as the round trip
itself — a connection pool with its lock, a stream reader, a timeout context, the reply
parsed in Python one line at a time. Measured on loopback (2026-12-02, 2 cores shared):
a bare ``PING`` took 0.15-0.27 ms p50 through redis-py and 0.05-0.10 ms written to the
socket directly. Here a script call is one write of the encoded command and one reply
parsed in ``data_received``, the transport's own callback, with no task in between.

Scope: ``EVALSHA`` (with ``SCRIPT LOAD`` when Redis lost the script: a restart, a
``SCRIPT FLUSH``) — ``admit``, ``settle`` and ``acquire_slot`` of redis_store.py.
Everything else (the lease refresh every 10 s, the ledger, ``PING``) stays on redis-py.

Pipelined: several requests' scripts may be on the connection at once; replies come in
order, so each call's future waits in a queue. A call with no reply within the timeout,
or a connection lost, fails every call waiting on the connection (their replies can no
longer be told apart) and closes it; the next call connects again. A call that could not
be written (the connection was found closed) is retried once on a new connection, as
redis-py's one retry did. Errors are redis-py's exception classes, so the store's
handling (``RedisError`` -> 503 or a lease) is the same.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import (
    NoScriptError,
    RedisError,
    ResponseError,
)
from redis.exceptions import TimeoutError as RedisTimeoutError

Reply = int | bytes | str | list["Reply"] | ResponseError | None
_CRLF: Final = b"\r\n"
SPIN_SECONDS: Final = 0.0005  # how long a call reads for its reply before it sleeps


class IncompleteReplyError(Exception):
    """The buffer ends inside a reply: wait for more bytes."""


def encode(*args: str | int | bytes) -> bytes:
    """One command in RESP (an array of bulk strings)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def parse(buffer: bytes | bytearray, position: int) -> tuple[Reply, int]:
    """One reply starting at ``position``, and where the next starts (``IncompleteReplyError``)."""
    end = buffer.find(_CRLF, position)
    if end < 0:
        raise IncompleteReplyError
    kind, line = buffer[position], bytes(buffer[position + 1 : end])
    after = end + 2
    if kind == ord(":"):
        return int(line), after
    if kind == ord("$"):
        size = int(line)
        if size < 0:
            return None, after
        if len(buffer) < after + size + 2:
            raise IncompleteReplyError
        return bytes(buffer[after : after + size]), after + size + 2
    if kind == ord("*"):
        count = int(line)
        if count < 0:
            return None, after
        items: list[Reply] = []
        for _ in range(count):
            item, after = parse(buffer, after)
            items.append(item)
        return items, after
    if kind == ord("+"):
        return line.decode(), after
    if kind == ord("-"):
        message = line.decode(errors="replace")
        if message.startswith("NOSCRIPT"):
            return NoScriptError(message), after
        return ResponseError(message), after
    raise RedisConnectionError(f"unexpected reply from Redis: {bytes(buffer[position:end])!r}")


class _Protocol(asyncio.Protocol):
    """Replies matched to the calls waiting for them, in order."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiting: collections.deque[asyncio.Future[Reply]] = collections.deque()
        self.lost: BaseException | None = None
        self._buffer = bytearray()
        self._raw: socket.socket | None = None  # the transport's socket, for spin()
        self._chunk = bytearray(16384)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        held = transport.get_extra_info("socket")
        if held is not None:  # a socket object of our own on the same connection
            self._raw = socket.socket(fileno=os.dup(held.fileno()))
            self._raw.setblocking(False)

    def spin(self, future: asyncio.Future[Reply], seconds: float) -> None:
        """Read for ``future``'s reply for up to ``seconds`` before the loop sleeps.

        Why: a reply that comes while this process sleeps waits for the scheduler to wake
        it, which on a busy machine is milliseconds (a script's reply comes ~0.1 ms after
        the command; a bare PING's before the loop has gone to sleep, which is why a PING
        looks fast and a script did not). Reading the socket meanwhile, without sleeping,
        takes the reply as it comes. Bounded, and the loop does nothing else meanwhile:
        at most ``seconds`` per call of the request path (admit, settle).
        """
        raw = self._raw
        if raw is None:
            return
        deadline = time.perf_counter() + seconds
        chunk = self._chunk
        while not future.done() and self.lost is None:
            try:
                size = raw.recv_into(chunk)
            except BlockingIOError:
                if time.perf_counter() >= deadline:
                    return
                continue
            except OSError:
                return  # the transport sees it too, and says so
            if not size:
                return  # end of stream: the transport's own read reports it
            self.data_received(bytes(chunk[:size]))

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        position = 0
        try:
            while position < len(buffer):
                reply, position = parse(buffer, position)
                if self.waiting:
                    future = self.waiting.popleft()
                    if not future.done():
                        future.set_result(reply)
        except IncompleteReplyError:
            pass
        except RedisError as exc:  # a reply that cannot be read: the stream is lost
            self.fail(exc)
        del buffer[:position]

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(RedisConnectionError(f"connection to Redis lost: {exc or 'closed'}"))

    def fail(self, exc: BaseException) -> None:
        """Fail every waiting call and close: later replies could not be matched."""
        if self.lost is None:
            self.lost = exc
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_exception(exc)
        if self.transport is not None:
            self.transport.close()
        if self._raw is not None:
            with contextlib.suppress(OSError):
                self._raw.close()
            self._raw = None


@dataclass(frozen=True, slots=True)
class Script:
    """A Lua script, called by its SHA-1 (loaded on NOSCRIPT)."""

    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())


class ScriptConnection:
    """``EVALSHA`` on one connection; see the module docstring."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        password: str | None,
        database: int,
        timeout: float,
        connect_timeout: float,
        username: str | None = None,
        spin: float = SPIN_SECONDS,
    ) -> None:
        self._host, self._port = host, port
        self._password, self._username, self._database = password, username, database
        self._timeout, self._connect_timeout = timeout, connect_timeout
        self._spin = spin
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None
        self.sent = 0  # commands written (tests count round trips)

    async def evalsha(self, script: Script, keys: Sequence[str], args: Sequence[str | int]) -> Any:
        """The script's reply; redis-py's exceptions on failure."""
        command = encode("EVALSHA", script.sha, len(keys), *keys, *args)
        reply = await self._call(command)
        if isinstance(reply, NoScriptError):  # Redis restarted or flushed its scripts
            loaded = await self._call(encode("SCRIPT", "LOAD", script.source))
            if isinstance(loaded, ResponseError):
                raise loaded
            reply = await self._call(command)
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    async def aclose(self) -> None:
        if self._protocol is not None:
            self._protocol.fail(RedisConnectionError("the connection was closed"))
        self._protocol = None

    async def _call(self, command: bytes) -> Reply:
        protocol = self._protocol
        if protocol is None or protocol.lost is not None:
            protocol = await self._connect()
        try:
            return await self._exchange(protocol, command)
        except _NotWrittenError:  # closed before it was written: once more, on a new connection
            return await self._exchange(await self._connect(), command)

    async def _exchange(self, protocol: _Protocol, command: bytes) -> Reply:
        transport = protocol.transport
        if protocol.lost is not None or transport is None or transport.is_closing():
            raise _NotWrittenError
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        protocol.waiting.append(future)
        transport.write(command)
        self.sent += 1
        if self._spin > 0:
            protocol.spin(future, self._spin)
            if future.done():  # answered meanwhile: no timer, no wait
                return future.result()
        timer = asyncio.get_running_loop().call_later(
            self._timeout, protocol.fail, RedisTimeoutError("Redis did not answer in time")
        )
        try:
            return await future
        finally:
            timer.cancel()

    async def _connect(self) -> _Protocol:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            current = self._protocol
            if current is not None and current.lost is None:
                return current  # another call connected meanwhile
            loop = asyncio.get_running_loop()
            protocol: _Protocol | None = None
            try:
                async with asyncio.timeout(self._connect_timeout):
                    _, protocol = await loop.create_connection(_Protocol, self._host, self._port)
                    await self._handshake(protocol)
            except (OSError, TimeoutError) as exc:
                if protocol is not None:
                    protocol.fail(RedisTimeoutError("Redis did not answer the handshake in time"))
                raise RedisConnectionError(
                    f"cannot connect to Redis at {self._host}:{self._port}: {exc}"
                ) from exc
            self._protocol = protocol
            return protocol

    async def _handshake(self, protocol: _Protocol) -> None:
        """AUTH, the client's name and the database: written at once, one round trip."""
        commands = [encode("CLIENT", "SETNAME", "sparkllm-gateway-scripts")]
        if self._password:
            auth = [self._username, self._password] if self._username else [self._password]
            commands.insert(0, encode("AUTH", *auth))
        if self._database:
            commands.append(encode("SELECT", self._database))
        loop = asyncio.get_running_loop()
        replies = [loop.create_future() for _ in commands]
        protocol.waiting.extend(replies)
        assert protocol.transport is not None
        protocol.transport.write(b"".join(commands))
        for reply in await asyncio.gather(*replies):
            if isinstance(reply, ResponseError):
                protocol.fail(reply)
                raise reply


class _NotWrittenError(Exception):
    """The connection was closed before the command was written (safe to retry)."""


__all__ = ["IncompleteReplyError", "Reply", "Script", "ScriptConnection", "encode", "parse"]
