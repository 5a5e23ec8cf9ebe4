"""``sparkllm usage``: the usage ledger per user per day, as a table or JSON.

Why through the gateway: the ledger lives in the governance store, which by default is
the gateway's own process, so the gateway's ``GET /v1/usage`` is the one reader that
always works (gateway/governance/usage.py). The key comes from an environment variable
(``--api-key-env``), never an argument; an admin key (the policy's ``admins``) sees
every user, any other key its own rows. Days are UTC; the default is today.

    sparkllm usage --base-url http://gateway:8000 --api-key-env SPARKLLM_API_KEY \\
        --from 2026-12-01 --to 2026-12-07 [--json]
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from typing import Any

import httpx

from sparkllm.bench.cli_io import api_key
from sparkllm.errors import SparkllmError
from sparkllm.gateway.governance.usage import table

TIMEOUT_SECONDS = 30.0


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add ``sparkllm usage``'s options to ``parser``."""
    parser.add_argument("--base-url", required=True, help="the gateway's URL, e.g. http://h:8000")
    parser.add_argument(
        "--api-key-env",
        metavar="VAR",
        required=True,
        help="environment variable holding an API key (an admin's sees every user)",
    )
    parser.add_argument("--from", dest="day_from", type=date.fromisoformat, help="first UTC day")
    parser.add_argument("--to", dest="day_to", type=date.fromisoformat, help="last UTC day")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")


def fetch_usage(
    base_url: str, *, key: str | None, day_from: date | None, day_to: date | None
) -> dict[str, Any]:
    """The gateway's ``GET /v1/usage`` answer; SparkllmError saying why it failed."""
    params = {
        name: day.isoformat()
        for name, day in (("from", day_from), ("to", day_to))
        if day is not None
    }
    headers = {"authorization": f"Bearer {key}"} if key else {}
    url = base_url.rstrip("/") + "/v1/usage"
    try:
        response = httpx.get(url, params=params, headers=headers, timeout=TIMEOUT_SECONDS)
    except httpx.HTTPError as exc:
        raise SparkllmError(f"cannot read usage from {url}: {exc}") from exc
    if response.status_code != 200:
        try:
            detail = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            detail = response.text[:200]
        raise SparkllmError(f"{url} answered {response.status_code}: {detail}")
    report: dict[str, Any] = response.json()
    return report


def run(args: argparse.Namespace) -> int:
    report = fetch_usage(
        args.base_url,
        key=api_key(args.api_key_env),
        day_from=args.day_from,
        day_to=args.day_to,
    )
    print(json.dumps(report, indent=2) if args.json else table(report))
    return 0
