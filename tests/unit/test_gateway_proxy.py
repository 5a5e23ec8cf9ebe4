"""The gateway over real sockets: a real uvicorn gateway in front of a real recording upstream.

Each test talks HTTP to the gateway and inspects what the upstream received, so the
assertions cover the whole path: auth, admission, limits, relay, streaming, errors.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tokenizers import Tokenizer

from sparkllm.gateway.app import GatewayApp, build_gateway_app
from tests.unit.gateway_fixtures import (
    BOS,
    BREAK_MARKER,
    HOLD_MARKER,
    MODEL,
    PAUSE_MARKER,
    ROUTED_WORKER,
    UPSTREAM_KEY,
    ServerThread,
    UpstreamRecorder,
    free_port,
    gateway_config,
    running,
    train_tokenizer,
    wait_until,
    write_keys,
    write_model_dir,
)

ALICE = {"authorization": "Bearer key-alice"}
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("model"), train_tokenizer())


@pytest.fixture
def keys_dir(tmp_path: Path) -> Path:
    return write_keys(tmp_path / "keys", {"alice": "key-alice"})


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[UpstreamRecorder, ServerThread]]:
    recorder = UpstreamRecorder()
    with running(recorder, lifespan="off") as server:
        yield recorder, server


@pytest.fixture
def recorder(upstream: tuple[UpstreamRecorder, ServerThread]) -> Iterator[UpstreamRecorder]:
    recorder, _server = upstream
    recorder.reset()
    yield recorder
    recorder.release.set()  # never leave a held request behind


def _app(model_dir: Path, keys_dir: Path, upstream_url: str, **overrides: Any) -> GatewayApp:
    config = gateway_config(
        model_dir=model_dir, keys_dir=keys_dir, upstream_url=upstream_url, **overrides
    )
    return build_gateway_app(config)


@pytest.fixture
def served(
    model_dir: Path, keys_dir: Path, upstream: tuple[UpstreamRecorder, ServerThread]
) -> Iterator[tuple[GatewayApp, httpx.Client]]:
    app = _app(model_dir, keys_dir, upstream[1].url)
    with running(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        yield app, client


@pytest.fixture
def gateway(served: tuple[GatewayApp, httpx.Client]) -> httpx.Client:
    return served[1]


def _metrics(app: GatewayApp) -> str:
    """What the metrics port serves (server.py); the users' port has no /metrics."""
    return app.metrics.exposition()[0].decode()


def _chat(content: str = "hello", **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **fields}


def _generations(recorder: UpstreamRecorder) -> list[Any]:
    return [r for r in recorder.received if r.path.startswith("/v1/") and r.method == "POST"]


# --- auth ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "missing_api_key"),
        ({"authorization": "Bearer nope"}, "invalid_api_key"),
        ({"authorization": "key-alice"}, "missing_api_key"),
        ({"x-api-key": "nope"}, "invalid_api_key"),
        ({**ALICE, "x-api-key": "key-bob"}, "conflicting_api_keys"),
    ],
)
def test_requests_without_a_valid_key_get_401_and_never_reach_upstream(
    gateway: httpx.Client, recorder: UpstreamRecorder, headers: dict[str, str], code: str
) -> None:
    for method, path in (("POST", CHAT), ("POST", "/v1/completions"), ("GET", "/v1/models")):
        response = gateway.request(method, path, json=_chat(), headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == code
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert recorder.received == []


@pytest.mark.parametrize(
    "key_headers",
    [ALICE, {"x-api-key": "key-alice"}, {**ALICE, "x-api-key": "key-alice"}],
    ids=["bearer", "x-api-key", "both-same"],
)
def test_user_key_is_replaced_by_the_upstream_key(
    gateway: httpx.Client, recorder: UpstreamRecorder, key_headers: dict[str, str]
) -> None:
    """Anthropic's protocol sends the key as ``x-api-key``: accepted like a Bearer key,
    and neither header travels on."""
    response = gateway.post(
        CHAT, json=_chat(max_tokens=10), headers={**key_headers, "x-request-id": "r1"}
    )
    assert response.status_code == 200
    (received,) = _generations(recorder)
    assert received.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert received.headers["x-request-id"] == "r1"
    assert "key-alice" not in json.dumps(received.headers)
    assert "x-api-key" not in received.headers


@pytest.mark.parametrize("stream", [True, False])
def test_the_routers_worker_address_is_logged_not_passed_on(
    gateway: httpx.Client, caplog: pytest.LogCaptureFixture, stream: bool
) -> None:
    name, address = (part.decode() for part in ROUTED_WORKER)
    # The gateway logs after the relay, so perhaps after the client has the whole answer:
    # wait for the line inside the block that keeps INFO records.
    with caplog.at_level(logging.INFO, logger="sparkllm.gateway.app"):
        response = gateway.post(CHAT, json=_chat(stream=stream, max_tokens=10), headers=ALICE)
        wait_until(
            lambda: any(
                "request done" in r.message and f"worker={address}" in r.message
                for r in caplog.records
            ),
            what="the request-done log line naming the worker",
        )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(
        "text/event-stream" if stream else "application/json"
    )
    assert name not in response.headers
    assert address not in response.text


def test_a_new_key_file_works_without_restart(
    gateway: httpx.Client, recorder: UpstreamRecorder, keys_dir: Path
) -> None:
    bob = {"authorization": "Bearer key-bob"}
    assert gateway.post(CHAT, json=_chat(), headers=bob).status_code == 401
    write_keys(keys_dir, {"bob": "key-bob"})
    wait_until(
        lambda: gateway.post(CHAT, json=_chat(), headers=bob).status_code == 200,
        what="the new key to be accepted",
    )


# --- admission -------------------------------------------------------------------------


def test_over_the_cap_is_400_with_both_numbers_and_upstream_sees_nothing(
    model_dir: Path,
    keys_dir: Path,
    upstream: tuple[UpstreamRecorder, ServerThread],
    recorder: UpstreamRecorder,
) -> None:
    app = _app(model_dir, keys_dir, upstream[1].url, max_input_tokens=64, context_length=128)
    content = "fox " * 100
    with running(app) as server:
        response = httpx.post(server.url + CHAT, json=_chat(content), headers=ALICE)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"], error["type"]) == (
        "context_length_exceeded",
        "messages",
        "invalid_request_error",
    )
    rendered = f"{BOS}<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"
    tokens = len(Tokenizer.from_file(str(model_dir / "tokenizer.json")).encode(rendered).ids)
    assert tokens > 64
    assert f"input is {tokens} tokens" in error["message"]
    assert "limit of 64 tokens" in error["message"]
    assert recorder.received == []


def test_max_tokens_is_clamped_into_the_window_before_forwarding(
    gateway: httpx.Client, recorder: UpstreamRecorder
) -> None:
    assert gateway.post(CHAT, json=_chat(max_tokens=50_000), headers=ALICE).status_code == 200
    assert gateway.post(CHAT, json=_chat(), headers=ALICE).status_code == 200
    clamped, injected = (r.json()["max_tokens"] for r in _generations(recorder))
    assert clamped == injected  # both: the rest of the 12,288-token window
    assert 12_000 < clamped < 12_287


def test_reject_policy_refuses_instead_of_clamping(
    model_dir: Path,
    keys_dir: Path,
    upstream: tuple[UpstreamRecorder, ServerThread],
    recorder: UpstreamRecorder,
) -> None:
    app = _app(model_dir, keys_dir, upstream[1].url, max_tokens_policy="reject")
    with running(app) as server:
        response = httpx.post(server.url + CHAT, json=_chat(max_tokens=50_000), headers=ALICE)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "max_tokens"
    assert recorder.received == []


@pytest.mark.parametrize(
    ("content", "param"),
    [
        (b'{"model": "deepseek-v4-flash", "messages": [', None),
        (json.dumps({"model": MODEL, "messages": {"role": "user"}}).encode(), "messages"),
        (json.dumps(_chat(max_tokens="lots")).encode(), "max_tokens"),
    ],
)
def test_malformed_bodies_are_400_naming_the_field(
    gateway: httpx.Client, recorder: UpstreamRecorder, content: bytes, param: str | None
) -> None:
    response = gateway.post(CHAT, content=content, headers=ALICE)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
    assert recorder.received == []


def test_unknown_model_is_404(gateway: httpx.Client, recorder: UpstreamRecorder) -> None:
    response = gateway.post(CHAT, json={**_chat(), "model": "gpt-5"}, headers=ALICE)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    assert recorder.received == []


def test_body_over_the_limit_is_413(
    model_dir: Path,
    keys_dir: Path,
    upstream: tuple[UpstreamRecorder, ServerThread],
    recorder: UpstreamRecorder,
) -> None:
    app = _app(model_dir, keys_dir, upstream[1].url, max_body_bytes=2048)
    with running(app) as server, httpx.Client(base_url=server.url) as client:
        declared = client.post(CHAT, json=_chat("x" * 3000), headers=ALICE)

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted while reading
            yield json.dumps(_chat("x" * 3000)).encode()

        streamed = client.post(CHAT, content=chunks(), headers=ALICE)
    for response in (declared, streamed):
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "request_too_large"
    assert recorder.received == []


def test_unknown_path_and_wrong_method(gateway: httpx.Client) -> None:
    missing = gateway.get("/v2/whatever", headers=ALICE)
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "unknown_url")
    wrong = gateway.get(CHAT, headers=ALICE)
    assert (wrong.status_code, wrong.headers["allow"]) == (405, "POST")


# --- concurrency ------------------------------------------------------------------------


def test_full_queue_is_429_at_once_with_retry_after(
    model_dir: Path,
    keys_dir: Path,
    upstream: tuple[UpstreamRecorder, ServerThread],
    recorder: UpstreamRecorder,
) -> None:
    app = _app(
        model_dir,
        keys_dir,
        upstream[1].url,
        max_concurrent_requests=1,
        queue_size=1,
        queue_timeout_seconds=30,
    )
    held = _chat(HOLD_MARKER, max_tokens=5)
    with running(app) as server, concurrent.futures.ThreadPoolExecutor(2) as pool:
        url = server.url + CHAT
        first = pool.submit(httpx.post, url, json=held, headers=ALICE, timeout=30)
        wait_until(lambda: len(recorder.received) == 1, what="the first request upstream")
        second = pool.submit(httpx.post, url, json=held, headers=ALICE, timeout=30)
        wait_until(lambda: app.limiter.queued == 1, what="the second request to queue")
        third = httpx.post(url, json=held, headers=ALICE, timeout=30)
        assert third.status_code == 429
        # no slot given back yet: the cold guess, 2 x 20 s over 1 slot, capped at 10 s
        # (it was the 30 s queue timeout)
        assert third.headers["retry-after"] == "10"
        assert third.json()["error"]["code"] == "rate_limit_exceeded"
        assert "queue is full" in third.json()["error"]["message"]
        recorder.release.set()
        assert first.result().status_code == 200
        assert second.result().status_code == 200  # it got the freed slot
    assert len(recorder.received) == 2


def test_waiting_past_the_queue_timeout_is_429(
    model_dir: Path,
    keys_dir: Path,
    upstream: tuple[UpstreamRecorder, ServerThread],
    recorder: UpstreamRecorder,
) -> None:
    app = _app(
        model_dir,
        keys_dir,
        upstream[1].url,
        max_concurrent_requests=1,
        queue_size=4,
        queue_timeout_seconds=0.2,
    )
    with running(app) as server, concurrent.futures.ThreadPoolExecutor(1) as pool:
        url = server.url + CHAT
        first = pool.submit(httpx.post, url, json=_chat(HOLD_MARKER), headers=ALICE, timeout=30)
        wait_until(lambda: len(recorder.received) == 1, what="the first request upstream")
        late = httpx.post(url, json=_chat(), headers=ALICE, timeout=30)
        assert late.status_code == 429
        assert late.headers["retry-after"] == "1"
        assert "no slot freed up in time" in late.json()["error"]["message"]
        recorder.release.set()
        assert first.result().status_code == 200


# --- streaming and disconnects ----------------------------------------------------------


def test_sse_chunks_arrive_before_the_upstream_has_finished(
    gateway: httpx.Client, recorder: UpstreamRecorder
) -> None:
    body = _chat(PAUSE_MARKER, stream=True, max_tokens=5)
    with gateway.stream("POST", CHAT, json=body, headers=ALICE) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        first = next(line for line in lines if line)
        assert "tok0" in first
        assert not recorder.stream_finished.is_set()  # the upstream is still paused
        recorder.release.set()
        rest = [line for line in lines if line]
    assert [line for line in rest if "tok" in line][-1].count("tok2") == 1
    assert rest[-1] == "data: [DONE]"
    # the upstream flags its end after its last write, which the client may read first
    assert recorder.stream_finished.wait(timeout=5)


def test_client_disconnect_cancels_the_upstream_request(
    model_dir: Path,
    keys_dir: Path,
    upstream: tuple[UpstreamRecorder, ServerThread],
    recorder: UpstreamRecorder,
) -> None:
    app = _app(model_dir, keys_dir, upstream[1].url)
    body = _chat(PAUSE_MARKER, stream=True, max_tokens=5)
    with running(app) as server, httpx.Client(base_url=server.url) as client:
        with client.stream("POST", CHAT, json=body, headers=ALICE) as response:
            next(response.iter_raw())  # the first event arrived; now hang up
        wait_until(recorder.disconnected.is_set, what="the upstream to see the disconnect")
        wait_until(lambda: app.limiter.in_flight == 0, what="the slot to be released")
    assert not recorder.stream_finished.is_set()


def test_a_non_streamed_answer_is_read_to_its_end_for_a_client_that_left(
    model_dir: Path,
    keys_dir: Path,
    upstream: tuple[UpstreamRecorder, ServerThread],
    recorder: UpstreamRecorder,
) -> None:
    """Issue 25: the engine makes a non-streamed answer whole before its first byte, so
    when the client leaves, the gateway keeps the upstream exchange (to charge the
    answer's usage) instead of cancelling it as for a stream (above). The app is called
    directly so the disconnect arrives exactly once the request is upstream."""
    app = _app(model_dir, keys_dir, upstream[1].url)
    body = json.dumps(_chat(HOLD_MARKER, max_tokens=5)).encode()
    scope = {
        "type": "http", "method": "POST", "path": CHAT, "query_string": b"",
        "headers": [(b"authorization", b"Bearer key-alice"),
                    (b"content-length", str(len(body)).encode())],
    }  # fmt: skip
    told = asyncio.Event()
    bodies = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if bodies:
            return bodies.pop()
        await asyncio.to_thread(  # the upstream runs in its own thread
            wait_until, lambda: bool(_generations(recorder)), what="the request upstream"
        )
        told.set()  # from now on the client is gone, as uvicorn says it
        return {"type": "http.disconnect"}

    async def send(_message: dict[str, Any]) -> None:
        return None  # uvicorn drops what is sent to a gone client

    async def client_leaves_then_engine_answers() -> None:
        serving = asyncio.ensure_future(app(scope, receive, send))
        await told.wait()
        await asyncio.sleep(0)  # the relay's watcher has taken the disconnect
        assert not serving.done()
        recorder.release.set()  # the engine finishes its answer
        await asyncio.wait_for(serving, timeout=10)
        await app.upstream.aclose()

    asyncio.run(client_leaves_then_engine_answers())
    assert not recorder.disconnected.is_set()  # never cut: the upstream answered in full
    closed = 'sparkllm_gateway_requests_total{outcome="client_closed",route="/v1/chat/completions"}'
    assert f"{closed} 1.0" in _metrics(app)
    assert app.limiter.in_flight == 0


# --- upstream failures and pass-through ------------------------------------------------------


def test_upstream_down_is_503_and_not_ready(model_dir: Path, keys_dir: Path) -> None:
    app = _app(model_dir, keys_dir, f"http://127.0.0.1:{free_port()}")
    with running(app) as server, httpx.Client(base_url=server.url) as client:
        response = client.post(CHAT, json=_chat(), headers=ALICE)
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "upstream_unavailable"
        assert client.get("/ready").status_code == 503
        assert client.get("/health").status_code == 200
        assert client.get("/v1/models", headers=ALICE).status_code == 503
        wait_until(lambda: app.limiter.in_flight == 0, what="the slot to be released")


def test_upstream_errors_pass_through_unchanged(
    gateway: httpx.Client, recorder: UpstreamRecorder
) -> None:
    response = gateway.post(
        "/v1/completions", json={"model": MODEL, "prompt": "fail:418"}, headers=ALICE
    )
    assert response.status_code == 418
    assert response.json() == {"error": {"message": "teapot", "code": 418}}


def test_models_ready_and_metrics(
    served: tuple[GatewayApp, httpx.Client], recorder: UpstreamRecorder
) -> None:
    app, gateway = served
    models = gateway.get("/v1/models", headers=ALICE)
    assert models.json()["data"][0]["id"] == MODEL
    assert gateway.get("/ready").json() == {"status": "ready"}
    gateway.post(CHAT, json=_chat(max_tokens=5), headers=ALICE)
    gateway.post(CHAT, json=_chat(), headers={"authorization": "Bearer wrong"})
    # not on the users' port (issue 25: per-user series were public), key or none
    for headers in ({}, ALICE):
        hidden = gateway.get("/metrics", headers=headers)
        assert (hidden.status_code, hidden.json()["error"]["code"]) == (404, "unknown_url")
    metrics = _metrics(app)
    ok = 'sparkllm_gateway_requests_total{outcome="ok",route="/v1/chat/completions"} 1.0'
    unauthorized = (
        'sparkllm_gateway_requests_total{outcome="unauthorized",route="/v1/chat/completions"} 1.0'
    )
    assert ok in metrics
    assert unauthorized in metrics
    assert 'sparkllm_gateway_requests_total{outcome="ok",route="/v1/models"} 1.0' in metrics
    assert "sparkllm_gateway_admission_duration_seconds_count 1.0" in metrics
    assert (
        'sparkllm_gateway_time_to_first_byte_seconds_count{route="/v1/chat/completions"} 1.0'
        in metrics
    )
    assert "sparkllm_gateway_in_flight_requests 0.0" in metrics
    assert "sparkllm_gateway_queued_requests 0.0" in metrics


def test_a_client_leaving_the_queue_frees_its_place_and_never_reaches_upstream(
    model_dir: Path,
    keys_dir: Path,
    upstream: tuple[UpstreamRecorder, ServerThread],
    recorder: UpstreamRecorder,
) -> None:
    app = _app(
        model_dir,
        keys_dir,
        upstream[1].url,
        max_concurrent_requests=1,
        queue_size=1,
        queue_timeout_seconds=30,
    )
    with running(app) as server, concurrent.futures.ThreadPoolExecutor(1) as pool:
        url = server.url + CHAT
        first = pool.submit(httpx.post, url, json=_chat(HOLD_MARKER), headers=ALICE, timeout=30)
        wait_until(lambda: len(recorder.received) == 1, what="the first request upstream")
        body = json.dumps(_chat("queued")).encode()
        with socket.create_connection(("127.0.0.1", server.port)) as raw:
            raw.sendall(
                b"POST " + CHAT.encode() + b" HTTP/1.1\r\nhost: x\r\n"
                b"authorization: Bearer key-alice\r\ncontent-type: application/json\r\n"
                b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            wait_until(lambda: app.limiter.queued == 1, what="the raw request to queue")
        wait_until(lambda: app.limiter.queued == 0, what="the closed client to leave the queue")
        recorder.release.set()
        assert first.result().status_code == 200
        wait_until(lambda: app.limiter.in_flight == 0, what="the slot to be released")
    assert len(recorder.received) == 1
    assert 'outcome="client_closed"' in _metrics(app)


def test_large_prompts_are_counted_off_the_event_loop(
    gateway: httpx.Client, recorder: UpstreamRecorder, model_dir: Path
) -> None:
    content = "fox " * 6000  # > 16 KiB: admission runs on a worker thread
    response = gateway.post(CHAT, json=_chat(content), headers=ALICE)
    assert response.status_code == 200
    rendered = f"{BOS}<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"
    tokens = len(Tokenizer.from_file(str(model_dir / "tokenizer.json")).encode(rendered).ids)
    (received,) = _generations(recorder)
    assert received.json()["max_tokens"] == 12288 - tokens - 1


def test_a_stream_that_breaks_off_ends_with_an_error_event(
    served: tuple[GatewayApp, httpx.Client],
    recorder: UpstreamRecorder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, gateway = served
    body = _chat(BREAK_MARKER, stream=True, max_tokens=5)
    with caplog.at_level(logging.CRITICAL, logger="uvicorn.error"):  # the stand-in's crash
        response = gateway.post(CHAT, json=body, headers=ALICE)
    assert response.status_code == 200  # already sent when the stream broke
    events = [line for line in response.text.splitlines() if line]
    assert "tok0" in events[0]
    assert json.loads(events[-1].removeprefix("data: "))["error"]["code"] == "upstream_failed"
    # The outcome is counted once the handler returns, which may be just after the client
    # read the last event (the server runs in another thread): wait for it, to a deadline.
    counted = 'outcome="upstream_error",route="/v1/chat/completions"} 1.0'
    wait_until(lambda: counted in _metrics(app), timeout=10, what="the upstream_error count")


@contextlib.contextmanager
def _hanging_up_server() -> Iterator[str]:
    """A TCP server that accepts connections and closes them without answering."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _address = listener.accept()
            except TimeoutError:
                continue
            connection.recv(65536)
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def test_upstream_hanging_up_is_502(model_dir: Path, keys_dir: Path) -> None:
    with _hanging_up_server() as url:
        app = _app(model_dir, keys_dir, url)
        with running(app) as server:
            response = httpx.post(server.url + CHAT, json=_chat(), headers=ALICE)
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_failed"


def test_upstream_silent_past_the_read_timeout_is_504(
    model_dir: Path,
    keys_dir: Path,
    upstream: tuple[UpstreamRecorder, ServerThread],
    recorder: UpstreamRecorder,
) -> None:
    app = _app(model_dir, keys_dir, upstream[1].url, upstream_read_timeout_seconds=0.2)
    with running(app) as server:
        response = httpx.post(server.url + CHAT, json=_chat(HOLD_MARKER), headers=ALICE)
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "upstream_timeout"
    wait_until(recorder.disconnected.is_set, what="the upstream to see the gateway give up")
