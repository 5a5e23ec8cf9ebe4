"""The gateway's upstream pool against scripted raw-socket servers on loopback.

The relay's behaviour through a real gateway is covered in test_gateway_proxy.py; these
tests pin what only the pool decides: connection reuse, the one retry on a stale
keep-alive connection (and no retry otherwise), framing, parse errors, timeouts, the
connection limit and flow control.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest

from sparkllm.gateway.upstream import (
    Endpoint,
    UpstreamBrokenError,
    UpstreamPool,
    UpstreamTimeoutError,
    UpstreamUnavailableError,
)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]
OK_CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    b"6\r\ndata: \r\n3\r\nhi\n\r\n0\r\n\r\n"
)


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request (head + Content-Length body) as received, or b"" at EOF."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + (await reader.readexactly(length) if length else b"")


class ScriptedServer:
    """A TCP server on 127.0.0.1 running ``handler`` per connection; counts connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                await self.handler(reader, writer, self.connections)
        finally:
            writer.close()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ScriptedServer]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        async with server:
            yield self


@contextlib.contextmanager
def pool_for(
    server: ScriptedServer,
    *,
    read_timeout: float = 2.0,
    max_connections: int = 4,
    pool_timeout: float | None = None,
) -> Iterator[UpstreamPool]:
    pool = UpstreamPool(
        base_url=f"http://127.0.0.1:{server.port}",
        connect_timeout=2.0,
        read_timeout=read_timeout,
        max_connections=max_connections,
        pool_timeout=pool_timeout,
    )
    try:
        yield pool
    finally:
        pool.close()


async def fetch(pool: UpstreamPool, path: str = "/v1/x", body: bytes = b"{}") -> tuple[int, bytes]:
    request = pool.request_bytes(method="POST", path=path, headers=[], body=body)
    async with pool.exchange(request) as response:
        return response.status, b"".join([chunk async for chunk in response.chunks()])


def keep_alive(response: bytes, *, close_after: int | None = None) -> Handler:
    """Answer every request on the connection with ``response``; optionally hang up."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        served = 0
        while close_after is None or served < close_after:
            await read_request(reader)
            writer.write(response)
            await writer.drain()
            served += 1

    return handler


def test_sequential_requests_share_one_keep_alive_connection() -> None:
    async def scenario() -> tuple[list[tuple[int, bytes]], int]:
        async with ScriptedServer(keep_alive(OK_CHUNKED)).running() as server:
            with pool_for(server) as pool:
                results = [await fetch(pool) for _ in range(5)]
            return results, server.connections

    results, connections = asyncio.run(scenario())
    assert results == [(200, b"data: hi\n")] * 5  # de-chunked body, chunk by chunk joined
    assert connections == 1


def test_the_head_is_handed_over_before_any_body_arrives() -> None:
    # Like an engine that answers with its headers and then prefills: the server sends
    # the body only after the client has seen the head. If the head waited for the body
    # (or counted as no data), this would stall until the read timeout.
    head_seen = asyncio.Event()

    async def head_first(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int
    ) -> None:
        await read_request(reader)
        writer.write(OK_CHUNKED[: OK_CHUNKED.index(b"\r\n\r\n") + 4])
        await writer.drain()
        await head_seen.wait()
        writer.write(OK_CHUNKED[OK_CHUNKED.index(b"\r\n\r\n") + 4 :])
        await writer.drain()

    async def scenario() -> tuple[int, bytes]:
        async with ScriptedServer(head_first).running() as server:
            with pool_for(server, read_timeout=1.0) as pool:
                request = pool.request_bytes(method="POST", path="/v1/x", headers=[], body=b"{}")
                async with pool.exchange(request) as response:
                    head_seen.set()
                    body = b"".join([chunk async for chunk in response.chunks()])
                return response.status, body

    assert asyncio.run(scenario()) == (200, b"data: hi\n")


def test_content_length_bodies_and_connection_close_are_honoured() -> None:
    response = b"HTTP/1.1 404 Not Found\r\ncontent-length: 5\r\nconnection: close\r\n\r\nnope!"

    async def scenario() -> tuple[list[tuple[int, bytes]], int]:
        async with ScriptedServer(keep_alive(response, close_after=1)).running() as server:
            with pool_for(server) as pool:
                results = [await fetch(pool) for _ in range(3)]
            return results, server.connections

    results, connections = asyncio.run(scenario())
    assert results == [(404, b"nope!")] * 3
    assert connections == 3  # "connection: close" is never reused


def test_a_stale_keep_alive_connection_is_retried_once_on_a_fresh_one() -> None:
    # Each connection answers one request and hangs up on the next without answering:
    # to the client that is a pooled connection that died under it (the router closed it
    # as idle just as the request went out). Without the retry every second fetch fails.
    async def one_per_connection(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int
    ) -> None:
        await read_request(reader)
        writer.write(OK_CHUNKED)
        await writer.drain()
        await read_request(reader)  # the next one is read, then the connection dropped

    async def scenario() -> tuple[list[tuple[int, bytes]], int]:
        async with ScriptedServer(one_per_connection).running() as server:
            with pool_for(server) as pool:
                results = [await fetch(pool) for _ in range(3)]
            return results, server.connections

    results, connections = asyncio.run(scenario())
    assert results == [(200, b"data: hi\n")] * 3
    assert connections == 3


def test_a_fresh_connection_that_breaks_is_not_retried() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        await read_request(reader)

    async def scenario() -> int:
        async with ScriptedServer(hang_up).running() as server:
            with pool_for(server) as pool, pytest.raises(UpstreamBrokenError, match="closed by"):
                await fetch(pool)
            return server.connections

    assert asyncio.run(scenario()) == 1


def test_a_break_after_the_answer_began_is_not_retried_and_surfaces_in_the_body() -> None:
    partial = OK_CHUNKED[: OK_CHUNKED.index(b"3\r\n")]  # head and the first chunk only

    async def scenario() -> tuple[bytes, int]:
        async with ScriptedServer(keep_alive(partial, close_after=1)).running() as server:
            received: list[bytes] = []

            async def read_all(chunks: AsyncIterator[bytes]) -> None:
                async for chunk in chunks:
                    received.append(chunk)

            with pool_for(server) as pool:
                request = pool.request_bytes(method="POST", path="/v1/x", headers=[], body=b"{}")
                async with pool.exchange(request) as response:
                    assert response.status == 200
                    with pytest.raises(UpstreamBrokenError):
                        await read_all(response.chunks())
            return b"".join(received), server.connections

    assert asyncio.run(scenario()) == (b"data: ", 1)


def test_invalid_http_from_the_upstream_is_a_broken_exchange() -> None:
    async def scenario() -> None:
        async with ScriptedServer(keep_alive(b"SPDY/9 nonsense\r\n\r\n")).running() as server:
            with pool_for(server) as pool, pytest.raises(UpstreamBrokenError, match="invalid"):
                await fetch(pool)

    asyncio.run(scenario())


def test_what_arrived_together_is_handed_over_as_one_piece_and_nothing_is_dropped() -> None:
    # Three SSE events in one read reach the relay as one piece (one send downstream).
    # Then, while the reader holds that piece, the rest of the answer and its end arrive:
    # the reader still gets the rest before the body ends.
    head = OK_CHUNKED.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n"
    event = b"5\r\ndata\n\r\n"
    reader_has_first = asyncio.Event()

    async def bursty(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        await read_request(reader)
        writer.write(head + event * 3)
        await writer.drain()
        await reader_has_first.wait()
        writer.write(b"4\r\nlate\r\n0\r\n\r\n")
        await writer.drain()

    async def scenario() -> list[bytes]:
        async with ScriptedServer(bursty).running() as server:
            with pool_for(server) as pool:
                request = pool.request_bytes(method="GET", path="/x", headers=[], body=b"")
                pieces = []
                async with pool.exchange(request) as response:
                    async for piece in response.chunks():
                        pieces.append(piece)
                        if len(pieces) == 1:
                            reader_has_first.set()
                            await asyncio.sleep(0.2)  # the rest and the end arrive now
                return pieces

    assert asyncio.run(scenario()) == [b"data\n" * 3, b"late"]


def test_silence_past_the_read_timeout_is_a_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    async def scenario() -> None:
        async with ScriptedServer(silent).running() as server:
            with (
                pool_for(server, read_timeout=0.2) as pool,
                pytest.raises(UpstreamTimeoutError, match=r"0\.2 s"),
            ):
                await fetch(pool)

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("server_gap", "reader_gap"),
    [(0.15, 0.0), (0.0, 0.4)],
    ids=["upstream-trickles-within-the-timeout", "reader-slower-than-the-timeout"],
)
def test_the_read_timeout_counts_only_silence_while_waiting(
    server_gap: float, reader_gap: float
) -> None:
    # read_timeout 0.25 s, and the whole answer takes over 0.9 s: neither an upstream
    # sending a chunk every 0.15 s nor a reader that takes 0.4 s per chunk (the data
    # already buffered) is a timeout. Only silence while the reader waits is.
    head, chunks = OK_CHUNKED.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n", [b"3\r\nab\n\r\n"] * 6

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        await read_request(reader)
        for part in [head, *chunks, b"0\r\n\r\n"]:
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(server_gap)

    async def scenario() -> list[bytes]:
        async with ScriptedServer(trickle).running() as server:
            with pool_for(server, read_timeout=0.25) as pool:
                request = pool.request_bytes(method="POST", path="/v1/x", headers=[], body=b"{}")
                received = []
                async with pool.exchange(request) as response:
                    async for chunk in response.chunks():
                        received.append(chunk)
                        await asyncio.sleep(reader_gap)
                return received

    assert b"".join(asyncio.run(scenario())) == b"ab\n" * 6


def test_nothing_listening_is_unavailable() -> None:
    async def scenario() -> None:
        async with ScriptedServer(keep_alive(OK_CHUNKED)).running() as server:
            port = server.port
        pool = UpstreamPool(
            base_url=f"http://127.0.0.1:{port}",
            connect_timeout=1,
            read_timeout=1,
            max_connections=1,
        )
        with pytest.raises(UpstreamUnavailableError, match="cannot connect"):
            await fetch(pool)

    asyncio.run(scenario())


def test_the_connection_limit_makes_callers_wait_then_gives_up() -> None:
    release = asyncio.Event()

    async def held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        await read_request(reader)
        await release.wait()
        writer.write(OK_CHUNKED)
        await writer.drain()

    async def scenario() -> tuple[tuple[int, bytes], int]:
        async with ScriptedServer(held).running() as server:
            with pool_for(server, max_connections=1, pool_timeout=0.2) as pool:
                first = asyncio.ensure_future(fetch(pool))
                await asyncio.sleep(0.05)
                with pytest.raises(UpstreamUnavailableError, match="no free upstream connection"):
                    await fetch(pool)  # waits for the one slot, longer than the pool timeout
                release.set()
                return await first, server.connections

    assert asyncio.run(scenario()) == ((200, b"data: hi\n"), 1)


def test_a_slow_reader_pauses_the_upstream_instead_of_buffering_it_all() -> None:
    body = b"x" * (4 * 1024 * 1024)
    response = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body

    async def scenario() -> tuple[int, int]:
        async with ScriptedServer(keep_alive(response)).running() as server:
            with pool_for(server) as pool:
                request = pool.request_bytes(method="GET", path="/big", headers=[], body=b"")
                async with pool.exchange(request) as answer:
                    chunks = answer.chunks()
                    first = await anext(chunks)
                    await asyncio.sleep(0.3)  # a client that does not read for a while
                    buffered_while_idle = answer._connection._buffered
                    total = len(first) + sum([len(chunk) async for chunk in chunks])
            return buffered_while_idle, total

    buffered, total = asyncio.run(scenario())
    assert total == len(body)  # everything arrives once the reader reads again
    assert buffered < 1024 * 1024  # but the upstream was paused near the high-water mark


def test_a_cancelled_exchange_closes_its_connection() -> None:
    async def stream_forever(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int
    ) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        with contextlib.suppress(ConnectionError):
            while True:
                writer.write(b"2\r\nx\n\r\n")
                await writer.drain()
                await asyncio.sleep(0.01)

    async def scenario() -> int:
        async with ScriptedServer(stream_forever).running() as server:
            with pool_for(server) as pool:
                for _ in range(2):
                    task = asyncio.ensure_future(fetch(pool))
                    await asyncio.sleep(0.1)
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    assert not pool._idle  # not pooled: closed
                await asyncio.sleep(0.05)  # the server sees the hang-ups
            return server.connections

    assert asyncio.run(scenario()) == 2  # the second exchange needed a new connection


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:30080", Endpoint("127.0.0.1", 30080, False, b"127.0.0.1:30080", "")),
        ("http://router", Endpoint("router", 80, False, b"router", "")),
        ("https://r.example/api/", Endpoint("r.example", 443, True, b"r.example", "/api")),
    ],
)
def test_endpoints_from_base_urls(url: str, expected: Endpoint) -> None:
    assert Endpoint.from_url(url) == expected


def test_requests_are_framed_and_header_injection_is_dropped() -> None:
    pool = UpstreamPool(
        base_url="http://127.0.0.1:9/prefix", connect_timeout=1, read_timeout=1, max_connections=1
    )
    request = pool.request_bytes(
        method="POST",
        path="/v1/chat/completions",
        headers=[(b"x-request-id", b"abc"), (b"x-evil", b"a\r\nx-injected: 1")],
        body=b'{"a":1}',
    )
    assert request == (
        b"POST /prefix/v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:9\r\n"
        b'content-length: 7\r\nx-request-id: abc\r\n\r\n{"a":1}'
    )
    get = pool.request_bytes(method="GET", path="/readiness", headers=[], body=b"")
    assert get == b"GET /prefix/readiness HTTP/1.1\r\nhost: 127.0.0.1:9\r\n\r\n"


def test_the_pools_own_headers_follow_host_in_every_request_and_cannot_split_it() -> None:
    pool = UpstreamPool(
        base_url="http://router:8080",
        connect_timeout=1,
        read_timeout=1,
        max_connections=1,
        default_headers=[(b"authorization", b"Bearer k"), (b"x-bad", b"1\nx-injected: 1")],
    )
    for _ in range(2):  # the second request reuses the built prefix: the same bytes
        request = pool.request_bytes(
            method="POST", path="/v1/completions", headers=[(b"accept", b"*/*")], body=b"{}"
        )
        assert request == (
            b"POST /v1/completions HTTP/1.1\r\nhost: router:8080\r\n"
            b"authorization: Bearer k\r\ncontent-length: 2\r\naccept: */*\r\n\r\n{}"
        )
    get = pool.request_bytes(method="GET", path="/v1/models", headers=[], body=b"")
    assert get == (
        b"GET /v1/models HTTP/1.1\r\nhost: router:8080\r\nauthorization: Bearer k\r\n\r\n"
    )


def test_on_wait_runs_once_the_request_is_written_or_before_waiting_for_a_connection() -> None:
    # The relay starts watching for a client disconnect in on_wait: it must run before
    # every wait of the exchange — for the answer (after the request reached the
    # upstream), for a new connection, and for a free slot.
    events: list[str] = []
    release, arrived = asyncio.Event(), asyncio.Event()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        while True:
            request = await read_request(reader)
            events.append("upstream got " + request.split(b" ")[1].decode())
            arrived.set()
            await release.wait()
            writer.write(OK_CHUNKED)
            await writer.drain()

    async def exchange(pool: UpstreamPool, path: str) -> None:
        request = pool.request_bytes(method="POST", path=path, headers=[], body=b"{}")
        async with pool.exchange(request, on_wait=lambda: events.append("wait " + path)) as r:
            events.append(f"{path} answered {r.status}")
            async for _chunk in r.chunks():
                pass

    async def scenario() -> None:
        async with ScriptedServer(slow).running() as server:
            with pool_for(server, max_connections=1) as pool:
                release.set()
                await exchange(pool, "/warm")  # leaves one idle keep-alive connection
                del events[:]
                release.clear()
                arrived.clear()
                first = asyncio.ensure_future(exchange(pool, "/a"))
                await asyncio.wait_for(arrived.wait(), 5)
                second = asyncio.ensure_future(exchange(pool, "/b"))
                await asyncio.sleep(0.05)  # /b now waits for the only slot
                assert events == ["wait /a", "upstream got /a", "wait /b"]
                release.set()
                await asyncio.gather(first, second)

    asyncio.run(scenario())
    # /a: on an idle connection, so on_wait ran once, after the write. /b: before the
    # slot wait, then again after its write (it is called before every wait).
    assert events == [
        "wait /a",
        "upstream got /a",
        "wait /b",
        "/a answered 200",
        "wait /b",
        "upstream got /b",
        "/b answered 200",
    ]
