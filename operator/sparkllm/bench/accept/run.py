"""Running the checklist in order: functional, stress, soak, regression, resources.

Why this order: functional checks are cheap and say at once whether the rest means
anything; the soak runs after the stress items so it also shows the engine recovered;
regression compares the stress figures; resource safety covers the whole window, read
once at the end (Prometheus over [start, end], restarts from the InferenceCluster's status
before and after). Sections can be left out; a left-out section has no rows (the report
lists which ran), never a pass.

The load's basis is in tokens: with ``tokenizer`` (the model directory, as the Job mounts
it) every prompt's user text is exactly ``input_tokens`` tokens of the model's own
tokenizer; without one, words stand in and every basis line says "approximate". Output
length is forced as bench_serving forces it (``max_tokens`` with ``ignore_eos``), and a
stress row fails when the server returned fewer output tokens than asked: the basis was
then not met, whatever the completion count says.
"""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import httpx

from sparkllm.bench.accept.functional import FUNCTIONAL_CHECKS, Probe
from sparkllm.bench.accept.load import LoadContext, run_arrival, run_scale8, run_soak
from sparkllm.bench.accept.regression import (
    DEFAULT_TOLERANCE,
    regression_rows,
    scenario_figures,
)
from sparkllm.bench.accept.resources import prometheus_rows, restart_count, restarts_row
from sparkllm.bench.accept.rows import SECTIONS, Row, verdict
from sparkllm.bench.accept.sizes import LoadSizes
from sparkllm.bench.progress import ProgressBar
from sparkllm.bench.prompts import PromptBuilder
from sparkllm.bench.runner import BenchTarget
from sparkllm.bench.stats import LoadMetrics

StatusReader = Callable[[], Awaitable[Mapping[str, Any] | None]]


@dataclass(frozen=True, slots=True)
class AcceptConfig:
    """What to run and against what."""

    target: BenchTarget
    sizes: LoadSizes = field(default_factory=LoadSizes)
    sections: tuple[str, ...] = SECTIONS
    prometheus_url: str | None = None
    node_selector: str = ""
    baseline: Mapping[str, Any] | None = None
    tolerances: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_TOLERANCE))
    read_status: StatusReader | None = None
    transport: httpx.AsyncBaseTransport | None = None
    tokenizer: Path | None = None
    """Directory with the model's ``tokenizer.json``; None: prompts sized in words."""


@dataclass(slots=True)
class AcceptRun:
    """Everything measured: the rows, the stress figures (for a baseline), the window."""

    rows: list[Row] = field(default_factory=list)
    figures: dict[str, dict[str, float]] = field(default_factory=dict)
    started: float = 0.0
    ended: float = 0.0
    token_counting: str = ""
    """How prompt lengths were counted (``PromptBuilder.counting``)."""

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(row.verdict != "fail" for row in self.rows)


async def _status(config: AcceptConfig) -> Mapping[str, Any] | None:
    return None if config.read_status is None else await config.read_status()


async def _functional(client: httpx.AsyncClient, *, config: AcceptConfig, out: TextIO) -> list[Row]:
    probe = Probe(client=client, model=config.target.model, headers=config.target.headers())
    progress = ProgressBar(label="functional", total=len(FUNCTIONAL_CHECKS), out=out)
    rows = []
    for check in FUNCTIONAL_CHECKS:
        rows.append(await check(probe))
        progress.advance(failed=rows[-1].verdict == "fail")
    progress.close()
    return rows


def _context(
    client: httpx.AsyncClient, *, config: AcceptConfig, builder: PromptBuilder, out: TextIO
) -> LoadContext:
    return LoadContext(
        client=client,
        target=config.target,
        sizes=config.sizes,
        builder=builder,
        nonce=secrets.token_hex(4),
        progress_out=out,
    )


def token_basis(sizes: LoadSizes, builder: PromptBuilder) -> str:
    """How the input and output lengths of the load are held, for every load row's basis."""
    if builder.exact:
        counted = f"input: {sizes.input_tokens} tokens of user text by the model's tokenizer"
    else:
        counted = f"input: {sizes.input_tokens} words standing in for tokens (approximate)"
    return (
        f"{counted}, chat template not counted; output: exactly {sizes.output_tokens} tokens "
        "(max_tokens with ignore_eos, as bench_serving)"
    )


def _load_row(
    name: str, *, metrics: LoadMetrics, basis: str, errors: Sequence[str], output_tokens: int
) -> Row:
    asked = metrics.completed * output_tokens
    ok = metrics.requests > 0 and metrics.completed == metrics.requests
    detail = f"{metrics.completed}/{metrics.requests} completed"
    if metrics.output_tokens != asked:
        ok = False
        detail += (
            f"; output {metrics.output_tokens} tokens, {asked} asked "
            f"({output_tokens} per request): the output length was not forced, basis not met"
        )
    if errors:
        detail += "; errors: " + " | ".join(errors[:3])
    return Row(section="stress", name=name, verdict=verdict(ok), basis=basis, detail=detail)


async def _stress(
    client: httpx.AsyncClient,
    *,
    config: AcceptConfig,
    run: AcceptRun,
    builder: PromptBuilder,
    out: TextIO,
) -> None:
    sizes = config.sizes
    load = _context(client, config=config, builder=builder, out=out)
    tokens = token_basis(sizes, builder)
    basis = (
        f"{sizes.scale8_requests} requests {sizes.input_tokens} -> {sizes.output_tokens} tokens "
        f"at closed-loop concurrency {sizes.scale8_concurrency}, all must succeed "
        f"(documents: Scale8 120/120); {tokens}"
    )
    print(f"[accept] Scale8: {basis}", file=out, flush=True)
    scale8 = await run_scale8(load)
    errors = scale8.error_samples
    row = _load_row("Scale8", metrics=scale8.metrics, basis=basis, errors=errors,
                    output_tokens=sizes.output_tokens)  # fmt: skip
    run.rows.append(row)
    run.figures["scale8"] = scenario_figures(scale8.metrics)
    basis = (
        f"{sizes.arrival_requests} requests {sizes.input_tokens} -> {sizes.output_tokens} tokens, "
        f"Poisson arrivals at {sizes.arrival_rate:g} req/s (documents' suggested starting load: "
        f"<= 0.10 req/s for 256 -> 128; Arrival 160/160), all must succeed; {tokens}"
    )
    print(f"[accept] Arrival: {basis}", file=out, flush=True)
    arrival, errors = await run_arrival(load)
    row = _load_row("Arrival", metrics=arrival, basis=basis, errors=errors,
                    output_tokens=sizes.output_tokens)  # fmt: skip
    run.rows.append(row)
    run.figures["arrival"] = scenario_figures(arrival)


async def _soak(
    client: httpx.AsyncClient, *, config: AcceptConfig, builder: PromptBuilder, out: TextIO
) -> list[Row]:
    sizes = config.sizes
    basis = (
        f"{sizes.soak_seconds:g} s closed loop at concurrency {sizes.soak_concurrency}, "
        f"{sizes.input_tokens} -> {sizes.output_tokens} tokens: zero errors; "
        f"{token_basis(sizes, builder)}"
    )
    print(f"[accept] soak: {basis}", file=out, flush=True)
    before = restart_count(await _status(config))
    metrics, errors = await run_soak(_context(client, config=config, builder=builder, out=out))
    after = restart_count(await _status(config))
    ok = metrics.requests > 0 and metrics.errors == 0
    detail = f"{metrics.completed}/{metrics.requests} completed"
    if errors:
        detail += "; errors: " + " | ".join(errors[:3])
    restarts = restarts_row(before=before, after=after, what="soak")
    return [
        Row(section="soak", name="soak errors", verdict=verdict(ok), basis=basis, detail=detail),
        replace(restarts, section="soak"),
    ]


async def run_acceptance(config: AcceptConfig, *, progress_out: TextIO | None = None) -> AcceptRun:
    """Run the configured sections in order; every row says pass, fail or not measured."""
    out = progress_out if progress_out is not None else sys.stderr
    builder = PromptBuilder.from_dir(config.tokenizer)
    run = AcceptRun(started=time.time(), token_counting=builder.counting)
    print(f"[accept] prompt lengths: {builder.counting}", file=out, flush=True)
    status_before = restart_count(await _status(config))
    async with httpx.AsyncClient(
        base_url=config.target.base_url,
        timeout=httpx.Timeout(config.target.timeout_s, connect=10.0),
        limits=httpx.Limits(max_connections=config.sizes.scale8_concurrency + 4),
        transport=config.transport,
    ) as client:
        if "functional" in config.sections:
            run.rows.extend(await _functional(client, config=config, out=out))
        if "stress" in config.sections:
            await _stress(client, config=config, run=run, builder=builder, out=out)
        if "soak" in config.sections:
            run.rows.extend(await _soak(client, config=config, builder=builder, out=out))
        if "regression" in config.sections:
            run.rows.extend(
                regression_rows(run.figures, baseline=config.baseline, tolerances=config.tolerances)
            )
        run.ended = time.time()
        if "resources" in config.sections:
            after = restart_count(await _status(config))
            run.rows.append(restarts_row(before=status_before, after=after))
            async with httpx.AsyncClient(timeout=30.0) as prometheus:
                run.rows.extend(
                    await prometheus_rows(
                        prometheus,
                        url=config.prometheus_url,
                        window_s=int(run.ended - run.started) + 1,
                        end=run.ended,
                        selector=config.node_selector,
                    )
                )
    return run
