"""Relaying admitted requests to the router (smg) and its answers back, byte for byte.

Why this way:
* one connection pool to the router for the gateway's life (``upstream.py``): keep-alive
  connections, no TCP setup per request, and a lean client because the admission
  layer's whole latency budget is about a millisecond;
* the user's key never travels on: upstream requests are built from scratch with only
  the headers the engine needs, plus the upstream key when configured;
* the answer is streamed: the upstream's body chunks are sent on as they arrive
  (``more_body``), so SSE tokens reach the user without buffering;
* a client that disconnects cancels the upstream exchange, which closes the upstream
  connection and makes the engine abort the generation instead of finishing it for no one
  — except once a stream's final event (``data: [DONE]``, Messages' ``message_stop``,
  Responses' ``response.completed``/``incomplete``/``failed``) has passed: the client has
  the whole answer and may hang up at once (SDKs and the bench do), while the gateway
  still reads the upstream's end of body; that exchange is complete and ``ok``, charged
  the usage the engine reported, not ``client_closed`` (``StreamEnd``); and except a
  non-streamed generation already at the upstream (``drain``): the engine makes
  its whole answer before the first byte, so what it made is known only from the answer's
  ``usage``. The gateway keeps reading that answer (sending nothing: the client is gone),
  within the same bounds as any answer (the read timeout; the meter keeps at most
  ``MAX_METERED_BYTES``), so the user is charged what the engine produced (issue 25:
  six such requests were charged 342 prompt tokens while the engine made ~13,900);
* failures are told apart: when the router answered, its status and body pass through
  unchanged; when it could not be reached, the client gets 503; a broken exchange gets
  502, no response in time 504 — in OpenAI's error format (replies.py);
* the router's answers that it has no replica to take a generation (404
  ``model_not_found``, 503 ``no_available_workers``) never pass: while a replica is
  expected the request is held and sent again once the router has one (``hold``), else
  they become the 503 that says why (serving.py);
* the router's own 400s (its type checks, before any engine sees the request) pass with
  their status, ``param`` and ``code`` but a readable message instead of Rust's debug
  text (router_errors.py).

The upstream module's errors are translated here and do not leave this module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Final

from sparkllm.gateway import replies, router_errors
from sparkllm.gateway.asgi import Receive, Send, send_reply, wait_for_disconnect
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.serving import ROUTER_NO_WORKER_STATUSES, Hold, HoldEnd, is_no_worker
from sparkllm.gateway.upstream import (
    Response,
    UpstreamBrokenError,
    UpstreamError,
    UpstreamPool,
    UpstreamTimeoutError,
    UpstreamUnavailableError,
)

logger = logging.getLogger(__name__)

# The router's note of the worker it chose: an engine pod's address. Internal topology
# is not for API clients (only the gateway's Service is exposed); the gateway logs it.
WORKER_HEADER = b"x-smg-routed-worker-id"
# Not forwarded from the upstream's response: hop-by-hop headers, framing (we re-frame
# as chunked, so a truncated stream never contradicts a Content-Length), the headers
# the ASGI server sets itself, and the router's worker note.
_DROPPED_RESPONSE_HEADERS = frozenset(
    {
        WORKER_HEADER,
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


@dataclass(frozen=True, slots=True)
class RelayResult:
    """How a relayed exchange went: status sent, whether the client left, timing."""

    status: int
    upstream_answered: bool
    complete: bool
    client_closed: bool
    first_byte_at: float | None
    worker: str | None = None  # the engine the router chose (its WORKER_HEADER), if said
    no_replica: bool = False  # the router had no replica: the 503 that says why was sent
    held_seconds: float = 0.0  # held while no replica served (serving.py), in all
    engine_saw: bool = True  # False: no engine had the request (held, then the client left)


@dataclass(slots=True)
class _Head:
    """The router's answer head, once it came (status 0 until then): what a relay cut
    by the client's hang-up still reports."""

    status: int = 0
    first_byte_at: float | None = None
    worker: str | None = None


class UpstreamClient:
    """The gateway's one connection pool to the router, and the relay on top of it."""

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
        auth = [(b"authorization", b"Bearer " + api_key.encode())] if api_key else []
        self._pool = UpstreamPool(
            base_url=base_url,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_connections=max_connections,
            default_headers=[(b"accept-encoding", b"identity"), *auth],
        )

    async def aclose(self) -> None:
        self._pool.close()

    async def relay(
        self,
        *,
        method: str,
        path: str,
        body: bytes,
        headers: Iterable[tuple[bytes, bytes]],
        send: Send,
        receive: Receive,
        no_worker: Callable[[], Awaitable[ErrorReply]] | None = None,
        hold: Hold | None = None,
        drain: bool = False,
    ) -> RelayResult:
        """Send the request upstream and stream the answer to ``send``.

        Runs until the answer is complete or the client disconnects, whichever is first;
        with ``drain``, a client that disconnects once the request is written upstream
        does not end the exchange: the answer is still read to its end (and passed to
        ``send``, which drops it for a gone client), and the result says
        ``client_closed``. When the router answers that it has no replica for the model
        and ``no_worker`` is given, the request is held while ``hold`` says to retry
        (sent again each time), and the client then gets ``await no_worker()``
        (serving.py).
        """
        request = self._pool.request_bytes(method=method, path=path, headers=headers, body=body)
        held = 0.0
        while True:
            result = await self._attempt(
                request, send, receive, detect_no_worker=no_worker is not None, drain=drain
            )
            if not result.no_replica:  # answered (or not) by a replica, as ever
                return dataclasses.replace(result, held_seconds=held) if held else result
            if result.client_closed:  # left during the exchange the router refused
                return dataclasses.replace(result, held_seconds=held, engine_saw=False)
            assert no_worker is not None  # only then is no_replica detected
            started = time.perf_counter()
            end = HoldEnd.ANSWER if hold is None else await hold(receive)
            if end is not HoldEnd.ANSWER or held:  # ANSWER at once: never held
                held += time.perf_counter() - started
            if end is HoldEnd.RETRY:
                continue
            if end is HoldEnd.CLIENT_LEFT:
                return RelayResult(
                    0,
                    upstream_answered=False,
                    complete=False,
                    client_closed=True,
                    first_byte_at=None,
                    no_replica=True,
                    held_seconds=held,
                    engine_saw=False,
                )
            reply = await no_worker()
            await send_reply(send, reply)
            return RelayResult(
                reply.status,
                upstream_answered=True,
                complete=True,
                client_closed=False,
                first_byte_at=time.perf_counter(),
                worker=result.worker,
                no_replica=True,
                held_seconds=held,
            )

    async def _attempt(
        self, request: bytes, send: Send, receive: Receive, *, detect_no_worker: bool, drain: bool
    ) -> RelayResult:
        """One exchange of ``request``; a router's "no replica" answer is not sent on
        (``no_replica`` with status 0: the caller decides)."""
        # The exchange runs in this task; one watcher task cancels it if the client goes.
        # The watcher starts when the exchange first waits — usually once the request is
        # written, so creating it is off the path to the first token; a client gone
        # before then is seen at once. (Not two tasks and asyncio.wait: this is on every
        # request's path.)
        exchanging = asyncio.current_task()
        assert exchanging is not None
        watch = _DisconnectWatch(exchanging, receive, drain=drain)
        head = _Head()
        try:
            result = await self._exchange(
                request,
                send,
                head,
                on_wait=watch.start,
                on_sent=watch.sent,
                on_final=watch.stop,  # the client has it all: its hang-up is no abort
                detect_no_worker=detect_no_worker,
            )
        except asyncio.CancelledError:
            if not watch.fired or exchanging.uncancel() > 0:
                raise  # not ours: the server is shutting down, or someone else cancelled
            # A stream cut after its head: the router answered, and what it streamed is
            # what the engine made (the meter counts it); before it, nothing was answered.
            return RelayResult(
                head.status,
                upstream_answered=head.status != 0,
                complete=False,
                client_closed=True,
                first_byte_at=head.first_byte_at,
                worker=head.worker,
            )
        finally:
            watch.stop()
        if watch.gone:  # drained: read to the end for a client that had left
            return dataclasses.replace(result, client_closed=True)
        return result

    async def _exchange(
        self,
        request: bytes,
        send: Send,
        head: _Head,
        *,
        on_wait: Callable[[], object],
        on_sent: Callable[[], object],
        on_final: Callable[[], object],
        detect_no_worker: bool,
    ) -> RelayResult:
        try:
            async with self._pool.exchange(request, on_wait=on_wait, on_sent=on_sent) as response:
                first_byte_at = time.perf_counter()
                status, body, no_replica = response.status, None, False
                worker = next((v for n, v in response.headers if n == WORKER_HEADER), None)
                head.status, head.first_byte_at = status, first_byte_at
                head.worker = None if worker is None else worker.decode("latin-1")
                own = worker is None and status == 400  # the router's refusal, not the engine's
                if own or (detect_no_worker and status in ROUTER_NO_WORKER_STATUSES):
                    body = b"".join([chunk async for chunk in response.chunks()])  # small
                readable = router_errors.readable(status, body) if own and body else None
                no_worker = detect_no_worker and body is not None
                if no_worker and is_no_worker(status, response.headers, body or b""):
                    status, complete, no_replica = 0, False, True  # relay() decides
                elif readable is not None:
                    await send_reply(send, readable)
                    complete = True
                else:
                    complete = await self._stream(  # reports breaks
                        response, send, body=body, on_final=on_final
                    )
                return RelayResult(
                    status,
                    upstream_answered=True,
                    complete=complete,
                    client_closed=False,
                    first_byte_at=first_byte_at,
                    worker=head.worker,
                    no_replica=no_replica,
                )
        except UpstreamError as exc:  # no answer: could not connect, no head in time, broken
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

    async def _stream(
        self,
        response: Response,
        send: Send,
        *,
        body: bytes | None,
        on_final: Callable[[], object],
    ) -> bool:
        """Forward status, headers and body chunks (``body``: already read whole); False
        if the upstream broke off. ``on_final`` is called once a stream's final event has
        been passed on."""
        headers = [
            (name, value)
            for name, value in response.headers
            if name not in _DROPPED_RESPONSE_HEADERS
        ]
        sse = dict(response.headers).get(b"content-type", b"").startswith(b"text/event-stream")
        end = StreamEnd() if sse else None
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        complete = True
        if body is not None:
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return complete
        try:
            async for chunk in response.chunks():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if end is not None and end.passed(chunk):
                    on_final()
        except UpstreamError as exc:
            logger.warning("upstream stream broke off error=%r", exc)
            complete = False
            if sse:
                await send({"type": "http.response.body", "body": _SSE_ERROR, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return complete

    async def probe(self, path: str) -> str | None:
        """None when the upstream answers ``path`` with 2xx, else why it is not ready."""
        request = self._pool.request_bytes(method="GET", path=path, headers=(), body=b"")
        try:
            async with asyncio.timeout(READY_PROBE_TIMEOUT_SECONDS):
                async with self._pool.exchange(request) as response:
                    async for _chunk in response.chunks():
                        pass
        except TimeoutError:
            return f"UpstreamTimeoutError: no answer within {READY_PROBE_TIMEOUT_SECONDS:g} s"
        except UpstreamError as exc:
            return f"{type(exc).__name__}: {exc}"
        if 200 <= response.status < 300:
            return None
        return f"{path} answered {response.status}"


# The events that end a stream, as an event's first line: chat and completions' [DONE],
# Anthropic Messages' message_stop, the Responses API's terminal events (SGLang 0.5.23
# ends a Responses stream with one of them and sends no [DONE]).
_FINAL_EVENTS: Final = (
    b"data: [DONE]",
    b"event: message_stop",
    b"event: response.completed",
    b"event: response.incomplete",
    b"event: response.failed",
)
_EVENT_HEAD_BYTES: Final = 64  # of an event not yet complete: enough to name it


class StreamEnd:
    """Tells when an SSE stream's final event has passed whole, chunk by chunk.

    Why whole events at their start: a model may write "[DONE]" or "message_stop" in its
    text, but inside a JSON string, never at the start of an event (SSE lines carry no
    raw newline of the text). Only the head of an unfinished event is kept (plus its last
    byte, for a boundary split across chunks), so the cost is one split per chunk.
    """

    __slots__ = ("_pending", "seen")

    def __init__(self) -> None:
        self._pending = b""
        self.seen = False

    def passed(self, chunk: bytes) -> bool:
        """True when ``chunk`` completes the stream's final event (once)."""
        if self.seen:
            return False
        *events, pending = (self._pending + chunk).split(b"\n\n")
        if len(pending) > _EVENT_HEAD_BYTES + 1:  # \0: no boundary made by the cut
            pending = pending[:_EVENT_HEAD_BYTES] + b"\0" + pending[-1:]
        self._pending = pending
        for event in events:
            line = event.lstrip(b"\r\n").split(b"\n", 1)[0]  # the event's first line, whole
            self.seen = self.seen or line in _FINAL_EVENTS
        return self.seen


class _DisconnectWatch:
    """Cancels the relaying task when the client disconnects, between start and stop;
    with ``drain``, only until the request is written upstream (then it notes ``gone``)."""

    def __init__(self, task: asyncio.Task[object], receive: Receive, *, drain: bool) -> None:
        self._task = task
        self._receive = receive
        self._watcher: asyncio.Future[None] | None = None
        self._armed = True
        self._drain = drain
        self._sent = False
        self.fired = False  # the exchange was cancelled for the client
        self.gone = False  # the client left while the exchange went on (drain)

    def sent(self) -> None:
        self._sent = True

    def start(self) -> None:
        if self._watcher is None and self._armed:
            self._watcher = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        self._armed = False
        if self._watcher is not None:
            self._watcher.cancel()

    async def _run(self) -> None:
        await wait_for_disconnect(self._receive)
        if not self._armed:
            return
        if self._drain and self._sent:
            self.gone = True  # the engine has it: read its answer, to learn what it made
            return
        self.fired = True
        self._task.cancel()  # closes the upstream connection: the engine aborts


def _reply_for(exc: UpstreamError) -> ErrorReply:
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, UpstreamUnavailableError):
        return replies.upstream_unavailable(detail)
    if isinstance(exc, UpstreamTimeoutError):
        return replies.upstream_timeout(detail)
    assert isinstance(exc, UpstreamBrokenError)
    return replies.upstream_failed(detail)
