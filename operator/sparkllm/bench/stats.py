"""Benchmark metrics, defined as SGLang's ``bench_serving`` defines them. Pure.

Why bench_serving's definitions (``python/sglang/bench_serving.py``,
``calculate_metrics``): the documents' baseline and the SGLang community report numbers
this way, so ours are comparable only if they are computed the same way:

- TTFT: time from sending the request to the first streamed chunk that carries generated
  text. bench_serving counts ``delta.content``; we also count ``delta.reasoning_content``,
  because with a reasoning parser (DeepSeek V4: ``--reasoning-parser deepseek-v4``) the
  first generated token arrives as reasoning, and counting only ``content`` would fold
  the whole reasoning phase into TTFT. Without a reasoning parser the two agree.
- E2E latency: from sending to the last chunk of the stream.
- TPOT: ``(E2E - TTFT) / (output_tokens - 1)`` per request with more than one output
  token; ``output_tokens`` is the server's ``usage.completion_tokens``.
- ITL: gaps between successive chunks that carry text.
- Output throughput: all completed requests' output tokens / scenario duration;
  request throughput: completed requests / duration; achieved concurrency:
  sum of E2E latencies / duration.
- Percentiles: linear interpolation between closest ranks (numpy's default, which
  bench_serving uses). Only successful requests count in the distributions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestResult:
    """What one request measured (seconds, relative to its own start)."""

    ok: bool
    e2e_s: float
    ttft_s: float | None = None
    output_tokens: int = 0
    prompt_tokens: int | None = None
    """The server's count (``usage.prompt_tokens``), chat template included."""
    itl_s: tuple[float, ...] = ()
    answer: str = ""
    """Generated content (reasoning excluded); kept for the needle check."""
    reasoning: str = ""
    error: str | None = None

    @property
    def tpot_s(self) -> float | None:
        if not self.ok or self.ttft_s is None or self.output_tokens <= 1:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    lower, upper = math.floor(position), math.ceil(position)
    fraction = position - lower
    return ordered[lower] + (ordered[upper] - ordered[lower]) * fraction


@dataclass(frozen=True, slots=True)
class Distribution:
    """Mean and percentiles of one metric, in milliseconds."""

    count: int
    mean_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float

    def to_json(self) -> dict[str, float | int]:
        return {
            "count": self.count,
            "mean": round(self.mean_ms, 3),
            "p50": round(self.p50_ms, 3),
            "p95": round(self.p95_ms, 3),
            "p99": round(self.p99_ms, 3),
        }


def distribution(seconds: Sequence[float]) -> Distribution | None:
    """The distribution of ``seconds`` in ms; None when there are no values."""
    if not seconds:
        return None
    ms = [value * 1000 for value in seconds]
    return Distribution(
        count=len(ms),
        mean_ms=sum(ms) / len(ms),
        p50_ms=percentile(ms, 50),
        p95_ms=percentile(ms, 95),
        p99_ms=percentile(ms, 99),
    )


@dataclass(frozen=True, slots=True)
class LoadMetrics:
    """One scenario's numbers."""

    requests: int
    completed: int
    errors: int
    duration_s: float
    ttft: Distribution | None
    tpot: Distribution | None
    itl: Distribution | None
    e2e: Distribution | None
    output_tokens: int
    prompt_tokens: int | None
    output_tokens_per_s: float
    requests_per_s: float
    achieved_concurrency: float


def summarize(results: Sequence[RequestResult], *, duration_s: float) -> LoadMetrics:
    """Metrics over one scenario's results, bench_serving's way."""
    done = [result for result in results if result.ok]
    duration = max(duration_s, 1e-9)
    output_tokens = sum(result.output_tokens for result in done)
    prompts = [result.prompt_tokens for result in done]
    return LoadMetrics(
        requests=len(results),
        completed=len(done),
        errors=len(results) - len(done),
        duration_s=duration_s,
        ttft=distribution([r.ttft_s for r in done if r.ttft_s is not None]),
        tpot=distribution([t for t in (r.tpot_s for r in done) if t is not None]),
        itl=distribution([gap for r in done for gap in r.itl_s]),
        e2e=distribution([r.e2e_s for r in done]),
        output_tokens=output_tokens,
        prompt_tokens=None if not prompts or None in prompts else sum(p or 0 for p in prompts),
        output_tokens_per_s=output_tokens / duration,
        requests_per_s=len(done) / duration,
        achieved_concurrency=sum(r.e2e_s for r in done) / duration,
    )
