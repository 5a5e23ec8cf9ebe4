"""The gateway's HTTP/1.1 client to its one upstream, the router: keep-alive pool, streaming.

Why not a general-purpose client: the issue's budget for the whole admission layer is
1 ms at p50 over the router alone, and the general clients spend a large share of it.
Measured at concurrency 1 on the 2-core development machine (streamed chat, simulator
behind smg, paired with smg-alone requests): httpx/httpcore (pure-Python h11 plus anyio)
made the layer cost +2.7 ms, aiohttp's client +1.2 ms, this module +0.8 ms. The gateway
talks to exactly one upstream (smg, on loopback in the same pod) with requests it builds
itself, so the client needs little: write a request, parse a response, keep the
connection. All parsing is done by ``httptools`` (llhttp, the parser of Node.js and of
uvicorn's fast path); this module only frames requests, pools connections and moves
body chunks, with flow control.

What it guarantees:
* at most ``max_connections`` exchanges at once (a caller waits for a free one up to the
  pool timeout, else ``UpstreamUnavailableError``);
* a connection returns to the pool only after a complete response that did not ask to
  close; anything else (error, timeout, the caller cancelled) closes it, so a cancelled
  stream closes the router's connection and the engine aborts the generation;
* a request that fails on a *reused* connection before any response byte arrived (the
  router closed an idle keep-alive connection at the same moment) is sent once more on a
  fresh one; nothing else is retried;
* failures are typed: could not connect (``UpstreamUnavailableError``), no data within
  the read timeout (``UpstreamTimeoutError``), connection lost or unparseable answer
  (``UpstreamBrokenError``);
* a slow client does not make the gateway buffer a fast upstream without bound: reading
  from the upstream pauses while more than ``HIGH_WATER`` bytes wait to be sent on.

One connection — parsing, flow control, the read timeout — is upstream_connection.py;
this module is the pool around it: framing, pooling, the one retry, the typed errors
raised to the caller.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from sparkllm.gateway.upstream_connection import (
    Headers,
    UpstreamBrokenError,
    UpstreamConnection,
    UpstreamError,
    UpstreamTimeoutError,
    UpstreamUnavailableError,
)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the upstream listens, parsed once from its base URL."""

    host: str
    port: int
    tls: bool
    host_header: bytes
    path_prefix: str

    @classmethod
    def from_url(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        tls = parts.scheme == "https"
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL with a host: {url!r}")
        port = parts.port or (443 if tls else 80)
        return cls(
            host=parts.hostname,
            port=port,
            tls=tls,
            host_header=parts.netloc.encode("idna"),
            path_prefix=parts.path.rstrip("/"),
        )


def _splits_request(text: bytes) -> bool:
    return b"\r" in text or b"\n" in text


class _Exchange:
    """The async context manager ``UpstreamPool.exchange`` returns (a class rather than
    ``contextlib.asynccontextmanager``: it is on every request's path)."""

    __slots__ = ("_connection", "_on_sent", "_on_wait", "_pool", "_request")

    def __init__(
        self,
        pool: UpstreamPool,
        request: bytes,
        on_wait: Callable[[], object] | None,
        on_sent: Callable[[], object] | None,
    ) -> None:
        self._pool, self._request, self._on_wait = pool, request, on_wait
        self._on_sent = on_sent
        self._connection: UpstreamConnection | None = None

    async def __aenter__(self) -> Response:
        pool = self._pool
        await pool._acquire(self._on_wait)
        try:
            connection, status, headers = await pool._send(
                self._request, self._on_wait, self._on_sent
            )
        except BaseException:
            pool._release(None)
            raise
        self._connection = connection
        return Response(status, headers, connection, pool._read_timeout)

    async def __aexit__(self, *_exc: object) -> None:
        self._pool._release(self._connection)


@dataclass(frozen=True, slots=True)
class Response:
    """An upstream answer whose body is still to be read with ``chunks()``."""

    status: int
    headers: Headers
    _connection: UpstreamConnection
    _read_timeout: float

    def chunks(self) -> AsyncIterator[bytes]:
        return self._connection.body(read_timeout=self._read_timeout)


class UpstreamPool:
    """Keep-alive connections to one upstream; ``exchange`` is the one way to use them."""

    def __init__(
        self,
        *,
        base_url: str,
        connect_timeout: float,
        read_timeout: float,
        max_connections: int,
        pool_timeout: float | None = None,
        default_headers: Iterable[tuple[bytes, bytes]] = (),
    ) -> None:
        self.endpoint = Endpoint.from_url(base_url)
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._pool_timeout = read_timeout if pool_timeout is None else pool_timeout
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: list[UpstreamConnection] = []
        self._ssl = ssl.create_default_context() if self.endpoint.tls else None
        self._host_and_default_headers = b"".join(
            name + b": " + value + b"\r\n"
            for name, value in [(b"host", self.endpoint.host_header), *default_headers]
            if not (_splits_request(name) or _splits_request(value))
        )
        self._prefixes: dict[tuple[str, str], bytes] = {}

    def request_bytes(
        self, *, method: str, path: str, headers: Iterable[tuple[bytes, bytes]], body: bytes
    ) -> bytes:
        """The request as written: request line, Host, the pool's headers, framing, the
        given headers (any with CR or LF dropped: they could split the request), body."""
        key = (method, path)
        prefix = self._prefixes.get(key)
        if prefix is None:  # a handful of distinct routes: built once each
            line = f"{method} {self.endpoint.path_prefix}{path} HTTP/1.1".encode("ascii")
            prefix = self._prefixes[key] = line + b"\r\n" + self._host_and_default_headers
        lines = [prefix]
        if body or method not in ("GET", "HEAD"):
            lines.append(b"content-length: %d\r\n" % len(body))
        for name, value in headers:
            if _splits_request(name) or _splits_request(value):
                continue
            lines.append(name + b": " + value + b"\r\n")
        lines.append(b"\r\n")
        lines.append(body)
        return b"".join(lines)

    def exchange(
        self,
        request: bytes,
        *,
        on_wait: Callable[[], object] | None = None,
        on_sent: Callable[[], object] | None = None,
    ) -> _Exchange:
        """``async with pool.exchange(request) as response``: the Response once its head
        arrived; the connection is released when the block is left.

        Released however the block is left: back to the pool if the body was read to the
        end and the upstream keeps the connection, closed otherwise (an error, a timeout,
        the caller cancelled). ``on_wait`` is called before the exchange first waits: for
        a free connection, for a new one, or (the usual case) for the answer once the
        request is written — it may be called more than once. ``on_sent`` is called once
        the request is written to a connection (from then on the upstream may be working
        on it).
        """
        return _Exchange(self, request, on_wait, on_sent)

    async def _acquire(self, on_wait: Callable[[], object] | None) -> None:
        if self._slots.locked():  # the timeout only where waiting is possible
            if on_wait is not None:
                on_wait()
            try:
                async with asyncio.timeout(self._pool_timeout):
                    await self._slots.acquire()
            except TimeoutError:
                raise UpstreamUnavailableError("no free upstream connection in time") from None
        else:
            await self._slots.acquire()

    def _release(self, connection: UpstreamConnection | None) -> None:
        if connection is not None:
            if connection.reusable:
                self._idle.append(connection)
            else:
                connection.close()
        self._slots.release()

    async def _send(
        self,
        request: bytes,
        on_wait: Callable[[], object] | None,
        on_sent: Callable[[], object] | None = None,
    ) -> tuple[UpstreamConnection, int, Headers]:
        """Write ``request`` and wait for the head; once more on a fresh connection if a
        reused one broke before answering. The connection is closed on failure."""
        connection, reused = self._idle_connection()
        if connection is None:
            if on_wait is not None:
                on_wait()
            connection = await self._connect()
        connection.send_request(request)
        if on_sent is not None:
            on_sent()
        if on_wait is not None:
            on_wait()
        try:
            return connection, *await self._head(connection)
        except UpstreamBrokenError:
            if not reused or connection.received_any:
                raise
        connection = await self._connect()  # a stale keep-alive connection: once more
        connection.send_request(request)
        return connection, *await self._head(connection)

    async def _head(self, connection: UpstreamConnection) -> tuple[int, Headers]:
        try:
            return await connection.head(read_timeout=self._read_timeout)
        except BaseException:
            connection.close()
            raise

    def _idle_connection(self) -> tuple[UpstreamConnection | None, bool]:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection, True
        return None, False

    async def _connect(self) -> UpstreamConnection:
        loop = asyncio.get_running_loop()
        endpoint = self.endpoint
        try:
            async with asyncio.timeout(self._connect_timeout):
                _transport, connection = await loop.create_connection(
                    UpstreamConnection,
                    endpoint.host,
                    endpoint.port,
                    ssl=self._ssl,
                    server_hostname=endpoint.host if self._ssl else None,
                )
        except TimeoutError:
            raise UpstreamUnavailableError(
                f"connecting to {endpoint.host}:{endpoint.port} timed out after "
                f"{self._connect_timeout:g} s"
            ) from None
        except OSError as exc:
            raise UpstreamUnavailableError(
                f"cannot connect to {endpoint.host}:{endpoint.port}: {exc}"
            ) from exc
        return connection

    def close(self) -> None:
        """Close the idle connections (in-flight ones close when their exchange ends)."""
        while self._idle:
            self._idle.pop().close()


__all__ = [
    "Endpoint",
    "Headers",
    "Response",
    "UpstreamBrokenError",
    "UpstreamError",
    "UpstreamPool",
    "UpstreamTimeoutError",
    "UpstreamUnavailableError",
]
