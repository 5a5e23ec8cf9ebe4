"""``sparkllm usage``: the usage ledger per user per day, as a table or JSON.

Why through the gateway: the ledger lives in the governance store, which by default is
the gateway's own process, so the gateway's ``GET /v1/usage`` is the one reader that
always works (gateway/governance/usage.py). The key comes from an environment variable
(``--api-key-env``), never an argument; an admin key (the policy's ``admins``) sees
every user, any other key its own rows. Days are UTC; the default is today.

    sparkllm usage --base-url http://gateway:8000 --api-key-env SPARKLLM_API_KEY \\
        --from 2026-12-01 --to 2026-12-07 [--json]

With a shared store (``spec.gateway.governanceStore.redis``) the ledger outlives every
gateway, so ``--redis`` reads it there directly — every user's rows, also when no gateway
runs. The password comes from an environment variable too.

    sparkllm usage --redis redis.governance.svc:6379 --redis-password-env REDIS_PASSWORD \\
        --cluster llm/deepseek-v4-flash [--from ...] [--to ...] [--json]

With neither ``--base-url`` nor ``--redis`` it reads the operator's default store (the
chart's ``governance.redis``), from the same env the operator reads
(``SPARKLLM_GOVERNANCE_REDIS_*``: set in the operator's pod, so ``kubectl exec`` into it
works) — the store of every InferenceCluster whose spec names none. Where that env is
unset it says what to give instead; a password Secret it cannot read (it has no cluster
access) must be passed through ``--redis-password-env``, and it says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from datetime import date
from typing import Any

import httpx

from sparkllm.bench.cli_io import api_key
from sparkllm.errors import SparkllmError
from sparkllm.gateway.governance import redis_store, usage
from sparkllm.gateway.governance.usage import table
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway_settings import governance_key_prefix
from sparkllm.render.governance_default import ADDRESS_ENV, governance_default_from

TIMEOUT_SECONDS = 30.0


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add ``sparkllm usage``'s options to ``parser``."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--base-url", help="the gateway's URL, e.g. http://h:8000")
    source.add_argument(
        "--redis",
        metavar="HOST:PORT",
        help="read the ledger from the shared governance store instead (needs --cluster); "
        f"neither: the operator's default store ({ADDRESS_ENV})",
    )
    parser.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="with --base-url: environment variable holding an API key (an admin's sees "
        "every user)",
    )
    parser.add_argument(
        "--cluster", metavar="NAMESPACE/NAME", help="with --redis: whose ledger to read"
    )
    parser.add_argument(
        "--redis-password-env", metavar="VAR", help="with --redis: variable holding its password"
    )
    parser.add_argument(
        "--redis-database",
        type=int,
        default=None,
        help="with --redis: the database (default 0; the default store's own without --redis)",
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


def read_redis_usage(args: argparse.Namespace, *, address: str, database: int) -> dict[str, Any]:
    """The same report, read from the shared store at ``address``; SparkllmError saying why
    it failed."""
    namespace, _, name = (args.cluster or "").partition("/")
    if not namespace or not name:
        raise SparkllmError(
            "reading the shared store needs --cluster NAMESPACE/NAME (whose ledger)"
        )
    password = None
    if args.redis_password_env is not None:
        password = os.environ.get(args.redis_password_env)
        if not password:
            raise SparkllmError(f"environment variable {args.redis_password_env} is not set")
    query = "&".join(
        f"{param}={day.isoformat()}"
        for param, day in (("from", args.day_from), ("to", args.day_to))
        if day is not None
    )
    days = usage.parse_range(query.encode(), today=usage.today_utc())
    if isinstance(days, ErrorReply):
        raise SparkllmError(days.message)
    try:
        rows = redis_store.read_ledger(
            address,
            password=password,
            key_prefix=governance_key_prefix(namespace, name),
            database=database,
            day_from=days[0],
            day_to=days[1],
        )
    except ValueError as exc:  # a malformed address
        raise SparkllmError(str(exc)) from exc
    report: dict[str, Any] = json.loads(usage.rows_json(rows, shared=True))
    return report


def default_store(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str, int]:
    """The address and database of the operator's default store, read from ``environ`` as
    the operator reads it; SparkllmError saying what to give when it cannot be used."""
    store = governance_default_from(environ)
    if store is None:
        raise SparkllmError(
            "no ledger to read: give --base-url URL (a gateway; with --api-key-env) or "
            "--redis HOST:PORT (the shared store; with --cluster). The operator's default "
            f"store (chart value governance.redis, env {ADDRESS_ENV}) is not set here"
        )
    secret = store.password_secret_ref
    if secret is not None and args.redis_password_env is None:
        raise SparkllmError(
            f"the operator's default store at {store.address} needs the password in Secret "
            f"{secret.name} (key {secret.key}) of the InferenceCluster's namespace: put it "
            "in an environment variable and give --redis-password-env VAR"
        )
    database = store.database if args.redis_database is None else args.redis_database
    print(f"reading the operator's default store at {store.address}", file=sys.stderr)
    return store.address, database


def run(args: argparse.Namespace) -> int:
    if args.redis is not None:
        report = read_redis_usage(args, address=args.redis, database=args.redis_database or 0)
    elif args.base_url is None:
        address, database = default_store(args, os.environ)
        report = read_redis_usage(args, address=address, database=database)
    elif args.api_key_env is None:
        raise SparkllmError("--base-url needs --api-key-env (the variable holding a key)")
    else:
        report = fetch_usage(
            args.base_url,
            key=api_key(args.api_key_env),
            day_from=args.day_from,
            day_to=args.day_to,
        )
    print(json.dumps(report, indent=2) if args.json else table(report))
    return 0
