"""Connection limits: header size (431), header and body deadlines, keep-alive; the
cheap refusal of grossly oversized prompts by a proven lower bound on their tokens.

Issue 14: a 64 MB header on ``/health`` grew the gateway from 74 to 198 MB, clients
trickling a byte every few seconds kept connections open indefinitely, and refused 1 MiB
prompts cost ~0.4 s of tokenising each. The protocol (transport.py) is exercised over
real sockets against uvicorn; the memory check runs the server in a child process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkllm.gateway.admission import Admission, Route
from sparkllm.gateway.chat_template import ChatTemplate
from sparkllm.gateway.config import load_gateway_config
from sparkllm.gateway.deepseek_prompt import DeepSeekV4Prompt
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.server import uvicorn_config
from sparkllm.gateway.tokens import TokenCounter
from sparkllm.gateway.transport import GuardedHttpToolsProtocol
from sparkllm_dev.devcluster.toymodel import train_tokenizer as train_v4_tokenizer
from tests.unit.gateway_fixtures import (
    MODEL,
    ServerThread,
    clamp_policy,
    train_tokenizer,
    wait_until,
    write_model_dir,
)

PROTOCOL = GuardedHttpToolsProtocol.configured(
    max_header_bytes=8 * 1024, header_timeout=1.0, body_timeout=1.0
)


async def _app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread(_app, lifespan="off", http=PROTOCOL) as running:
        yield running


def _connect(server: ServerThread) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def _read_all(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_headers_over_the_cap_get_431_and_the_connection_closes(server: ServerThread) -> None:
    with _connect(server) as conn:
        conn.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 20_000)
        answer = _read_all(conn)
    assert answer.startswith(b"HTTP/1.1 431 ")


def _send_until_cut(conn: socket.socket, pieces: list[bytes]) -> bytes:
    """Send ``pieces`` one write each (the server may cut in between); its answer."""
    try:
        for piece in pieces:
            conn.sendall(piece)
    except OSError:
        pass  # refused and closed before the rest: what it said is still readable
    chunks = []
    try:
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:  # unread bytes made the close a reset, after the answer
        pass
    return b"".join(chunks)


PAD = 100_000  # issue 25: an X-Pad of 100,000 bytes in one write got 200 under 32 KiB


def _pieces(data: bytes, first: int, size: int) -> list[bytes]:
    """``data`` as a first write of ``first`` bytes, then writes of ``size`` bytes."""
    rest = data[first:]
    return [data[:first], *(rest[i : i + size] for i in range(0, len(rest), size))]


@pytest.mark.parametrize(
    ("first", "size"),
    [(PAD * 2, 0), (1000, PAD * 2), (1000, 1000), (50, 50)],
    ids=["one write", "ending in a second write", "1000-byte writes", "50-byte writes"],
)
def test_the_header_cap_holds_however_the_bytes_arrive(
    server: ServerThread, first: int, size: int
) -> None:
    request = b"GET /health HTTP/1.1\r\nhost: x\r\nx-pad: " + b"a" * PAD + b"\r\n\r\n"
    with _connect(server) as conn:
        answer = _send_until_cut(conn, _pieces(request, first, size or 1))
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]
    assert answer.count(b"HTTP/1.1 ") == 1  # the 431 alone: no 400 after it, no 200


def test_the_cap_counts_every_header_and_the_target_in_one_write(server: ServerThread) -> None:
    """Many small headers, and a long URL, each under the cap alone, over it together."""
    fields = b"".join(b"x-h%d: %s\r\n" % (i, b"v" * 90) for i in range(100))  # ~10 KB
    many = b"GET /health HTTP/1.1\r\nhost: x\r\n" + fields + b"\r\n"
    long_target = b"GET /health?q=" + b"q" * 9000 + b" HTTP/1.1\r\nhost: x\r\n\r\n"
    for request in (many, long_target):
        with _connect(server) as conn:
            answer = _send_until_cut(conn, [request])
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]


def test_headers_just_under_the_cap_in_one_write_are_served(server: ServerThread) -> None:
    limit = PROTOCOL.max_header_bytes
    request = b"GET /health HTTP/1.1\r\nhost: x\r\nx-pad: " + b"a" * (limit - 200) + b"\r\n\r\n"
    with _connect(server) as conn:
        conn.sendall(request)
        answer = conn.recv(4096)
    assert answer.startswith(b"HTTP/1.1 200 ")


def test_normal_requests_keep_their_connection(server: ServerThread) -> None:
    with _connect(server) as conn:
        for _ in range(2):
            conn.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            answer = b""
            while not answer.endswith(b"0\r\n\r\n"):  # the chunked body's end
                chunk = conn.recv(4096)
                assert chunk, f"closed after {answer!r}"
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 ")


def _trickle(conn: socket.socket, data: bytes, *, every: float) -> tuple[float, bytes]:
    """Send ``data`` a byte every ``every`` seconds until the server cuts the connection:
    (seconds it took, what the server said)."""
    started = time.monotonic()
    for byte in data:
        try:
            conn.sendall(bytes([byte]))
        except OSError:
            return time.monotonic() - started, b""
        time.sleep(every)
        conn.settimeout(0.01)
        try:
            answer = conn.recv(4096)  # an answer, or b"" for the close: cut either way
        except TimeoutError:
            continue
        return time.monotonic() - started, answer
    raise AssertionError("the server waited for every byte")


def test_a_client_trickling_headers_is_cut_with_408(server: ServerThread) -> None:
    with _connect(server) as conn:
        request = b"GET /health HTTP/1.1\r\nx-slow: " + b"a" * 100
        elapsed, answer = _trickle(conn, request, every=0.3)
    assert elapsed < 2.5
    assert answer.startswith(b"HTTP/1.1 408 ")


def test_a_client_trickling_its_body_is_cut(server: ServerThread) -> None:
    with _connect(server) as conn:
        conn.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n")
        elapsed, _ = _trickle(conn, b"b" * 100, every=0.3)
    assert elapsed < 2.5


def test_a_connection_that_sends_nothing_gets_408_at_the_header_deadline(
    server: ServerThread,
) -> None:
    with _connect(server) as conn:
        conn.settimeout(5)
        started = time.monotonic()
        assert _read_all(conn).startswith(b"HTTP/1.1 408 ")  # nothing sent: the deadline
    assert time.monotonic() - started < 2.5


def test_the_gateway_serves_with_these_limits_and_an_idle_keep_alive_timeout(
    tmp_path: Path,
) -> None:
    argv = ["--served-model-name", "m", "--api-keys-dir", str(tmp_path)]
    argv += ["--tokenizer-dir", str(tmp_path), "--keep-alive-timeout-seconds", "7"]
    argv += ["--max-header-bytes", "4096", "--header-timeout-seconds", "3"]
    config = load_gateway_config(argv, environ={})
    served = uvicorn_config(_app, config)  # type: ignore[arg-type]
    assert served.timeout_keep_alive == 7
    assert isinstance(served.http, type)
    assert issubclass(served.http, GuardedHttpToolsProtocol)
    assert (served.http.max_header_bytes, served.http.header_timeout) == (4096, 3.0)
    assert served.http.body_timeout == config.body_timeout_seconds == 60.0


# --- the memory of a server under a 64 MB header ------------------------------------------

_CHILD = textwrap.dedent(
    """
    import sys, uvicorn
    from sparkllm.gateway.transport import GuardedHttpToolsProtocol
    async def app(scope, receive, send):
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
    protocol = GuardedHttpToolsProtocol.configured(
        max_header_bytes=32 * 1024, header_timeout=10, body_timeout=10)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), http=protocol,
                lifespan="off", log_level="warning")
    """
)


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_64_mb_header_does_not_grow_the_server(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(port)], env=os.environ.copy())
    try:
        wait_until(lambda: _answers(port), what="the child server", timeout=20)
        before = _peak_rss_kib(child.pid)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(b"GET /health HTTP/1.1\r\nx-big: ")
            chunk = b"a" * (1024 * 1024)
            sent = 0
            try:
                while sent < 64:
                    conn.sendall(chunk)
                    sent += 1
            except OSError:
                pass  # the server answered 431 and closed: the rest is not read
        grown_mib = (_peak_rss_kib(child.pid) - before) / 1024
        print(f"\npeak RSS {before / 1024:.1f} MiB, grown {grown_mib:.1f} MiB, {sent} MiB sent")
        assert grown_mib < 8
    finally:
        child.terminate()
        child.wait(timeout=10)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            return conn.recv(100).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


# --- the lower bound: oversized prompts refused without tokenising -----------------------

TOKENIZER = train_tokenizer()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("model"), TOKENIZER)


@given(text=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=300))
def test_tokens_are_never_fewer_than_bytes_over_the_longest_token(
    model_dir: Path, text: str
) -> None:
    counter = TokenCounter.from_dir(model_dir)
    least = -(-len(text.encode()) // counter.longest_token_bytes)
    assert counter.count(text, add_special_tokens=False) >= least
    assert counter.count(text + " fox" * 50, add_special_tokens=False) >= -(
        -len((text + " fox" * 50).encode()) // counter.longest_token_bytes
    )


class _NoCounting(TokenCounter):
    def count(self, text: str, *, add_special_tokens: bool) -> int:
        raise AssertionError("a grossly oversized prompt was tokenised")


def test_a_mib_prompt_is_refused_without_tokenising(model_dir: Path) -> None:
    real = TokenCounter.from_dir(model_dir)
    counter = _NoCounting(real._tokenizer, byte_level=True)
    template = ChatTemplate.load(tokenizer_dir=model_dir)
    admission = Admission(policy=clamp_policy(), counter=counter, template=template)
    text = "the quick brown fox " * 52_000  # ~1 MiB
    chat = {"model": MODEL, "messages": [{"role": "user", "content": text}]}
    completion = {"model": MODEL, "prompt": text}
    for route, body in ((Route.CHAT, chat), (Route.COMPLETIONS, completion)):
        started = time.perf_counter()
        reply = admission.decide(route, json.dumps(body).encode())
        assert isinstance(reply, ErrorReply)
        assert reply.code == "context_length_exceeded"
        assert "input is at least" in reply.message
        assert time.perf_counter() - started < 0.2


class _RenderOnly:
    """DeepSeek's encoder that may render the prompt but never tokenise it."""

    def __init__(self, encoding: Any) -> None:
        self._encoding = encoding

    def render_conversation(self, conversation: Any) -> Any:
        return self._encoding.render_conversation(conversation)

    def encode(self, conversation: Any) -> Any:
        raise AssertionError("a grossly oversized V4 prompt was tokenised")


def test_a_mib_deepseek_v4_chat_is_refused_without_encoding(model_dir: Path) -> None:
    tokenizer = train_v4_tokenizer()
    prompt = DeepSeekV4Prompt(tokenizer.to_str())
    prompt._encoding = _RenderOnly(prompt._encoding)
    counter = TokenCounter.from_dir(model_dir)
    admission = Admission(policy=clamp_policy(), counter=counter, template=prompt)
    text = "the pipeline spark node " * 44_000  # ~1 MiB
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}]}
    reply = admission.decide(Route.CHAT, json.dumps(body).encode())
    assert isinstance(reply, ErrorReply)
    assert reply.code == "context_length_exceeded"
    assert "input is at least" in reply.message
    small = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    assert not isinstance(admission.decide(Route.CHAT, json.dumps(small).encode()), ErrorReply)
