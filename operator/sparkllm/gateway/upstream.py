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
  from the upstream pauses while more than ``_HIGH_WATER`` bytes wait to be sent on.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

Headers = list[tuple[bytes, bytes]]

_HIGH_WATER = 256 * 1024  # buffered response bytes before reading from the upstream pauses


class UpstreamError(Exception):
    """The exchange with the upstream failed; the subclasses say how."""


class UpstreamUnavailableError(UpstreamError):
    """No connection could be made (refused, connect timeout, pool exhausted)."""


class UpstreamTimeoutError(UpstreamError):
    """The upstream sent nothing within the read timeout."""


class UpstreamBrokenError(UpstreamError):
    """The connection broke, or the upstream's answer was not valid HTTP/1.1."""


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


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one exchange at a time; httptools parses the answers."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._head_complete = False
        self._headers: Headers = []
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[bool] | None = None  # True: timed out
        # The read timeout: one timer per connection, re-armed only when it fires early,
        # instead of a timer created and cancelled for every body chunk.
        self._timer: asyncio.TimerHandle | None = None
        self._active_at = 0.0  # loop time of the last data, or of the start of the wait
        self._received_any = False
        self._complete = False
        self._close_requested = False
        self.error: UpstreamError | None = None
        self.closed = False

    # -- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_timer()
        if not self._complete and self.error is None:
            self.error = UpstreamBrokenError(
                f"connection closed by the upstream{f': {exc}' if exc else ''}"
            )
        self._signal()

    def data_received(self, data: bytes) -> None:
        self._received_any = True
        self._active_at = asyncio.get_running_loop().time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.error = UpstreamBrokenError(f"invalid HTTP from the upstream: {exc}")
            self.close()

    # -- httptools callbacks ------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        if (b"connection", b"close") in self._headers:
            self._close_requested = True
        self._head_complete = True
        self._signal()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and not self._paused and self._transport is not None:
            self._transport.pause_reading()
            self._paused = True
        self._signal()

    def on_message_complete(self) -> None:
        self._complete = True
        self._cancel_timer()
        self._signal()

    # -- the exchange ---------------------------------------------------------------------
    @property
    def received_any(self) -> bool:
        return self._received_any

    @property
    def reusable(self) -> bool:
        return self._complete and not self.closed and not self._close_requested

    def send_request(self, request: bytes) -> None:
        """Write a whole request; ``head()`` then waits for the answer's status and headers."""
        assert self._transport is not None
        self._headers, self._head_complete = [], False
        self._complete, self._received_any = False, False
        self._transport.write(request)

    async def body(self, *, read_timeout: float) -> AsyncIterator[bytes]:
        """The response body as it arrives (de-chunked), until the message is complete.

        What has arrived is handed over at once, as one piece: under load one read from
        the upstream often holds several SSE events, and relaying them in one send saves
        a system call and a wake-up of the client per extra event. Nothing waits for more
        data to be joined. The buffer is then empty, so reading resumes if it was paused.
        """
        while True:
            if self._chunks:
                chunks = self._chunks
                chunk = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                self._buffered = 0
                if self._paused:
                    assert self._transport is not None
                    self._transport.resume_reading()
                    self._paused = False
                yield chunk
                continue  # more may have come while the caller had the chunk
            if self._complete:
                return
            if self.error is not None:
                raise self.error
            await self._wait(read_timeout)

    async def head(self, *, read_timeout: float) -> tuple[int, Headers]:
        """The answer's status and headers, as soon as they are complete."""
        while not self._head_complete:
            if self.error is not None:
                raise self.error
            await self._wait(read_timeout)
        return self._parser.get_status_code(), self._headers

    async def _wait(self, read_timeout: float) -> None:
        """Until the parser signals, or ``read_timeout`` passes without data."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        self._active_at = loop.time()
        if self._timer is None:
            self._timer = loop.call_at(self._active_at + read_timeout, self._expire, read_timeout)
        try:
            await waiter
        finally:
            self._waiter = None
        if waiter.result():
            raise UpstreamTimeoutError(f"no data from the upstream for {read_timeout:g} s")

    def _expire(self, read_timeout: float) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # nobody waits: the next wait arms the timer again
        loop = asyncio.get_running_loop()
        due = self._active_at + read_timeout
        if loop.time() >= due:
            waiter.set_result(True)
        else:  # data came, or a new wait began, since the timer was set
            self._timer = loop.call_at(due, self._expire, read_timeout)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _signal(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(False)

    def close(self) -> None:
        self._cancel_timer()
        if self._transport is not None and not self.closed:
            self._transport.close()
        self.closed = True


def _splits_request(text: bytes) -> bool:
    return b"\r" in text or b"\n" in text


class _Exchange:
    """The async context manager ``UpstreamPool.exchange`` returns (a class rather than
    ``contextlib.asynccontextmanager``: it is on every request's path)."""

    __slots__ = ("_connection", "_on_wait", "_pool", "_request")

    def __init__(
        self, pool: UpstreamPool, request: bytes, on_wait: Callable[[], object] | None
    ) -> None:
        self._pool, self._request, self._on_wait = pool, request, on_wait
        self._connection: _Connection | None = None

    async def __aenter__(self) -> Response:
        pool = self._pool
        await pool._acquire(self._on_wait)
        try:
            connection, status, headers = await pool._send(self._request, self._on_wait)
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
    _connection: _Connection
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
        self._idle: list[_Connection] = []
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

    def exchange(self, request: bytes, *, on_wait: Callable[[], object] | None = None) -> _Exchange:
        """``async with pool.exchange(request) as response``: the Response once its head
        arrived; the connection is released when the block is left.

        Released however the block is left: back to the pool if the body was read to the
        end and the upstream keeps the connection, closed otherwise (an error, a timeout,
        the caller cancelled). ``on_wait`` is called before the exchange first waits: for
        a free connection, for a new one, or (the usual case) for the answer once the
        request is written — it may be called more than once.
        """
        return _Exchange(self, request, on_wait)

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

    def _release(self, connection: _Connection | None) -> None:
        if connection is not None:
            if connection.reusable:
                self._idle.append(connection)
            else:
                connection.close()
        self._slots.release()

    async def _send(
        self, request: bytes, on_wait: Callable[[], object] | None
    ) -> tuple[_Connection, int, Headers]:
        """Write ``request`` and wait for the head; once more on a fresh connection if a
        reused one broke before answering. The connection is closed on failure."""
        connection, reused = self._idle_connection()
        if connection is None:
            if on_wait is not None:
                on_wait()
            connection = await self._connect()
        connection.send_request(request)
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

    async def _head(self, connection: _Connection) -> tuple[int, Headers]:
        try:
            return await connection.head(read_timeout=self._read_timeout)
        except BaseException:
            connection.close()
            raise

    def _idle_connection(self) -> tuple[_Connection | None, bool]:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection, True
        return None, False

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        endpoint = self.endpoint
        try:
            async with asyncio.timeout(self._connect_timeout):
                _transport, connection = await loop.create_connection(
                    _Connection,
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
