"""One keep-alive HTTP/1.1 connection to the upstream, as an asyncio protocol.

Why its own module: the pool (upstream.py) decides which connection an exchange uses,
frames the request, retries once on a stale connection and returns connections to the
pool; this module is what happens on one connection, and is where the bytes arrive:
``httptools`` (llhttp) parses the answer through the callbacks below, the body is handed
over as it arrives with flow control (reading pauses while more than ``HIGH_WATER``
bytes wait to be sent on, so a slow client does not make the gateway buffer a fast
upstream without bound), and one read timer per connection says when the upstream sent
nothing for too long. The typed failures both raise live here too.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator

import httptools

Headers = list[tuple[bytes, bytes]]

HIGH_WATER = 256 * 1024  # buffered response bytes before reading from the upstream pauses


class UpstreamError(Exception):
    """The exchange with the upstream failed; the subclasses say how."""


class UpstreamUnavailableError(UpstreamError):
    """No connection could be made (refused, connect timeout, pool exhausted)."""


class UpstreamTimeoutError(UpstreamError):
    """The upstream sent nothing within the read timeout."""


class UpstreamBrokenError(UpstreamError):
    """The connection broke, or the upstream's answer was not valid HTTP/1.1."""


class UpstreamConnection(asyncio.Protocol):
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
        if self._buffered > HIGH_WATER and not self._paused and self._transport is not None:
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


__all__ = [
    "HIGH_WATER",
    "Headers",
    "UpstreamBrokenError",
    "UpstreamConnection",
    "UpstreamError",
    "UpstreamTimeoutError",
    "UpstreamUnavailableError",
]
