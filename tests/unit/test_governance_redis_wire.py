"""The lean connection of the request path's scripts (redis_wire.py), on a real Redis.

Pinned: the RESP encoding and an incremental parse; concurrent calls pipelined on one
connection each get their own reply; a script Redis lost (SCRIPT FLUSH) is loaded again;
a connection killed under it is replaced by the next call; a wrong password and an
unreachable or silent server fail with redis-py's errors within their bounds, and the
connection after a timeout serves again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from sparkllm.gateway.governance.redis_wire import (
    IncompleteReplyError,
    Script,
    ScriptConnection,
    encode,
    parse,
)
from sparkllm_dev.devcluster.gateway_io import free_port
from sparkllm_dev.redis_fixture import RedisServer

ECHO = Script("return {tonumber(ARGV[1]), KEYS[1], {ARGV[2]}}")
NAME = "sparkllm-gateway-scripts"


def connection(server: RedisServer, *, password: str | None = None) -> ScriptConnection:
    return ScriptConnection(
        host=server.host,
        port=server.port,
        password=server.password if password is None else password,
        database=0,
        timeout=2.0,
        connect_timeout=2.0,
    )


def test_encode_and_an_incremental_parse() -> None:
    command = b"*4\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\nk\r\n"
    assert encode("EVALSHA", "ab", 1, b"k") == command
    reply = b"*3\r\n:7\r\n$2\r\nhi\r\n*2\r\n$-1\r\n+OK\r\n"
    assert parse(reply, 0) == ([7, b"hi", [None, "OK"]], len(reply))
    for cut in range(1, len(reply)):  # a reply cut anywhere waits for the rest
        with pytest.raises(IncompleteReplyError):
            parse(reply[:cut], 0)
    error, _ = parse(b"-NOSCRIPT No matching script\r\n", 0)
    assert isinstance(error, NoScriptError)


def _clients_named(server: RedisServer) -> int:
    with server.client() as client:
        return sum(1 for c in client.client_list() if c.get("name") == NAME)


def test_concurrent_calls_are_pipelined_on_one_connection(redis_server: RedisServer) -> None:
    async def scenario() -> list[object]:
        wire = connection(redis_server)
        try:
            calls = [wire.evalsha(ECHO, ["k"], [n, f"v{n}"]) for n in range(50)]
            replies = await asyncio.gather(*calls)
            assert _clients_named(redis_server) == 1
            return list(replies)
        finally:
            await wire.aclose()

    replies = asyncio.run(scenario())
    assert replies == [[n, b"k", [f"v{n}".encode()]] for n in range(50)]


def test_a_flushed_script_is_loaded_again(redis_server: RedisServer) -> None:
    async def scenario() -> object:
        wire = connection(redis_server)
        try:
            await wire.evalsha(ECHO, ["k"], [1, "a"])
            with redis_server.client() as client:
                client.script_flush()
            return await wire.evalsha(ECHO, ["k"], [2, "b"])
        finally:
            await wire.aclose()

    assert asyncio.run(scenario()) == [2, b"k", [b"b"]]


def test_a_killed_connection_is_replaced_by_the_next_call(redis_server: RedisServer) -> None:
    async def scenario() -> object:
        wire = connection(redis_server)
        try:
            await wire.evalsha(ECHO, ["k"], [1, "a"])
            with redis_server.client() as client:
                assert client.execute_command("CLIENT", "KILL", "USER", "default") >= 1
            with contextlib.suppress(RedisConnectionError):  # the kill may be seen first
                await wire.evalsha(ECHO, ["k"], [2, "b"])
            return await wire.evalsha(ECHO, ["k"], [3, "c"])
        finally:
            await wire.aclose()

    assert asyncio.run(scenario()) == [3, b"k", [b"c"]]


def test_a_wrong_password_and_an_unreachable_server_fail_clearly(
    redis_server: RedisServer,
) -> None:
    async def scenario() -> None:
        wrong = connection(redis_server, password="not-the-password")
        with pytest.raises(ResponseError, match=r"WRONGPASS|invalid"):
            await wrong.evalsha(ECHO, ["k"], [1, "a"])
        await wrong.aclose()
        nowhere = ScriptConnection(
            host="127.0.0.1",
            port=free_port("127.0.0.1"),
            password=None,
            database=0,
            timeout=1.0,
            connect_timeout=1.0,
        )
        with pytest.raises(RedisConnectionError, match="cannot connect"):
            await nowhere.evalsha(ECHO, ["k"], [1, "a"])

    asyncio.run(scenario())


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[int]:
    """A server that accepts and reads but never answers: its port."""

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(4096):
            pass
        writer.close()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


def test_no_answer_in_time_fails_every_waiting_call() -> None:
    async def scenario() -> list[BaseException | object]:
        async with silent_server() as port:
            wire = ScriptConnection(
                host="127.0.0.1",
                port=port,
                password=None,
                database=0,
                timeout=0.2,
                connect_timeout=0.2,
            )
            try:
                calls = [wire.evalsha(ECHO, ["k"], [n, "x"]) for n in range(3)]
                return list(await asyncio.gather(*calls, return_exceptions=True))
            finally:
                await wire.aclose()

    failures = asyncio.run(scenario())
    # The handshake got no answer: every call fails with a connection error, in bounds.
    assert all(isinstance(f, RedisConnectionError | RedisTimeoutError) for f in failures)
