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
from typing import Final

from sparkllm.bench.accept import cli as accept_cli
from sparkllm.bench.args import BenchArgs
from sparkllm.bench.cli_io import api_key, write
from sparkllm.bench.prompts import PromptBuilder
from sparkllm.bench.report import BenchReport, report_json, report_markdown, status_summary
from sparkllm.bench.runner import BenchTarget, run_matrix
from sparkllm.bench.scenarios import select_scenarios
from sparkllm.cli_args import add_options, from_namespace
from sparkllm.errors import SparkllmError

EXIT_PASSED: Final = 0
EXIT_NOT_PASSED: Final = 1
EXIT_ERROR: Final = 2


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add ``sparkllm bench``'s options (the checklist's too) to ``parser``."""
    add_options(parser, BenchArgs)


def run(namespace: argparse.Namespace) -> int:
    """Run the benchmark (or, with ``--accept``, the checklist); the exit status."""
    args = from_namespace(BenchArgs, namespace)
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
