"""Governance's answers: every 429 names the limit that refused and when to retry.

Why its own module: a client told only "429, retry in 20 s" cannot tell its own budget
from the deployment's congestion, and retries at the wrong moment. Each refusal here
says which limit (``requests_per_minute``, ``tokens per day``, the user's queue, ...),
its Retry-After comes from that limit (the end of the window; for the queue, the wait
the queue's observed service rate predicts: limits.py), and the body keeps OpenAI's
shape and ``rate_limit_exceeded`` code so SDKs back off as usual.

The wait is also sent to the millisecond as ``retry-after-ms``, which OpenAI's SDKs read
before ``retry-after`` and honour up to two minutes: a default client retries after the
real wait, not a rounded-up second. A budget refusal carries the ``x-ratelimit-*``
headers OpenAI sends (``-limit-``, ``-remaining-``, ``-reset-requests`` for requests per
minute, ``-tokens`` for the token window that refused) for what the refusal knows.
"""

from __future__ import annotations

import math

from sparkllm.gateway.governance.store import Limit, Refusal, UserLimits
from sparkllm.gateway.replies import CODE_RATE_LIMITED, RATE_LIMIT, SERVER_ERROR, ErrorReply

CODE_POLICY_UNAVAILABLE = "governance_policy_unavailable"
CODE_STORE_UNAVAILABLE = "governance_store_unavailable"
STORE_RETRY_AFTER_SECONDS = 5  # a Redis failover or restart takes seconds


def whole_seconds(value: float) -> int:
    """A Retry-After: ``value`` seconds rounded up, at least one."""
    return max(1, math.ceil(value))


def retry_after_ms(seconds: float) -> int:
    """The wait in whole milliseconds, rounded up, at least one."""
    return max(1, math.ceil(seconds * 1000))


def duration(seconds: float) -> str:
    """A reset time as OpenAI writes it: ``20ms``, ``1.5s``, ``6m0s``, ``1h2m3s``."""
    if seconds < 1:
        return f"{retry_after_ms(seconds)}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{secs:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{int(hours)}h{int(minutes)}m{text}"
    return f"{int(minutes)}m{text}" if minutes else text


def rate_limit_headers(refusal: Refusal, limits: UserLimits) -> tuple[tuple[bytes, bytes], ...]:
    """OpenAI's ``x-ratelimit-*`` headers for what ``refusal`` knows of the user's limits."""
    values: list[tuple[str, object]] = []
    reset = duration(refusal.retry_after)
    if limits.requests_per_minute is not None:
        values.append(("limit-requests", limits.requests_per_minute))
        if refusal.limit is Limit.REQUESTS_PER_MINUTE:
            values += [("remaining-requests", 0), ("reset-requests", reset)]
    if refusal.limit in (Limit.TOKENS, Limit.MIN_OUTPUT):
        window = next((w for w in limits.token_windows if w.name == refusal.window), None)
        if window is not None:
            remaining = refusal.remaining_tokens or 0
            values += [("limit-tokens", window.limit), ("remaining-tokens", remaining)]
            values.append(("reset-tokens", reset))
    return tuple((f"x-ratelimit-{name}".encode(), str(value).encode()) for name, value in values)


def reason(refusal: Refusal) -> str:
    """The limit's name: in the 429's message and the refusals metric's ``reason``."""
    if refusal.limit in (Limit.TOKENS, Limit.MIN_OUTPUT):
        return f"tokens_per_{refusal.window}"
    return refusal.limit.value


def refused(
    refusal: Refusal, *, min_output_tokens: int, limits: UserLimits | None = None
) -> ErrorReply:
    """429 for a refusal by the store (the user's rate, concurrency or token budget)."""
    wait = whole_seconds(refusal.retry_after)
    window = refusal.window or ""
    if refusal.limit is Limit.CONCURRENCY:
        why = "you have as many requests in progress as your policy allows"
    elif refusal.limit is Limit.REQUESTS_PER_MINUTE:
        why = "your requests per minute are used up"
    elif refusal.limit is Limit.MIN_OUTPUT:
        why = (
            f"your tokens per {window} leave {refusal.remaining_tokens} tokens, fewer than "
            f"this request's input plus the minimum answer of {min_output_tokens} tokens"
        )
    else:
        why = f"your tokens per {window} are used up (or too few for this request's input)"
    message = f"Rate limit {reason(refusal)} reached: {why}. Retry after {wait} s."
    return ErrorReply(
        429,
        message,
        RATE_LIMIT,
        CODE_RATE_LIMITED,
        retry_after_seconds=wait,
        retry_after_ms=retry_after_ms(refusal.retry_after),
        extra_headers=() if limits is None else rate_limit_headers(refusal, limits),
    )


def queue_refused(limit: Limit, *, retry_after: float) -> ErrorReply:
    """429 from the fair queue: the user's bound, the gateway's bound, or the wait;
    ``retry_after``: the seconds until a slot is expected (limits.py)."""
    retry_after_seconds = whole_seconds(retry_after)
    why = {
        Limit.USER_QUEUE: "you have as many requests waiting as your policy allows",
        Limit.QUEUE_FULL: "the request queue is full",
        Limit.QUEUE_TIMEOUT: "no slot freed up in time",
    }[limit]
    message = (
        f"Rate limit {limit.value} reached: too many concurrent requests, {why}. "
        f"Retry after {retry_after_seconds} s."
    )
    return ErrorReply(
        429,
        message,
        RATE_LIMIT,
        CODE_RATE_LIMITED,
        retry_after_seconds=retry_after_seconds,
        retry_after_ms=retry_after_ms(retry_after),
    )


def policy_unavailable(problem: str) -> ErrorReply:
    """503: a governance policy is configured but none could be loaded (fail closed)."""
    message = f"The gateway's usage policy is not available: {problem}."
    return ErrorReply(503, message, SERVER_ERROR, CODE_POLICY_UNAVAILABLE)


def store_unavailable(problem: str) -> ErrorReply:
    """503: the shared governance store (Redis) cannot answer, so no budget can be checked."""
    message = (
        f"The gateway cannot check usage limits right now: {problem}. "
        f"Retry after {STORE_RETRY_AFTER_SECONDS} s."
    )
    return ErrorReply(
        503,
        message,
        SERVER_ERROR,
        CODE_STORE_UNAVAILABLE,
        retry_after_seconds=STORE_RETRY_AFTER_SECONDS,
    )
