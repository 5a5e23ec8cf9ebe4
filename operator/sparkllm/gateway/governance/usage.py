"""The usage ledger's two faces: the gateway's ``GET /v1/usage`` and the report's table.

Why the gateway serves it: the ledger lives in the store — in the gateway's own process
by default — so the one place that can always read it is the gateway. ``GET
/v1/usage?from=YYYY-MM-DD&to=YYYY-MM-DD`` (UTC days, default today) is authenticated
with a user key like every API call; the policy's ``admins`` see every user's rows,
anyone else their own. The answer says where the state lives (``store``) so a report
from an in-process store can say that it does not survive a restart.

``sparkllm usage`` (cli_usage.py) prints the same rows as a table or JSON; the JSON
shape here is the one both sides read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import parse_qs

from sparkllm.errors import GovernanceStoreError
from sparkllm.gateway.governance import replies
from sparkllm.gateway.governance.gate import Governor
from sparkllm.gateway.governance.store import UsageRow
from sparkllm.gateway.replies import INVALID_REQUEST, ErrorReply

MAX_DAYS = 366
STORE_NOTE = {
    False: "state in process: lost when the gateway restarts, not shared by replicas",
    True: "state in a shared store: kept across restarts and replicas",
}


def _day(values: list[str] | None, *, default: date, param: str) -> date | ErrorReply:
    if not values:
        return default
    try:
        return date.fromisoformat(values[-1])
    except ValueError:
        message = f"'{param}' must be a date (YYYY-MM-DD), not {values[-1]!r}."
        return ErrorReply(400, message, INVALID_REQUEST, "invalid_value", param)


def parse_range(query: bytes, *, today: date) -> tuple[date, date] | ErrorReply:
    """``from`` and ``to`` from the query string (default: ``today``), or the 400."""
    params = parse_qs(query.decode("latin-1"))
    day_from = _day(params.get("from"), default=today, param="from")
    if isinstance(day_from, ErrorReply):
        return day_from
    day_to = _day(params.get("to"), default=max(today, day_from), param="to")
    if isinstance(day_to, ErrorReply):
        return day_to
    if day_to < day_from or (day_to - day_from).days >= MAX_DAYS:
        message = f"'to' must be on or after 'from' and at most {MAX_DAYS} days later."
        return ErrorReply(400, message, INVALID_REQUEST, "invalid_value", "to")
    return day_from, day_to


def today_utc() -> date:
    return datetime.now(UTC).date()


def rows_json(rows: Sequence[UsageRow], *, shared: bool) -> bytes:
    """The answer of ``GET /v1/usage``."""
    data = [
        {
            "day": row.day.isoformat(),
            "user": row.user,
            "requests": sum(row.requests.values()),
            "outcomes": dict(sorted(row.requests.items())),
            "input_tokens": row.input_tokens,
            "output_tokens": row.output_tokens,
        }
        for row in rows
    ]
    store = {"shared": shared, "note": STORE_NOTE[shared]}
    return json.dumps({"object": "list", "store": store, "data": data}).encode("utf-8")


def table(report: dict[str, Any]) -> str:
    """The report as a text table, one row per user per day, and the store's note."""
    header = ("DAY", "USER", "REQUESTS", "OK", "INPUT TOKENS", "OUTPUT TOKENS")
    lines = [header]
    for row in report.get("data") or []:
        outcomes = row.get("outcomes") or {}
        lines.append(
            (
                str(row["day"]),
                str(row["user"]),
                str(row["requests"]),
                str(outcomes.get("ok", 0)),
                str(row["input_tokens"]),
                str(row["output_tokens"]),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]
    if len(lines) == 1:
        text.append("(no usage in this range)")
    note = (report.get("store") or {}).get("note")
    if note:
        text.append(f"store: {note}")
    return "\n".join(text)


async def answer(governor: Governor, *, query: object, user: str) -> bytes | ErrorReply:
    """``GET /v1/usage``'s body: every user's rows for an admin, the caller's own otherwise.

    ``query`` is the ASGI scope's ``query_string`` (bytes, or absent).
    """
    days = parse_range(query if isinstance(query, bytes) else b"", today=today_utc())
    if isinstance(days, ErrorReply):
        return days
    try:
        rows = await governor.store.usage(day_from=days[0], day_to=days[1])
    except GovernanceStoreError as exc:
        return replies.store_unavailable(str(exc))
    policy = governor.policy()
    if isinstance(policy, ErrorReply) or user not in policy.admins:
        rows = [row for row in rows if row.user == user]
    return rows_json(rows, shared=governor.store.shared)
