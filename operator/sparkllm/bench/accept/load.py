"""Acceptance's load items: Scale8, Arrival and the soak, on the documents' basis.

Why these three: the documents passed "Scale8 120/120" (120 synthetic 256 -> 128 requests
at closed-loop concurrency 8) and "Arrival 160/160" (Poisson arrivals), suggested a
starting production load of at most 0.10 req/s of 256 -> 128 requests, and listed a
stability re-test before production. Scale8 reuses the benchmark's closed-loop runner;
Arrival is open loop: request k is SENT at the k-th Poisson arrival time whether or not
earlier ones finished, which is what users do. The soak is closed loop for a set time.
Sizes are parameters (the documents' are the defaults) so tests run small; the basis
line of every row states the sizes actually used.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

import httpx

from sparkllm.bench.accept.sizes import LoadSizes
from sparkllm.bench.client import ChatRequest, stream_chat
from sparkllm.bench.progress import ProgressBar
from sparkllm.bench.prompts import PromptBuilder
from sparkllm.bench.runner import BenchTarget, ScenarioRun, run_scenario
from sparkllm.bench.scenarios import Scenario
from sparkllm.bench.stats import LoadMetrics, RequestResult, summarize


def scale8_scenario(sizes: LoadSizes) -> Scenario:
    return Scenario(
        "scale8",
        "load",
        sizes.input_tokens,
        sizes.output_tokens,
        sizes.scale8_concurrency,
        sizes.scale8_requests,
        "Scale8 120/120",
    )


def poisson_offsets(count: int, *, rate: float, seed: int) -> list[float]:
    """Send times (seconds from the start) of ``count`` Poisson arrivals at ``rate`` req/s."""
    rng = random.Random(seed)
    offsets, clock = [], 0.0
    for _ in range(count):
        offsets.append(clock)
        clock += rng.expovariate(rate)
    return offsets


@dataclass(frozen=True, slots=True)
class LoadContext:
    """Where load goes and how it is built: one per acceptance run."""

    client: httpx.AsyncClient
    target: BenchTarget
    sizes: LoadSizes
    builder: PromptBuilder
    nonce: str
    progress_out: TextIO | None = None

    async def send(self, name: str, seed: int) -> RequestResult:
        """One cold 256 -> 128 (by default) request, its nonce from ``name``."""
        prompt = self.builder.load_prompt(
            tokens=self.sizes.input_tokens, nonce=f"{self.nonce}-{name}", seed=seed
        )
        request = ChatRequest(
            model=self.target.model,
            prompt=prompt.text,
            max_tokens=self.sizes.output_tokens,
            ignore_eos=True,
            extra_body=self.target.extra_body,
        )
        return await stream_chat(self.client, request, headers=self.target.headers())


async def run_scale8(load: LoadContext) -> ScenarioRun:
    """Scale8: the benchmark's closed-loop runner on the Scale8 basis."""
    return await run_scenario(
        load.client,
        target=load.target,
        scenario=scale8_scenario(load.sizes),
        builder=load.builder,
        nonce=load.nonce,
        progress_out=load.progress_out,
    )


async def run_arrival(load: LoadContext) -> tuple[LoadMetrics, tuple[str, ...]]:
    """Open loop: each request sent at its Poisson time, all awaited; (metrics, errors)."""
    sizes = load.sizes
    offsets = poisson_offsets(sizes.arrival_requests, rate=sizes.arrival_rate, seed=sizes.seed)
    progress = ProgressBar(label="arrival", total=len(offsets), out=load.progress_out)
    started = time.perf_counter()

    async def one(index: int, offset: float) -> RequestResult:
        await asyncio.sleep(max(0.0, started + offset - time.perf_counter()))
        result = await load.send(f"arrival-{index}", index)
        progress.advance(failed=not result.ok)
        return result

    results = await asyncio.gather(*(one(i, offset) for i, offset in enumerate(offsets)))
    progress.close()
    return summarize(results, duration_s=time.perf_counter() - started), _errors(results)


def _errors(results: Sequence[RequestResult]) -> tuple[str, ...]:
    """The distinct error messages, in order of first appearance."""
    return tuple(dict.fromkeys(r.error for r in results if r.error))


async def run_soak(
    load: LoadContext, *, clock: Callable[[], float] = time.perf_counter
) -> tuple[LoadMetrics, tuple[str, ...]]:
    """Closed loop for ``soak_seconds``: (metrics, distinct error messages).

    Its progress bar counts seconds (the length is a time, not a request count) and the
    errors so far.
    """
    results: list[RequestResult] = []
    started = clock()
    deadline = started + load.sizes.soak_seconds
    seconds = max(1, math.ceil(load.sizes.soak_seconds))
    progress = ProgressBar(label="soak", total=seconds, out=load.progress_out)

    async def worker(number: int) -> None:
        sent = 0
        while clock() < deadline:
            result = await load.send(f"soak-{number}-{sent}", sent)
            results.append(result)
            sent += 1
            progress.update(
                done=math.floor(clock() - started), errors=progress.errors + int(not result.ok)
            )

    await asyncio.gather(*(worker(n) for n in range(load.sizes.soak_concurrency)))
    progress.update(done=seconds, errors=progress.errors)
    progress.close()
    return summarize(results, duration_s=clock() - started), _errors(results)
