"""Helpers for the gateway tests: a tokenizer trained on the spot, a recording upstream.

Not a test module. The tokenizer is a real byte-level BPE trained in milliseconds with
``tokenizers`` and saved with a ChatML-style template (system prompt, tools rendered
with ``tojson``, ``raise_exception`` for unknown roles, ``bos_token`` from the config),
so counting and rendering are exercised exactly as with a production model directory.
The upstream is a real HTTP server (uvicorn on a free loopback port, in a thread) that
records what it received and can stream SSE, hold a request until the test releases it,
and notice when the gateway drops the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import uvicorn
from prometheus_client.parser import text_string_to_metric_families
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from sparkllm.gateway.admission import AdmissionPolicy
from sparkllm.gateway.chat_template import ChatTemplate
from sparkllm.gateway.config import GatewayConfig, MaxTokensPolicy
from sparkllm.gateway.rules.allowlist import Allowlist
from sparkllm.gateway.rules.context import Draft, Route
from sparkllm.gateway.server import HTTP_PROTOCOL
from sparkllm.gateway.tokens import TokenCounter, is_byte_level_bpe

BOS = "<|endoftext|>"
SPECIAL_TOKENS = [BOS, "<|im_start|>", "<|im_end|>"]
MODEL = "deepseek-v4-flash"
HOLD_MARKER = "[hold]"
PAUSE_MARKER = "[pause]"
BREAK_MARKER = "[break]"
UPSTREAM_KEY = "upstream-secret-key"
# What smg adds to every answer it routed: the chosen worker's address.
ROUTED_WORKER = (b"x-smg-routed-worker-id", b"http://10.42.0.7:30000")
Lifespan = Literal["on", "off"]
TOKENIZER_CORPUS_WORD = " fox"  # one token in the trained vocabulary, also when repeated

CHAT_TEMPLATE = """{{- bos_token }}
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content }}
{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
{{- '\\n\\n# Tools\\n\\nYou may call functions. Signatures within <tools></tools>:\\n<tools>' }}
{%- for tool in tools %}
{{- '\\n' }}{{- tool | tojson }}
{%- endfor %}
{{- '\\n</tools><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role in ['user', 'system']
      or (message.role == 'assistant' and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\\n' + message.content }}
{%- for call in message.tool_calls %}
{{- '\\n<tool_call>\\n{"name": "' + call.function.name + '", "arguments": '
    + call.function.arguments | tojson + '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>user\\n<tool_response>\\n' + message.content
    + '\\n</tool_response><|im_end|>\\n' }}
{%- else %}
{{- raise_exception('Unsupported role: ' + message.role) }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

_WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "the",
    "gateway",
    "counts",
    "tokens",
    "admission",
    "cap",
    "window",
    "cluster",
    "spark",
    "pipeline",
    "engine",
    "router",
    "stream",
    "answer",
    "system",
    "user",
    "assistant",
    "tool",
    "function",
    "arguments",
    "weather",
    "city",
    "name",
    "你好",
    "世界",
    "模型",
    "Привет",
    "мир",
    "naïve",
    "café",
    "🙂",
    "12345",
    "67890",
    '{"json":',
    "[1,",
    "2.5,",
    "true,",
    "null]}",
]


def training_corpus(*, lines: int = 400, seed: int = 7) -> list[str]:
    """Deterministic text in several scripts, so merges cover multi-byte characters."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(40)) for _ in range(lines)]


def train_tokenizer(*, vocab_size: int = 800, corpus: list[str] | None = None) -> Tokenizer:
    """A byte-level BPE like the production models' (GPT-2 style pre-tokeniser)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus or training_corpus(), trainer=trainer)
    return tokenizer


def write_model_dir(
    directory: Path, tokenizer: Tokenizer, *, template: str = CHAT_TEMPLATE
) -> Path:
    """tokenizer.json + tokenizer_config.json (bos as an AddedToken dict, as HF saves it)."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {
        "bos_token": {"__type": "AddedToken", "content": BOS, "special": True},
        "eos_token": "<|im_end|>",
        "chat_template": template,
        "model_max_length": 12288,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


def write_keys(directory: Path, keys: Mapping[str, str]) -> Path:
    """One file per user, as a mounted Secret."""
    directory.mkdir(parents=True, exist_ok=True)
    for user, key in keys.items():
        (directory / user).write_text(key + "\n", encoding="utf-8")
    return directory


def gateway_config(
    *, model_dir: Path, keys_dir: Path, upstream_url: str, **overrides: Any
) -> GatewayConfig:
    """A config for tests; anything else through ``overrides``."""
    values: dict[str, Any] = {
        "upstream_url": upstream_url,
        "listen_host": "127.0.0.1",
        "served_model_name": MODEL,
        "model_aliases": ("gpt-4o",),
        "api_keys_dir": keys_dir,
        "tokenizer_dir": model_dir,
        "upstream_api_key": UPSTREAM_KEY,
        "queue_timeout_seconds": 30,
        "upstream_ready_path": "/readiness",
    }
    values.update(overrides)
    return GatewayConfig.model_validate(values)


def wait_until(condition: Callable[[], bool], *, timeout: float = 10.0, what: str) -> None:
    """Poll ``condition`` until true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def free_port() -> int:
    """A loopback port nothing listens on (for the upstream-down tests)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ServerThread:
    """A real uvicorn server for ``app`` on a free 127.0.0.1 port, in a daemon thread.

    The gateway's own protocol implementation (``HTTP_PROTOCOL``), for the stand-ins too.
    """

    def __init__(self, app: Any, *, lifespan: Lifespan = "on", http: Any = HTTP_PROTOCOL) -> None:
        # proto=IPPROTO_TCP, or asyncio skips TCP_NODELAY on accepted connections and
        # Nagle + delayed ACKs add 40 ms to every response.
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.bind(("127.0.0.1", 0))
        self.port = int(self._socket.getsockname()[1])
        config = uvicorn.Config(
            app, lifespan=lifespan, http=http, loop="asyncio", log_level="warning"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self._thread.start()
        wait_until(lambda: self._server.started, what="uvicorn to start")
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Stop the server if it was started; close its socket either way (a test may
        hold the port bound without ever serving on it)."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._socket.close()


class UpstreamCrashError(Exception):
    """Raised by the stand-in upstream to break a stream off midway."""


@dataclass(frozen=True)
class Received:
    """One request as the upstream saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class UpstreamRecorder:
    """A stand-in for the router: records requests, answers like SGLang's OpenAI API.

    A request whose body contains HOLD_MARKER waits for ``release`` before answering at
    all; a streamed answer to one containing PAUSE_MARKER waits for ``release`` after its
    first SSE chunk, and one containing BREAK_MARKER breaks off after it. ``disconnected``
    is set when the gateway drops a held connection.
    """

    def __init__(self, *, honour_markers: bool = True) -> None:
        self.honour_markers = honour_markers
        self.received: list[Received] = []
        self.release = threading.Event()
        self.stream_finished = threading.Event()
        self.disconnected = threading.Event()

    def reset(self) -> None:
        self.received.clear()
        for event in (self.release, self.stream_finished, self.disconnected):
            event.clear()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_request_body(receive)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.received.append(Received(scope["method"], scope["path"], headers, body))
        if scope["path"] in ("/readiness", "/health"):
            await _send_json(send, 200, {"status": "ok"})
        elif scope["path"] == "/v1/models":
            await _send_json(send, 200, {"object": "list", "data": [{"id": MODEL}]})
        else:
            await self._generate(json.loads(body or b"{}"), receive, send)

    async def _wait_for_release(self, receive: Any) -> bool:
        """True once released; False if the gateway disconnected first."""
        watcher = asyncio.ensure_future(receive())
        try:
            while not self.release.is_set():
                if watcher.done() and watcher.result()["type"] == "http.disconnect":
                    self.disconnected.set()
                    return False
                await asyncio.sleep(0.005)
            return True
        finally:
            watcher.cancel()

    async def _generate(self, payload: dict[str, Any], receive: Any, send: Any) -> None:
        text = json.dumps(payload) if self.honour_markers else ""
        if HOLD_MARKER in text and not await self._wait_for_release(receive):
            return
        prompt = payload.get("prompt")
        if self.honour_markers and isinstance(prompt, str) and prompt.startswith("fail:"):
            status = int(prompt.removeprefix("fail:"))
            await _send_json(send, status, {"error": {"message": "teapot", "code": status}})
            return
        if payload.get("stream") is not True:
            answer = {"object": "chat.completion", "model": MODEL, "choices": [{"index": 0}]}
            await _send_json(send, 200, answer)
            return
        headers = [(b"content-type", b"text/event-stream"), ROUTED_WORKER]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for index in range(3):
            chunk = json.dumps({"choices": [{"index": 0, "delta": {"content": f"tok{index}"}}]})
            event = f"data: {chunk}\n\n".encode()
            await send({"type": "http.response.body", "body": event, "more_body": True})
            paused = index == 0 and PAUSE_MARKER in text
            if paused and not await self._wait_for_release(receive):
                return
            if BREAK_MARKER in text:  # uvicorn drops the connection mid-stream
                raise UpstreamCrashError
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
        self.stream_finished.set()


async def read_request_body(receive: Any) -> bytes:
    """The whole request body an ASGI stand-in receives."""
    body = b""
    while True:
        message = await receive()
        body += bytes(message.get("body", b""))
        if not message.get("more_body"):
            return body


async def _send_json(send: Any, status: int, payload: Any) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), ROUTED_WORKER]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


@contextlib.contextmanager
def running(app: Any, *, lifespan: Lifespan = "on") -> Iterator[ServerThread]:
    """``with running(app) as server:`` serve ``app`` for the block."""
    with ServerThread(app, lifespan=lifespan) as server:
        yield server


def clamp_policy(*, model: str = MODEL, cap: int = 8192, window: int = 12288) -> AdmissionPolicy:
    """The deployment's admission numbers (8,192-token cap, 12,288 window), clamping."""
    return AdmissionPolicy(
        served_model_name=model,
        model_aliases=frozenset(),
        max_input_tokens=cap,
        context_length=window,
        max_tokens_policy=MaxTokensPolicy.CLAMP,
        default_max_tokens=None,
    )


@functools.cache
def counting_parts() -> tuple[TokenCounter, ChatTemplate]:
    """The test model's tokenizer and chat template (as ``write_model_dir`` writes them),
    built in memory once: for rules and decisions that need no model directory."""
    tokenizer = train_tokenizer()
    byte_level = is_byte_level_bpe(json.loads(tokenizer.to_str()))
    template = ChatTemplate(
        {"default": CHAT_TEMPLATE}, special_tokens={"bos_token": BOS, "eos_token": "<|im_end|>"}
    )
    return TokenCounter(tokenizer, byte_level=byte_level), template


def payload_draft(
    payload: Mapping[str, Any] | None = None,
    *,
    policy: AdmissionPolicy | None = None,
    route: Route = Route.CHAT,
    user: str | None = None,
    exact: bool = False,
) -> Draft:
    """A ``Draft`` as the payload rules before the one under test leave it: the body parsed
    into ``payload`` (set the other fields a rule reads, e.g. ``work``, by hand)."""
    counter, template = counting_parts()
    policy = policy or clamp_policy()
    draft = Draft(
        route,
        json.dumps(payload or {}).encode(),
        user=user,
        exact=exact,
        policy=policy,
        counter=counter,
        template=template,
        allowlist=Allowlist(policy.extensions),
    )
    draft.payload = dict(payload or {})
    draft.chat = draft.payload  # as_chat's for a chat (the payload rules' order)
    return draft


def histogram_by_label(exposition: str, family: str, label: str) -> dict[str, tuple[float, float]]:
    """A histogram in a metrics exposition: ``label``'s value -> (count, sum)."""
    found: dict[str, list[float]] = {}
    for metric in text_string_to_metric_families(exposition):
        if metric.name != family:
            continue
        for sample in metric.samples:
            slot = found.setdefault(sample.labels[label], [0.0, 0.0])
            if sample.name.endswith("_count"):
                slot[0] = sample.value
            elif sample.name.endswith("_sum"):
                slot[1] = sample.value
    return {value: (count, total) for value, (count, total) in found.items()}


def hold_histogram(exposition: str) -> dict[str, tuple[float, float]]:
    """The admission layer's no-replica hold histogram in a metrics exposition:
    outcome -> (count, seconds in all). Read by the gateway's unit tests and the e2e test."""
    return histogram_by_label(exposition, "sparkllm_gateway_no_replica_hold_seconds", "outcome")
