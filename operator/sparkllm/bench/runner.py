"""Running the matrix: closed-loop workers per scenario, a warm-up, the needle check.

Why closed loop: the documents' concurrency figures (C1/C4/C8) are "this many requests
in flight", which a fixed pool of C workers reproduces exactly — each sends its next
request when its previous one finishes. A scenario's duration runs from its first send
to its last completion; requests are built before the clock starts, so prompt building
never counts as latency.

One warm-up request (not counted, as bench_serving does) runs first; if it fails the
run stops at once with its error (wrong URL, key or model name), instead of reporting a
matrix of identical failures. It uses its own nonce, so it warms nothing the measured
requests could reuse.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

import httpx

from sparkllm.bench.client import ChatRequest, stream_chat
from sparkllm.bench.progress import ProgressBar
from sparkllm.bench.prompts import Prompt, PromptBuilder, needle_found
from sparkllm.bench.scenarios import Scenario
from sparkllm.bench.stats import LoadMetrics, RequestResult, summarize
from sparkllm.errors import SparkllmError

ERROR_SAMPLES: Final = 5
WARMUP_TOKENS: Final = 16


class BenchError(SparkllmError):
    """The benchmark cannot run at all (e.g. the warm-up request failed)."""


@dataclass(frozen=True, slots=True)
class BenchTarget:
    """Where to send requests and as whom."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 900.0
    extra_body: Mapping[str, Any] = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        return {} if self.api_key is None else {"Authorization": f"Bearer {self.api_key}"}


@dataclass(frozen=True, slots=True)
class NeedleCase:
    """One needle-in-a-haystack request: where the needle was and whether it came back."""

    depth: float
    needle: str
    passed: bool
    found_in: str
    """``content``, ``reasoning only``, ``nowhere`` or ``error``."""


@dataclass(frozen=True, slots=True)
class ScenarioRun:
    """One scenario's outcome."""

    scenario: Scenario
    metrics: LoadMetrics
    prompt_tokens_counted: tuple[int, int]
    """(min, max) prompt length by our counter (see ``prompts``)."""
    error_samples: tuple[str, ...] = ()
    needles: tuple[NeedleCase, ...] | None = None

    @property
    def needles_passed(self) -> int:
        return sum(case.passed for case in self.needles or ())


def _seed(scenario: str, index: int) -> int:
    return zlib.crc32(f"{scenario}:{index}".encode())


def _depths(count: int) -> list[float]:
    return [0.5] if count == 1 else [index / (count - 1) for index in range(count)]


def build_prompts(scenario: Scenario, builder: PromptBuilder, *, nonce: str) -> list[Prompt]:
    """The scenario's prompts, each cold (unique nonce) and seeded by its index."""
    if scenario.kind == "niah":
        return [
            builder.needle_prompt(
                tokens=scenario.input_tokens,
                depth=depth,
                nonce=f"{nonce}-{scenario.name}-{index}",
                seed=_seed(scenario.name, index),
            )
            for index, depth in enumerate(_depths(scenario.requests))
        ]
    return [
        builder.load_prompt(
            tokens=scenario.input_tokens,
            nonce=f"{nonce}-{scenario.name}-{index}",
            seed=_seed(scenario.name, index),
        )
        for index in range(scenario.requests)
    ]


def _needle_case(depth: float, prompt: Prompt, result: RequestResult) -> NeedleCase:
    needle = prompt.needle or ""
    if not result.ok:
        found = "error"
    elif needle_found(result.answer, needle):
        found = "content"
    elif needle_found(result.reasoning, needle):
        found = "reasoning only"
    else:
        found = "nowhere"
    return NeedleCase(depth=depth, needle=needle, passed=found == "content", found_in=found)


async def run_scenario(
    client: httpx.AsyncClient,
    *,
    target: BenchTarget,
    scenario: Scenario,
    builder: PromptBuilder,
    nonce: str,
    progress_out: TextIO | None = None,
) -> ScenarioRun:
    """Send the scenario's requests with ``scenario.concurrency`` closed-loop workers."""
    prompts = build_prompts(scenario, builder, nonce=nonce)
    results: list[RequestResult | None] = [None] * len(prompts)
    pending = list(range(len(prompts)))
    pending.reverse()
    progress = ProgressBar(label=scenario.name, total=len(prompts), out=progress_out)

    async def worker() -> None:
        while pending:
            index = pending.pop()
            request = ChatRequest(
                model=target.model,
                prompt=prompts[index].text,
                max_tokens=scenario.output_tokens,
                ignore_eos=scenario.ignore_eos,
                extra_body=target.extra_body,
            )
            result = await stream_chat(client, request, headers=target.headers())
            results[index] = result
            progress.advance(failed=not result.ok)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(scenario.concurrency, len(prompts)))))
    duration = time.perf_counter() - started
    progress.close()
    done = [result for result in results if result is not None]
    errors = [result.error for result in done if result.error]
    needles = None
    if scenario.kind == "niah":
        needles = tuple(
            _needle_case(depth, prompt, result)
            for depth, prompt, result in zip(_depths(len(prompts)), prompts, done, strict=True)
        )
    counts = [prompt.tokens for prompt in prompts]
    return ScenarioRun(
        scenario=scenario,
        metrics=summarize(done, duration_s=duration),
        prompt_tokens_counted=(min(counts), max(counts)),
        error_samples=tuple(dict.fromkeys(errors))[:ERROR_SAMPLES],
        needles=needles,
    )


async def warm_up(
    client: httpx.AsyncClient, *, target: BenchTarget, builder: PromptBuilder
) -> None:
    """One uncounted request; BenchError with the server's answer if it fails."""
    prompt = builder.load_prompt(
        tokens=WARMUP_TOKENS, nonce=f"warmup-{secrets.token_hex(4)}", seed=0
    )
    request = ChatRequest(model=target.model, prompt=prompt.text, max_tokens=8, ignore_eos=True)
    result = await stream_chat(client, request, headers=target.headers())
    if not result.ok:
        raise BenchError(f"warm-up request to {target.base_url} failed: {result.error}")


async def run_matrix(
    target: BenchTarget,
    scenarios: Sequence[Scenario],
    builder: PromptBuilder,
    *,
    warmup: bool = True,
    nonce: str | None = None,
    progress_out: TextIO | None = None,
) -> list[ScenarioRun]:
    """Run every scenario in order against ``target``."""
    run_nonce = nonce or secrets.token_hex(4)
    connections = max((s.concurrency for s in scenarios), default=1) + 2
    async with httpx.AsyncClient(
        base_url=target.base_url,
        timeout=httpx.Timeout(target.timeout_s, connect=10.0),
        limits=httpx.Limits(max_connections=connections),
    ) as client:
        if warmup:
            await warm_up(client, target=target, builder=builder)
        return [
            await run_scenario(
                client,
                target=target,
                scenario=scenario,
                builder=builder,
                nonce=run_nonce,
                progress_out=progress_out,
            )
            for scenario in scenarios
        ]
