"""The acceptance report: JSON to keep, Markdown to hand over, a summary for status.

Why three, as for the benchmark: the JSON keeps every row with its basis and the stress
figures (a later run can be accepted as the baseline from it); the Markdown is the page a
platform engineer gives their team; the summary is small enough for a Job's termination
message and ``status.acceptance`` (counts per verdict, the failed items, the time).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from sparkllm.bench.accept.run import AcceptConfig, AcceptRun

REPORT_VERSION: Final = 1
TOOL: Final = "sparkllm accept"
SUMMARY_FAILED_LIMIT: Final = 8
SUMMARY_VERDICT_LIMIT: Final = 32
FAILED_DETAIL_LIMIT: Final = 200
SUMMARY_BYTES: Final = 3584  # the kubelet keeps 4096 bytes of a termination message


def _time(seconds: float) -> str:
    moment = datetime.fromtimestamp(seconds, UTC).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


def report_json(run: AcceptRun, config: AcceptConfig) -> dict[str, Any]:
    sizes = config.sizes
    return {
        "version": REPORT_VERSION,
        "tool": TOOL,
        "startedAt": _time(run.started),
        "endedAt": _time(run.ended),
        "baseUrl": config.target.base_url,
        "model": config.target.model,
        "sections": list(config.sections),
        "sizes": {
            "scale8": {"requests": sizes.scale8_requests, "concurrency": sizes.scale8_concurrency},
            "arrival": {"requests": sizes.arrival_requests, "ratePerS": sizes.arrival_rate},
            "soak": {"seconds": sizes.soak_seconds, "concurrency": sizes.soak_concurrency},
            "tokens": {
                "input": sizes.input_tokens,
                "output": sizes.output_tokens,
                "inputCounting": run.token_counting,
                "outputLength": "exact (max_tokens with ignore_eos)",
            },
        },
        "prometheus": config.prometheus_url is not None,
        "passed": run.passed,
        "counts": dict(Counter(row.verdict for row in run.rows)),
        "rows": [row.to_json() for row in run.rows],
        "figures": run.figures,
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def counts_line(counts: Mapping[Any, int]) -> str:
    """``N pass, N fail, N not measured`` (not measured named, never folded into pass)."""
    return (
        f"{counts.get('pass', 0)} pass, {counts.get('fail', 0)} fail, "
        f"{counts.get('not measured', 0)} not measured"
    )


def report_markdown(run: AcceptRun, config: AcceptConfig) -> str:
    counts = Counter(row.verdict for row in run.rows)
    lines = [
        f"# Acceptance: {config.target.model}",
        "",
        f"- Target: {config.target.base_url}",
        f"- Window: {_time(run.started)} .. {_time(run.ended)}",
        f"- Prompt lengths: {run.token_counting or 'no load sent'}",
        f"- Result: **{'PASSED' if run.passed else 'NOT PASSED'}** — {counts_line(counts)}",
        "",
        "| Section | Item | Verdict | Basis | Detail |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {row.section} | {_cell(row.name)} | **{row.verdict}** | {_cell(row.basis)} | "
        f"{_cell(row.detail)} |"
        for row in run.rows
    ]
    if counts["not measured"]:
        lines += ["", "Not measured is not a pass: the item's data source was missing."]
    return "\n".join(lines) + "\n"


def status_summary(run: AcceptRun) -> dict[str, Any]:
    """The compact ``status.acceptance`` summary (camelCase, under the kubelet's 4 KiB).

    Counts per verdict, every row's verdict (``section/name``), why each failed row failed
    (cut to ``FAILED_DETAIL_LIMIT``), the window, and the stress figures the operator
    accepts as the baseline on request. Past the size limit the last failure details go
    first, then the last verdicts; never the counts.
    """
    counts = Counter(row.verdict for row in run.rows)
    verdicts = {f"{row.section}/{row.name}": row.verdict for row in run.rows}
    failed = [
        f"{row.section}/{row.name}: {row.detail}"[:FAILED_DETAIL_LIMIT]
        for row in run.rows
        if row.verdict == "fail"
    ]
    summary: dict[str, Any] = {
        "passed": run.passed,
        "startedAt": _time(run.started),
        "endedAt": _time(run.ended),
        "pass": counts["pass"],
        "fail": counts["fail"],
        "notMeasured": counts["not measured"],
        "verdicts": dict(list(verdicts.items())[:SUMMARY_VERDICT_LIMIT]),
        "failed": failed[:SUMMARY_FAILED_LIMIT],
        "figures": run.figures,
    }
    while _size(summary) > SUMMARY_BYTES and summary["failed"]:
        summary["failed"] = summary["failed"][:-1]
    while _size(summary) > SUMMARY_BYTES and summary["verdicts"]:
        summary["verdicts"] = dict(list(summary["verdicts"].items())[:-1])
    return summary


def _size(summary: Mapping[str, Any]) -> int:
    return len(json.dumps(summary, separators=(",", ":")).encode())
