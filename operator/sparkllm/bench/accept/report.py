"""The acceptance report: JSON to keep, Markdown to hand over, a summary for status.

Why three, as for the benchmark: the JSON keeps every row with its basis and the stress
figures (a later run can be accepted as the baseline from it); the Markdown is the page a
platform engineer gives their team; the summary is small enough for a Job's termination
message and ``status.acceptance`` (counts per verdict, the failed items, the time).
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any, Final

from sparkllm.bench.accept.run import AcceptConfig, AcceptRun

REPORT_VERSION: Final = 1
TOOL: Final = "sparkllm accept"
SUMMARY_FAILED_LIMIT: Final = 8


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
            "tokens": {"input": sizes.input_tokens, "output": sizes.output_tokens},
        },
        "prometheus": config.prometheus_url is not None,
        "passed": run.passed,
        "counts": dict(Counter(row.verdict for row in run.rows)),
        "rows": [row.to_json() for row in run.rows],
        "figures": run.figures,
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def report_markdown(run: AcceptRun, config: AcceptConfig) -> str:
    counts = Counter(row.verdict for row in run.rows)
    lines = [
        f"# Acceptance: {config.target.model}",
        "",
        f"- Target: {config.target.base_url}",
        f"- Window: {_time(run.started)} .. {_time(run.ended)}",
        f"- Result: **{'PASSED' if run.passed else 'NOT PASSED'}** — "
        f"{counts['pass']} pass, {counts['fail']} fail, {counts['not measured']} not measured",
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
    """The compact ``status.acceptance`` summary (camelCase, bounded)."""
    counts = Counter(row.verdict for row in run.rows)
    failed = [f"{row.section}/{row.name}" for row in run.rows if row.verdict == "fail"]
    return {
        "passed": run.passed,
        "time": _time(run.ended),
        "pass": counts["pass"],
        "fail": counts["fail"],
        "notMeasured": counts["not measured"],
        "failed": failed[:SUMMARY_FAILED_LIMIT],
    }
