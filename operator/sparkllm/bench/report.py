"""The benchmark's reports: full JSON, Markdown for humans, a compact status summary.

Why three: the JSON keeps everything (every distribution, the basis of every number,
error samples) for later comparison; the Markdown is what a person reads after a run;
the summary is small enough for ``status.benchmark`` of the InferenceCluster (and for a
Job's 4 KiB termination message), in the camelCase of Kubernetes APIs. Every scenario
in all three carries its basis — input and output lengths, concurrency, cache state,
how lengths were counted — because the documents' rule is that numbers are comparable
only on one basis ("performance recorded on one basis").

``passed`` means every request completed and every needle came back; it is never a
verdict on latency (timings are recorded, not judged).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from sparkllm.bench.runner import ScenarioRun
from sparkllm.bench.stats import Distribution

REPORT_VERSION: Final = 1
TOOL: Final = "sparkllm bench"


@dataclass(frozen=True, slots=True)
class BenchReport:
    """A whole run."""

    started_at: str
    """RFC 3339 UTC time the run started."""
    base_url: str
    model: str
    token_counting: str
    runs: Sequence[ScenarioRun]

    @property
    def passed(self) -> bool:
        return all(
            run.metrics.errors == 0
            and (run.needles is None or run.needles_passed == len(run.needles))
            for run in self.runs
        )


def _dist(value: Distribution | None) -> dict[str, float | int] | None:
    return None if value is None else value.to_json()


def _scenario_json(run: ScenarioRun, *, token_counting: str) -> dict[str, Any]:
    metrics = run.metrics
    data: dict[str, Any] = {
        "name": run.scenario.name,
        "kind": run.scenario.kind,
        "basis": {
            **run.scenario.basis(),
            "token_counting": token_counting,
            "prompt_tokens_counted": list(run.prompt_tokens_counted),
        },
        "baseline": run.scenario.baseline,
        "requests": metrics.requests,
        "completed": metrics.completed,
        "errors": metrics.errors,
        "error_samples": list(run.error_samples),
        "duration_s": round(metrics.duration_s, 3),
        "ttft_ms": _dist(metrics.ttft),
        "tpot_ms": _dist(metrics.tpot),
        "itl_ms": _dist(metrics.itl),
        "e2e_ms": _dist(metrics.e2e),
        "output_tokens": metrics.output_tokens,
        "server_prompt_tokens": metrics.prompt_tokens,
        "output_tokens_per_s": round(metrics.output_tokens_per_s, 3),
        "requests_per_s": round(metrics.requests_per_s, 4),
        "achieved_concurrency": round(metrics.achieved_concurrency, 3),
    }
    if run.needles is not None:
        data["needle"] = {
            "passed": run.needles_passed,
            "total": len(run.needles),
            "cases": [
                {"depth": c.depth, "passed": c.passed, "found_in": c.found_in} for c in run.needles
            ],
        }
    return data


def report_json(report: BenchReport) -> dict[str, Any]:
    """Everything, for ``--output report.json``."""
    return {
        "version": REPORT_VERSION,
        "tool": TOOL,
        "started_at": report.started_at,
        "base_url": report.base_url,
        "model": report.model,
        "token_counting": report.token_counting,
        "metric_definitions": "SGLang bench_serving (python/sglang/bench_serving.py, "
        "calculate_metrics); TTFT also counts reasoning_content",
        "passed": report.passed,
        "scenarios": [
            _scenario_json(run, token_counting=report.token_counting) for run in report.runs
        ],
    }


def _ms(value: Distribution | None, attribute: str) -> str:
    if value is None:
        return "-"
    number: float = getattr(value, attribute)
    return f"{number / 1000:.2f} s" if number >= 1000 else f"{number:.1f} ms"


def report_markdown(report: BenchReport) -> str:
    """A Markdown page for ``--markdown report.md`` (and stdout)."""
    lines = [
        f"# Acceptance benchmark: {report.model}",
        "",
        f"- started: {report.started_at}; target: {report.base_url}",
        f"- prompt lengths: {report.token_counting}",
        "- cache: cold (unique prefix per request); load: closed loop at the concurrency shown",
        "- metrics as SGLang bench_serving defines them (TTFT also counts reasoning tokens)",
        f"- result: {'PASSED' if report.passed else 'NOT PASSED'} (passing means every "
        "request completed and every needle was found; latency is recorded, not judged)",
        "",
        "| scenario | in -> out | C | done | errors | TTFT p50 | TTFT p95 | TPOT p50 "
        "| TPOT p95 | E2E p50 | E2E p95 | E2E p99 | out tok/s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: |",
    ]
    for run in report.runs:
        s, m = run.scenario, run.metrics
        lines.append(
            f"| {s.name} | {s.input_tokens} -> {s.output_tokens} | {s.concurrency} "
            f"| {m.completed}/{m.requests} | {m.errors} | {_ms(m.ttft, 'p50_ms')} "
            f"| {_ms(m.ttft, 'p95_ms')} | {_ms(m.tpot, 'p50_ms')} | {_ms(m.tpot, 'p95_ms')} "
            f"| {_ms(m.e2e, 'p50_ms')} | {_ms(m.e2e, 'p95_ms')} | {_ms(m.e2e, 'p99_ms')} "
            f"| {m.output_tokens_per_s:.2f} |"
        )
    lines.append("")
    for run in report.runs:
        lines.append(
            f"- {run.scenario.name}: documents' baseline (mem 0.50): {run.scenario.baseline}"
        )
        if run.needles is not None:
            cases = ", ".join(f"{c.depth:.0%} {c.found_in}" for c in run.needles)
            lines.append(f"  - needle found {run.needles_passed}/{len(run.needles)}: {cases}")
        lines += [f"  - error: {error}" for error in run.error_samples]
    return "\n".join(lines) + "\n"


def _status_dist(value: Distribution | None) -> dict[str, float] | None:
    if value is None:
        return None
    return {
        "p50": round(value.p50_ms, 1),
        "p95": round(value.p95_ms, 1),
        "p99": round(value.p99_ms, 1),
    }


def status_summary(report: BenchReport) -> dict[str, Any]:
    """The compact summary for ``status.benchmark`` (camelCase, ms rounded to 0.1)."""
    scenarios = []
    for run in report.runs:
        s, m = run.scenario, run.metrics
        entry: dict[str, Any] = {
            "name": s.name,
            "inputTokens": s.input_tokens,
            "outputTokens": s.output_tokens,
            "concurrency": s.concurrency,
            "cache": "cold",
            "requests": m.requests,
            "completed": m.completed,
            "errors": m.errors,
            "ttftMs": _status_dist(m.ttft),
            "tpotMs": _status_dist(m.tpot),
            "e2eMs": _status_dist(m.e2e),
            "outputTokensPerSecond": round(m.output_tokens_per_s, 2),
        }
        if run.needles is not None:
            entry["needlesFound"] = f"{run.needles_passed}/{len(run.needles)}"
        scenarios.append(entry)
    return {
        "startedAt": report.started_at,
        "tool": TOOL,
        "tokenCounting": "tokenizer"
        if report.token_counting.startswith("tokenizer")
        else "approximate",
        "passed": report.passed,
        "scenarios": scenarios,
    }
