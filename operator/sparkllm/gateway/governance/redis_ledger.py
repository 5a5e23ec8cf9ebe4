"""Reading the usage ledger back out of Redis: per-day hashes into ``UsageRow``s.

Why apart from redis_store.py: the store decides and writes on the request path (one
Lua script per step); this module only reads what those scripts wrote, for
``/v1/usage`` and ``sparkllm usage --redis``, and knows the ledger's key and field
layout (redis_scripts.py draws it): ``P:days`` names the days that have a ledger,
``P:ledger:<day>`` holds ``<user>|requests|<outcome>``, ``<user>|input`` and
``<user>|output``.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, timedelta
from typing import Final, cast

import redis.asyncio as redis

from sparkllm.gateway.governance import redis_scripts as scripts
from sparkllm.gateway.governance.store import UsageRow

EPOCH: Final = date(1970, 1, 1)


def epoch_day(day: date) -> int:
    """Days since 1970-01-01: how the ledger names a UTC day (Lua has no calendar)."""
    return (day - EPOCH).days


async def read_rows(
    client: redis.Redis, *, prefix: str, day_from: date, day_to: date
) -> list[UsageRow]:
    """The ledger's rows from ``day_from`` to ``day_to`` (raises RedisError)."""
    found = await client.zrangebyscore(f"{prefix}:days", epoch_day(day_from), epoch_day(day_to))
    days = [int(cast(bytes, day)) for day in found]
    async with client.pipeline(transaction=False) as pipe:
        for day in days:
            pipe.hgetall(f"{prefix}:ledger:{day}")
        ledgers = await pipe.execute()
    rows: list[UsageRow] = []
    for day, fields in zip(days, ledgers, strict=True):
        rows += day_rows(EPOCH + timedelta(days=day), fields)
    return rows


def day_rows(day: date, fields: dict[bytes, bytes]) -> list[UsageRow]:
    """One ledger hash (``user|requests|outcome``, ``user|input``, ``user|output``) as rows."""
    requests: dict[str, dict[str, int]] = defaultdict(dict)
    tokens: dict[str, dict[str, int]] = defaultdict(lambda: {"input": 0, "output": 0})
    for raw, value in fields.items():
        user, kind, *outcome = raw.decode().split(scripts.FIELD_SEPARATOR)
        if kind == "requests":
            requests[user][outcome[0]] = int(value)
        else:
            tokens[user][kind] = int(value)
    return [
        UsageRow(day, user, requests[user], tokens[user]["input"], tokens[user]["output"])
        for user in sorted(set(requests) | set(tokens))
    ]


__all__ = ["EPOCH", "day_rows", "epoch_day", "read_rows"]
