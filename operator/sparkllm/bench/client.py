"""One streamed chat completion, timed: the benchmark's only network code.

Why streaming: TTFT and TPOT only exist for a stream, and the documents' users see
streamed answers. The request is OpenAI-compatible (``/v1/chat/completions``) so it can
go to the gateway (what users see: auth, admission, router) or straight to a replica's
rank 0 (the engine alone); the report records which base URL was used. SGLang extensions
used: ``ignore_eos`` (exact output length, as bench_serving sends it) and
``stream_options.include_usage`` (the server's token counts in a final chunk).

Errors never raise: a refused request (HTTP status and the server's message), a broken
stream, an error chunk inside the stream, or a timeout becomes a failed
:class:`RequestResult` that the report counts. The API key is sent as a Bearer header
and never appears in an error message.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import httpx

from sparkllm.bench.stats import RequestResult

CHAT_PATH: Final = "/v1/chat/completions"
ERROR_TEXT_LIMIT: Final = 300


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """What to send."""

    model: str
    prompt: str
    max_tokens: int
    ignore_eos: bool
    extra_body: Mapping[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": [{"role": "user", "content": self.prompt}],
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
            **({"ignore_eos": True} if self.ignore_eos else {}),
            **self.extra_body,
        }


def _error_text(status: int, body: bytes) -> str:
    try:
        payload = json.loads(body)
        message = payload.get("message") or payload.get("error") or payload
        if isinstance(message, Mapping):
            message = message.get("message", message)
    except (ValueError, AttributeError):
        message = body.decode("utf-8", "replace")
    return f"HTTP {status}: {str(message)[:ERROR_TEXT_LIMIT]}"


@dataclass(slots=True)
class _Stream:
    """Accumulates one SSE stream."""

    started: float
    first_token: float | None = None
    last_token: float | None = None
    last_chunk: float | None = None
    gaps: list[float] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    text_chunks: int = 0
    usage: Mapping[str, Any] | None = None

    def chunk(self, data: Mapping[str, Any], now: float) -> str | None:
        """Take one JSON chunk; an error message if the chunk is an error."""
        self.last_chunk = now
        if "error" in data:
            error = data["error"]
            return str(error.get("message", error) if isinstance(error, Mapping) else error)
        if isinstance(data.get("usage"), Mapping):
            self.usage = data["usage"]
        for choice in data.get("choices") or ():
            delta = choice.get("delta") or {}
            content, reasoning = delta.get("content") or "", delta.get("reasoning_content") or ""
            if not (content or reasoning):
                continue
            if self.first_token is None:
                self.first_token = now
            elif self.last_token is not None:
                self.gaps.append(now - self.last_token)
            self.last_token = now
            self.text_chunks += 1
            self.content.append(content)
            self.reasoning.append(reasoning)
        return None

    def result(self) -> RequestResult:
        end = self.last_chunk if self.last_chunk is not None else self.started
        usage = self.usage or {}
        completion = usage.get("completion_tokens")
        prompt = usage.get("prompt_tokens")
        return RequestResult(
            ok=True,
            e2e_s=end - self.started,
            ttft_s=None if self.first_token is None else self.first_token - self.started,
            output_tokens=completion if isinstance(completion, int) else self.text_chunks,
            prompt_tokens=prompt if isinstance(prompt, int) else None,
            itl_s=tuple(self.gaps),
            answer="".join(self.content),
            reasoning="".join(self.reasoning),
        )


async def stream_chat(
    client: httpx.AsyncClient,
    request: ChatRequest,
    *,
    headers: Mapping[str, str],
    clock: Callable[[], float] = time.perf_counter,
) -> RequestResult:
    """Send ``request`` to ``client``'s base URL and time the stream."""
    started = clock()
    stream = _Stream(started=started)
    try:
        async with client.stream(
            "POST", CHAT_PATH, json=request.body(), headers=dict(headers)
        ) as reply:
            if reply.status_code != 200:
                body = await reply.aread()
                return _failed(started, clock, _error_text(reply.status_code, body))
            async for line in reply.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[len("data:") :].strip()
                now = clock()
                if payload == "[DONE]":
                    stream.last_chunk = now
                    return stream.result()
                try:
                    data = json.loads(payload)
                except ValueError:
                    return _failed(started, clock, f"malformed stream chunk: {payload[:80]}")
                problem = stream.chunk(data, now) if isinstance(data, Mapping) else None
                if problem is not None:
                    return _failed(started, clock, f"error in stream: {problem}")
        return _failed(started, clock, "stream ended without [DONE]")
    except httpx.TimeoutException as exc:
        return _failed(started, clock, f"timeout ({type(exc).__name__})")
    except httpx.HTTPError as exc:
        return _failed(started, clock, f"{type(exc).__name__}: {exc}"[:ERROR_TEXT_LIMIT])


def _failed(started: float, clock: Callable[[], float], error: str) -> RequestResult:
    return RequestResult(ok=False, e2e_s=clock() - started, error=error)
