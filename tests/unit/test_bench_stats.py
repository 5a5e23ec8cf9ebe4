"""bench_serving's metric definitions, and the timed stream parser (no network)."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sparkllm.bench.client import ChatRequest, stream_chat
from sparkllm.bench.stats import RequestResult, distribution, percentile, summarize


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([1.0, 2.0, 3.0, 4.0], 95, 3.85),
        ([1.0, 2.0, 3.0, 4.0], 99, 3.97),
        ([4.0, 1.0, 3.0, 2.0], 0, 1.0),
        ([7.0], 99, 7.0),
    ],
)
def test_percentile_interpolates_like_numpy(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    assert distribution([]) is None


def test_tpot_is_bench_servings() -> None:
    result = RequestResult(ok=True, e2e_s=2.0, ttft_s=0.5, output_tokens=4)
    assert result.tpot_s == pytest.approx(0.5)
    assert RequestResult(ok=True, e2e_s=1.0, ttft_s=0.5, output_tokens=1).tpot_s is None
    assert RequestResult(ok=False, e2e_s=1.0, error="x").tpot_s is None


def test_summarize_counts_only_successes_in_distributions() -> None:
    results = [
        RequestResult(ok=True, e2e_s=1.0, ttft_s=0.2, output_tokens=5, prompt_tokens=10),
        RequestResult(ok=True, e2e_s=3.0, ttft_s=0.6, output_tokens=5, prompt_tokens=10),
        RequestResult(ok=False, e2e_s=0.1, error="HTTP 429: busy"),
    ]
    metrics = summarize(results, duration_s=4.0)
    assert (metrics.requests, metrics.completed, metrics.errors) == (3, 2, 1)
    assert metrics.ttft is not None
    assert metrics.ttft.count == 2
    assert metrics.ttft.mean_ms == pytest.approx(400)
    assert metrics.output_tokens == 10
    assert metrics.prompt_tokens == 20
    assert metrics.output_tokens_per_s == pytest.approx(2.5)
    assert metrics.requests_per_s == pytest.approx(0.5)
    assert metrics.achieved_concurrency == pytest.approx(1.0)
    assert metrics.tpot is not None
    assert metrics.tpot.p50_ms == pytest.approx((200 + 600) / 2)


def sse(*events: Any) -> bytes:
    lines = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events]
    return "".join(lines).encode()


def delta(content: str | None = None, reasoning: str | None = None) -> dict[str, Any]:
    return {
        "choices": [{"index": 0, "delta": {"content": content, "reasoning_content": reasoning}}]
    }


USAGE = {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3}}


def run_stream(status: int, body: bytes) -> tuple[RequestResult, dict[str, Any]]:
    seen: dict[str, Any] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["body"] = json.loads(request.content)
        seen["auth"] = request.headers.get("authorization")
        return httpx.Response(status, content=body)

    ticks: Iterator[float] = itertools.count(start=10.0, step=1.0)

    async def go() -> RequestResult:
        transport = httpx.MockTransport(handler)
        async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
            request = ChatRequest(model="m", prompt="hi", max_tokens=3, ignore_eos=True)
            return await stream_chat(
                client, request, headers={"Authorization": "Bearer k"}, clock=lambda: next(ticks)
            )

    return asyncio.run(go()), seen


def test_stream_timing_with_a_fake_clock() -> None:
    # clock: 10 start; chunks at 11 (role only), 12, 13, 14 (text), 15 (usage), 16 [DONE]
    body = sse(delta(""), delta("a"), delta(None, "b"), delta("c"), USAGE, "[DONE]")
    result, seen = run_stream(200, body)
    assert result.ok
    assert (result.ttft_s, result.e2e_s) == (2.0, 6.0)
    assert result.itl_s == (1.0, 1.0)
    assert (result.output_tokens, result.prompt_tokens) == (3, 12)
    assert (result.answer, result.reasoning) == ("ac", "b")
    assert result.tpot_s == pytest.approx(2.0)
    assert seen["body"]["ignore_eos"] is True
    assert seen["body"]["stream_options"] == {"include_usage": True}
    assert seen["auth"] == "Bearer k"


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (401, b'{"error": "Unauthorized"}', "HTTP 401: Unauthorized"),
        (400, b'{"object": "error", "message": "too long"}', "HTTP 400: too long"),
        (
            200,
            sse(delta("a"), {"error": {"message": "engine died"}}),
            "error in stream: engine died",
        ),
        (200, sse(delta("a")), "stream ended without [DONE]"),
        (200, b"data: {not json\n\n", "malformed stream chunk"),
    ],
)
def test_stream_failures_become_results(status: int, body: bytes, error: str) -> None:
    result, _ = run_stream(status, body)
    assert not result.ok
    assert error in (result.error or "")
