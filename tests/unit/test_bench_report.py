"""The three reports: full JSON, Markdown, and the compact status.benchmark summary."""

from __future__ import annotations

import json

from sparkllm.bench import DOCUMENTED_MATRIX, BenchReport, ScenarioRun
from sparkllm.bench.report import report_json, report_markdown, status_summary
from sparkllm.bench.runner import NeedleCase
from sparkllm.bench.stats import RequestResult, summarize

OK = RequestResult(ok=True, e2e_s=10.0, ttft_s=2.0, output_tokens=128, prompt_tokens=260)
FAILED = RequestResult(ok=False, e2e_s=0.1, error="HTTP 429: queue full")


def matrix_report(*, errors: int = 0, needles_found: int = 6) -> BenchReport:
    runs = []
    for scenario in DOCUMENTED_MATRIX:
        results = [OK] * scenario.requests
        needles = None
        if scenario.kind == "niah":
            needles = tuple(
                NeedleCase(
                    depth=i / 5,
                    needle=f"amber-{i}",
                    passed=i < needles_found,
                    found_in="content" if i < needles_found else "nowhere",
                )
                for i in range(6)
            )
        if scenario.name == "short-c8":
            results = [FAILED] * errors + [OK] * (scenario.requests - errors)
        runs.append(
            ScenarioRun(
                scenario=scenario,
                metrics=summarize(results, duration_s=100.0),
                prompt_tokens_counted=(scenario.input_tokens, scenario.input_tokens),
                error_samples=("HTTP 429: queue full",) if errors else (),
                needles=needles,
            )
        )
    return BenchReport(
        started_at="2026-09-01T10:00:00Z",
        base_url="http://gateway:8000",
        model="deepseek-v4-flash",
        token_counting="approximate: whitespace-separated words stand in for tokens",
        runs=runs,
    )


def test_json_report_labels_every_number_with_its_basis() -> None:
    data = report_json(matrix_report())
    assert data["passed"] is True
    assert "bench_serving" in data["metric_definitions"]
    by_name = {s["name"]: s for s in data["scenarios"]}
    short = by_name["short-c8"]
    assert short["basis"] == {
        "input_tokens": 256,
        "output_tokens": 128,
        "output_length": "exact (ignore_eos)",
        "concurrency": 8,
        "load": "closed loop",
        "cache": "cold (unique prefix per request)",
        "requests": 120,
        "token_counting": "approximate: whitespace-separated words stand in for tokens",
        "prompt_tokens_counted": [256, 256],
    }
    assert short["ttft_ms"]["p95"] == 2000.0
    assert short["tpot_ms"]["p50"] == round(8000 / 127, 3)
    assert short["output_tokens_per_s"] == round(120 * 128 / 100, 3)
    assert by_name["niah"]["needle"]["passed"] == 6
    assert by_name["niah"]["basis"]["output_length"] == "up to (stops at EOS)"
    json.dumps(data)  # serialisable as is


def test_errors_and_missed_needles_fail_the_run() -> None:
    assert not matrix_report(errors=3).passed
    assert not matrix_report(needles_found=5).passed
    markdown = report_markdown(matrix_report(errors=3, needles_found=5))
    assert "NOT PASSED" in markdown
    assert "| short-c8 | 256 -> 128 | 8 | 117/120 | 3 |" in markdown
    assert "needle found 5/6" in markdown
    assert "error: HTTP 429: queue full" in markdown


def test_markdown_shows_seconds_and_milliseconds() -> None:
    markdown = report_markdown(matrix_report())
    assert "| 2.00 s | 2.00 s | 63.0 ms |" in markdown
    assert "35.105 tok/s" in markdown  # the documents' baseline is quoted beside the run


def test_status_summary_is_compact_camel_case() -> None:
    summary = status_summary(matrix_report())
    text = json.dumps(summary, separators=(",", ":"))
    assert len(text.encode()) < 4096
    assert summary["passed"] is True
    assert summary["tokenCounting"] == "approximate"
    first = summary["scenarios"][0]
    assert set(first) == {
        "name", "inputTokens", "outputTokens", "concurrency", "cache", "requests",
        "completed", "errors", "ttftMs", "tpotMs", "e2eMs", "outputTokensPerSecond",
    }  # fmt: skip
    assert summary["scenarios"][-1]["needlesFound"] == "6/6"
