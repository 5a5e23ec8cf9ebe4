"""``sparkllm bench``: run the acceptance matrix against a served model and write reports.

The API key is read from an environment variable named on the command line
(``--api-key-env VAR``), never from an argument, so it stays out of shell history,
process listings and pod specs (a Job sets VAR from a secretKeyRef). Exit status: 0 when
every request completed and every needle was found, 1 otherwise (the reports say what),
2 for a usage error or a run that could not start (e.g. the warm-up request failed).
Against the simulator the needle check cannot pass: its answers are deterministic words,
not reading comprehension, so a full matrix there exits 1 by design.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from sparkllm.bench.accept import cli as accept_cli
from sparkllm.bench.cli_io import api_key, write
from sparkllm.bench.prompts import PromptBuilder
from sparkllm.bench.report import BenchReport, report_json, report_markdown, status_summary
from sparkllm.bench.runner import BenchTarget, run_matrix
from sparkllm.bench.scenarios import SCENARIO_NAMES, select_scenarios
from sparkllm.errors import SparkllmError

EXIT_PASSED: Final = 0
EXIT_NOT_PASSED: Final = 1
EXIT_ERROR: Final = 2


def _scenario_list(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add ``sparkllm bench``'s options to ``parser``."""
    parser.add_argument(
        "--base-url", required=True, help="gateway or rank-0 URL, e.g. http://h:8000"
    )
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument(
        "--api-key-env", metavar="VAR", help="environment variable holding the API key"
    )
    parser.add_argument(
        "--scenarios",
        type=_scenario_list,
        help=f"comma-separated subset of: {', '.join(SCENARIO_NAMES)} (default: all)",
    )
    parser.add_argument("--requests", type=int, help="override every scenario's request count")
    parser.add_argument(
        "--tokenizer", type=Path, help="directory with tokenizer.json (else approximate)"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="per request, seconds")
    parser.add_argument("--no-warmup", action="store_true", help="skip the warm-up request")
    parser.add_argument("--output", type=Path, help="write the full JSON report here")
    parser.add_argument("--markdown", type=Path, help="write the Markdown report here")
    parser.add_argument(
        "--status-summary",
        type=Path,
        help="write the compact status.benchmark JSON here (e.g. /dev/termination-log)",
    )
    accept_cli.configure_parser(parser)


def run(args: argparse.Namespace) -> int:
    """Run the benchmark (or, with ``--accept``, the checklist); the exit status."""
    if args.accept:
        return accept_cli.run(args)
    try:
        scenarios = select_scenarios(args.scenarios, requests=args.requests)
        builder = PromptBuilder.from_dir(args.tokenizer)
        target = BenchTarget(
            base_url=args.base_url.rstrip("/"),
            model=args.model,
            api_key=api_key(args.api_key_env),
            timeout_s=args.timeout,
        )
        started = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        runs = asyncio.run(run_matrix(target, scenarios, builder, warmup=not args.no_warmup))
        report = BenchReport(
            started_at=started,
            base_url=target.base_url,
            model=target.model,
            token_counting=builder.counting,
            runs=runs,
        )
        markdown = report_markdown(report)
        write(args.output, json.dumps(report_json(report), indent=2) + "\n")
        write(args.markdown, markdown)
        summary = json.dumps(status_summary(report), separators=(",", ":"))
        write(args.status_summary, summary)
    except SparkllmError as exc:
        print(f"sparkllm bench: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(markdown, end="")
    return EXIT_PASSED if report.passed else EXIT_NOT_PASSED


def bench_main(argv: Sequence[str] | None = None) -> int:
    """``sparkllm bench ...``; ``argv`` excludes the program and subcommand."""
    parser = argparse.ArgumentParser(
        prog="sparkllm bench", description="Acceptance benchmark (the documents' matrix)."
    )
    configure_parser(parser)
    return run(parser.parse_args(argv))
