"""Connection limits uvicorn does not set: header size, header and body read deadlines.

Why: the admission layer is the front door, open to every client with or without a key
(``/health`` needs none). uvicorn's httptools protocol reads headers without a size
limit (a 64 MB header grew the gateway from 74 to 198 MB) and without a deadline, and
reads a body for as long as the client trickles it (one byte every few seconds kept a
connection open indefinitely). This protocol, a subclass of uvicorn's, adds:

* a cap on the bytes of one request's start line and headers: above it the client gets
  431 and the connection closes, before the parser buffers more. It holds however the
  bytes arrive: headers still incomplete after a read are bounded by the bytes received
  (the parser keeps a header's pieces until it ends), and headers that end within a read
  by what the parser hands over (target, names, values and their separators), checked
  as each arrives — so one write of a 100 KB header is refused like a slow trickle;
* a deadline for those headers from the connection's (or the previous response's) end
  of idleness: 408, then close;
* a deadline for the request body once the headers are in: the connection closes (the
  application sees the client leave, as for any disconnect).

The idle keep-alive timeout between requests is uvicorn's own (``timeout_keep_alive``,
set from the configuration in server.py). Everything else is uvicorn's code path.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

# What a parsed header field costs beyond its name and value: ": " and CRLF.
_FIELD_SEPARATORS = 4


class _HeadersTooLargeError(Exception):
    """Raised from a parser callback to stop parsing a request already refused with 431."""


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header size and read deadlines (class settings)."""

    max_header_bytes: ClassVar[int] = 32 * 1024
    header_timeout: ClassVar[float] = 10.0
    body_timeout: ClassVar[float] = 60.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reading_headers = True
        self._header_bytes = 0  # bytes received while this request's headers are incomplete
        self._parsed_bytes = 0  # this request's target and header fields, as parsed
        self._refused = False
        self._deadline: asyncio.TimerHandle | None = None

    @classmethod
    def configured(
        cls, *, max_header_bytes: int, header_timeout: float, body_timeout: float
    ) -> type[GuardedHttpToolsProtocol]:
        """A subclass with these limits (uvicorn instantiates the class per connection)."""
        settings = {
            "max_header_bytes": max_header_bytes,
            "header_timeout": header_timeout,
            "body_timeout": body_timeout,
        }
        return type("ConfiguredHttpToolsProtocol", (cls,), settings)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_timeout, self._headers_too_slow)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._reading_headers:
            super().data_received(data)
            return
        if self._deadline is None:  # the first bytes after an idle keep-alive
            self._arm(self.header_timeout, self._headers_too_slow)
        self._header_bytes += len(data)
        super().data_received(data)
        if self._reading_headers and self._header_bytes > self.max_header_bytes:
            self._refuse(431)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading_headers = True
        self._parsed_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._count_parsed(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._reading_headers:  # not a chunked body's trailer (the body deadline holds)
            self._count_parsed(len(name) + len(value) + _FIELD_SEPARATORS)
        super().on_header(name, value)

    def _count_parsed(self, size: int) -> None:
        """Refuse once the parsed headers pass the cap, even if they ended in this read."""
        self._parsed_bytes += size
        if self._parsed_bytes > self.max_header_bytes:
            self._refuse(431)
            raise _HeadersTooLargeError  # stops the parser: no application call follows

    def send_400_response(self, msg: str) -> None:
        if not self._refused:  # uvicorn's answer to the parser stopping is not sent twice
            super().send_400_response(msg)

    def on_headers_complete(self) -> None:
        self._reading_headers = False
        self._header_bytes = 0
        self._arm(self.body_timeout, self._body_too_slow)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()
        self._reading_headers = True  # a pipelined request's headers may follow

    def on_response_complete(self) -> None:
        super().on_response_complete()  # arms uvicorn's idle keep-alive timeout
        self._header_bytes = 0

    def _arm(self, seconds: float, callback: Any) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, callback)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_too_slow(self) -> None:
        self._deadline = None
        if self._reading_headers and not self.transport.is_closing():
            in_flight = self.cycle is not None and not self.cycle.response_complete
            if in_flight:  # still answering the previous request: keep waiting
                self._arm(self.header_timeout, self._headers_too_slow)
            else:
                self._refuse(408)

    def _body_too_slow(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()  # the application sees http.disconnect

    def _refuse(self, status: int) -> None:
        self._disarm()
        self._reading_headers = False
        self._refused = True
        body = b"request header fields too large" if status == 431 else b"request timeout"
        self.transport.write(
            b"".join(
                [
                    STATUS_LINE[status],
                    b"content-type: text/plain; charset=utf-8\r\n",
                    b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                    b"connection: close\r\n\r\n",
                    body,
                ]
            )
        )
        self.transport.close()
