"""Relaying admitted requests to the router (smg) and its answers back, byte for byte.

Why this way:
* one shared ``httpx.AsyncClient`` for the gateway's life: pooled keep-alive connections
  to the router, no TLS/TCP setup per request;
* the user's key never travels on: upstream requests are built from scratch with only
  the headers the engine needs, plus the upstream key when configured;
* the answer is streamed: the upstream's body chunks are sent on as they arrive
  (``more_body``), so SSE tokens reach the user without buffering;
* a client that disconnects cancels the upstream exchange, which closes the upstream
  connection and makes the engine abort the generation instead of finishing it for no one;
* failures are told apart: when the router answered, its status and body pass through
  unchanged; when it could not be reached, the client gets 503; a broken exchange gets
  502, no response in time 504 — in OpenAI's error format (replies.py).

httpx errors are translated here and do not leave this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from sparkllm.gateway import replies
from sparkllm.gateway.asgi import Receive, Send, send_reply, wait_for_disconnect
from sparkllm.gateway.replies import ErrorReply

logger = logging.getLogger(__name__)

# Not forwarded from the upstream's response: hop-by-hop headers, framing (we re-frame
# as chunked, so a truncated stream never contradicts a Content-Length) and the headers
# the ASGI server sets itself.
_DROPPED_RESPONSE_HEADERS = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
        b"date",
        b"server",
    }
)
_SSE_ERROR = (
    b'data: {"error": {"message": "The model server stream broke off.", '
    b'"type": "server_error", "param": null, "code": "upstream_failed"}}\n\n'
)
READY_PROBE_TIMEOUT_SECONDS = 2.0


def _cache_missing_sniffio() -> None:
    """Make httpcore's per-request ``import sniffio`` cheap when sniffio is not installed.

    httpcore 1.0 tries ``import sniffio`` twice per request; without the package every
    attempt searches sys.path (dozens of stat calls, ~50 us each time). A None entry in
    sys.modules makes the import fail at once, which httpcore already handles (asyncio).
    """
    if importlib.util.find_spec("sniffio") is None:
        sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]


_cache_missing_sniffio()


@dataclass(frozen=True, slots=True)
class RelayResult:
    """How a relayed exchange went: status sent, whether the client left, timing."""

    status: int
    upstream_answered: bool
    complete: bool
    client_closed: bool
    first_byte_at: float | None


class UpstreamClient:
    """The gateway's one connection pool to the router."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        connect_timeout: float,
        read_timeout: float,
        max_connections: int,
    ) -> None:
        self.base_url = base_url
        self._urls: dict[str, httpx.URL] = {}  # absolute URL per path: no merging per request
        self._auth = [(b"authorization", b"Bearer " + api_key.encode())] if api_key else []
        self._client = httpx.AsyncClient(
            base_url=base_url,
            timeout=httpx.Timeout(read_timeout, connect=connect_timeout, pool=read_timeout),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            trust_env=False,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    def _headers(self, extra: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        return [(b"accept-encoding", b"identity"), *self._auth, *extra]

    def _url(self, path: str) -> httpx.URL:
        url = self._urls.get(path)
        if url is None:  # a handful of fixed paths: the cache stays tiny
            url = self._urls[path] = httpx.URL(self.base_url + path)
        return url

    async def relay(
        self,
        *,
        method: str,
        path: str,
        body: bytes,
        headers: Iterable[tuple[bytes, bytes]],
        send: Send,
        receive: Receive,
    ) -> RelayResult:
        """Send the request upstream and stream the answer to ``send``.

        Runs until the answer is complete or the client disconnects, whichever is first.
        """
        request = self._client.build_request(
            method, self._url(path), content=body or None, headers=self._headers(headers)
        )
        exchange = asyncio.ensure_future(self._exchange(request, send))
        disconnect = asyncio.ensure_future(wait_for_disconnect(receive))
        try:
            await asyncio.wait((exchange, disconnect), return_when=asyncio.FIRST_COMPLETED)
        finally:
            disconnect.cancel()
            if not exchange.done():
                exchange.cancel()  # closes the upstream connection: the engine aborts
                with contextlib.suppress(asyncio.CancelledError):
                    await exchange
        if exchange.cancelled():
            return RelayResult(
                0, upstream_answered=False, complete=False, client_closed=True, first_byte_at=None
            )
        return exchange.result()

    async def _exchange(self, request: httpx.Request, send: Send) -> RelayResult:
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            reply = _reply_for(exc)
            logger.warning("upstream request failed status=%d error=%r", reply.status, exc)
            await send_reply(send, reply)
            return RelayResult(
                reply.status,
                upstream_answered=False,
                complete=False,
                client_closed=False,
                first_byte_at=None,
            )
        first_byte_at = time.perf_counter()
        try:
            complete = await self._stream(response, send)
        finally:
            await response.aclose()
        return RelayResult(
            response.status_code,
            upstream_answered=True,
            complete=complete,
            client_closed=False,
            first_byte_at=first_byte_at,
        )

    async def _stream(self, response: httpx.Response, send: Send) -> bool:
        """Forward status, headers and body chunks; False if the upstream broke off."""
        headers = [
            (name.lower(), value)
            for name, value in response.headers.raw
            if name.lower() not in _DROPPED_RESPONSE_HEADERS
        ]
        await send(
            {"type": "http.response.start", "status": response.status_code, "headers": headers}
        )
        complete = True
        try:
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.HTTPError as exc:
            logger.warning("upstream stream broke off error=%r", exc)
            complete = False
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                await send({"type": "http.response.body", "body": _SSE_ERROR, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return complete

    async def probe(self, path: str) -> str | None:
        """None when the upstream answers ``path`` with 2xx, else why it is not ready."""
        try:
            response = await self._client.get(
                self._url(path), headers=self._headers(()), timeout=READY_PROBE_TIMEOUT_SECONDS
            )
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        if response.is_success:
            return None
        return f"{path} answered {response.status_code}"


def _reply_for(exc: httpx.HTTPError) -> ErrorReply:
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return replies.upstream_unavailable(detail)
    if isinstance(exc, httpx.TimeoutException):
        return replies.upstream_timeout(detail)
    return replies.upstream_failed(detail)
