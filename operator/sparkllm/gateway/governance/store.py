"""Where per-user governance state lives: the store protocol and the in-process store.

Why a protocol: the decisions that must be atomic for one user — requests per minute,
requests in progress, token windows, the reservation of input + granted output — and
the ledger of what was used are the same whether the state lives in this process (one
gateway replica, the default) or in Redis (several replicas, state that survives a
restart; redis_store.py). The gateway talks to ``GovernanceStore`` only; every call is
async and atomic per call, so a shared store can run each one as one Lua script.

The rules every store keeps (tests/unit/test_governance_store.py pins them):

* Windows are fixed and aligned to UTC (a minute, an hour, a day start at :00 / 00:00),
  so a window is a key (``window_start``) and "retry after" is the time to its end.
* ``admit`` reserves ``input_tokens + granted_output`` in every token window at once,
  where ``granted_output = min(requested_output, what every window still allows)``;
  it refuses when that is below ``min_output_tokens`` (or below what was asked, when
  less was asked) or any other limit is reached.
  Concurrent admits of one user therefore never promise more than a window holds.
* ``settle`` replaces the reservation by what was used (in the windows the reservation
  was made in), releases the request's place, and adds the request to the ledger.
  Settling an unknown or already settled ticket does nothing (idempotent).
* ``acquire_slot`` / ``release_slot`` bound the requests in flight across every gateway
  replica; in process there is one replica, so the local limiter and this agree.
* Fewer round trips for a shared store: ``admit`` may take the global slot in the same
  call (``slot=``; ``Admit.slot`` says whether it did — a full set of slots does not
  refuse the admission), and ``settle`` may release one (``release=``), also when the
  ticket is unknown. ``holds`` says whether a slot this process took is surely still
  its own, so the governor may hand it to its next request without asking the store.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Protocol

MINUTE_SECONDS = 60
LONGEST_WINDOW_SECONDS = 86400  # token windows are a minute, an hour or a day


class Limit(enum.StrEnum):
    """Which limit refused a request (the 429's ``limit`` and the refusal metric label)."""

    CONCURRENCY = "user_concurrency"  # the user's requests in progress
    REQUESTS_PER_MINUTE = "requests_per_minute"
    TOKENS = "tokens"  # a token window (Refusal.window says which)
    MIN_OUTPUT = "min_output_tokens"  # a window leaves fewer output tokens than the minimum
    USER_QUEUE = "user_queue"  # the user's own queue bound (fair queue)
    QUEUE_FULL = "queue_full"  # the gateway's queue bound
    QUEUE_TIMEOUT = "queue_timeout"  # no slot freed up in time


@dataclass(frozen=True, slots=True)
class TokenWindow:
    """At most ``limit`` tokens (input + output) per aligned window of ``seconds``."""

    name: str  # "hour", "day": names the window in refusals, status and docs
    seconds: int
    limit: int


@dataclass(frozen=True, slots=True)
class UserLimits:
    """One user's effective limits (policy defaults merged with the user's overrides)."""

    max_concurrent_requests: int | None = None  # None: unlimited
    requests_per_minute: int | None = None
    token_windows: tuple[TokenWindow, ...] = ()


@dataclass(frozen=True, slots=True)
class AdmitRequest:
    """One request to admit. ``now`` is wall-clock seconds (UTC epoch)."""

    user: str
    input_tokens: int
    requested_output_tokens: int
    min_output_tokens: int
    limits: UserLimits
    now: float


@dataclass(frozen=True, slots=True)
class SlotRequest:
    """A global slot asked for with an admission: ``holder`` takes one of ``limit``."""

    holder: str
    limit: int


@dataclass(frozen=True, slots=True)
class Admit:
    """Admitted: ``granted_output_tokens`` reserved with the input under ``ticket``.

    ``slot``: the global slot asked for with the admission was taken (release it).
    """

    ticket: str
    granted_output_tokens: int
    slot: bool = False


@dataclass(frozen=True, slots=True)
class Refusal:
    """Refused by ``limit`` (``window``: which token window); retry in ``retry_after`` s."""

    limit: Limit
    retry_after: float
    window: str | None = None
    remaining_tokens: int | None = None  # for MIN_OUTPUT / TOKENS: what the window has left


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One user's use on one UTC day: requests by outcome and tokens charged."""

    day: date
    user: str
    requests: Mapping[str, int]
    input_tokens: int
    output_tokens: int


class GovernanceStore(Protocol):
    """Atomic per-user admission, settlement and the ledger; see the module docstring."""

    @property
    def shared(self) -> bool:
        """Whether the state is shared by replicas and survives a restart."""
        ...

    async def admit(
        self, req: AdmitRequest, *, slot: SlotRequest | None = None
    ) -> Admit | Refusal: ...

    async def settle(
        self,
        ticket: str,
        *,
        input_tokens: int,
        output_tokens: int,
        outcome: str,
        now: float,
        release: str | None = None,
    ) -> None: ...

    async def usage(self, *, day_from: date, day_to: date) -> list[UsageRow]: ...

    async def acquire_slot(self, holder: str, *, limit: int) -> bool: ...

    async def release_slot(self, holder: str) -> None: ...

    def holds(self, holder: str) -> bool:
        """Whether ``holder``'s global slot is surely still held (no lease near its end)."""
        ...

    async def aclose(self) -> None: ...


def window_start(now: float, seconds: int) -> int:
    """The start (epoch seconds) of the aligned window of ``seconds`` holding ``now``."""
    return int(now // seconds) * seconds


def retry_after(now: float, seconds: int) -> float:
    """Seconds until the aligned window holding ``now`` ends (> 0)."""
    return window_start(now, seconds) + seconds - now


def utc_day(now: float) -> date:
    return datetime.fromtimestamp(now, UTC).date()


def grant(
    *, req: AdmitRequest, charged: Mapping[str, int], requests_this_minute: int, in_progress: int
) -> tuple[int, Refusal | None]:
    """The pure decision every store makes atomically: granted output, or the refusal.

    ``charged`` maps each window name to the tokens already charged or reserved in its
    current window. Shared by the stores so they cannot decide differently.
    """
    limits = req.limits
    if limits.max_concurrent_requests is not None and (
        in_progress >= limits.max_concurrent_requests
    ):
        return 0, Refusal(Limit.CONCURRENCY, retry_after=1.0)
    if limits.requests_per_minute is not None and (
        requests_this_minute >= limits.requests_per_minute
    ):
        return 0, Refusal(
            Limit.REQUESTS_PER_MINUTE, retry_after=retry_after(req.now, MINUTE_SECONDS)
        )
    granted = req.requested_output_tokens
    least = min(req.min_output_tokens, granted)  # a request may ask for less than the minimum
    for window in limits.token_windows:
        left = window.limit - charged.get(window.name, 0) - req.input_tokens
        if left < least or left <= 0:
            limit = Limit.MIN_OUTPUT if left > 0 else Limit.TOKENS
            return 0, Refusal(
                limit,
                retry_after=retry_after(req.now, window.seconds),
                window=window.name,
                remaining_tokens=max(0, left + req.input_tokens),
            )
        granted = min(granted, left)
    return granted, None


@dataclass(slots=True)
class _Ticket:
    user: str
    reserved: int
    windows: tuple[tuple[str, int], ...]  # (window name, window start) charged


@dataclass(slots=True)
class _Ledger:
    requests: dict[str, int] = dataclasses.field(default_factory=lambda: defaultdict(int))
    input_tokens: int = 0
    output_tokens: int = 0


class MemoryStore:
    """The in-process store: one gateway replica; state is lost on restart (says so)."""

    shared = False

    def __init__(self) -> None:
        self._charged: dict[tuple[str, str, int], int] = defaultdict(int)  # user, window, start
        self._minute: dict[tuple[str, int], int] = defaultdict(int)
        self._in_progress: dict[str, int] = defaultdict(int)
        self._tickets: dict[str, _Ticket] = {}
        self._ledger: dict[tuple[date, str], _Ledger] = defaultdict(_Ledger)
        self._slots: set[str] = set()
        self._ids = itertools.count(1)
        self._pruned_at = -math.inf

    async def admit(self, req: AdmitRequest, *, slot: SlotRequest | None = None) -> Admit | Refusal:
        user, limits = req.user, req.limits
        starts = {w.name: window_start(req.now, w.seconds) for w in limits.token_windows}
        charged = {name: self._charged[(user, name, start)] for name, start in starts.items()}
        minute = window_start(req.now, MINUTE_SECONDS)
        granted, refusal = grant(
            req=req,
            charged=charged,
            requests_this_minute=self._minute.get((user, minute), 0),
            in_progress=self._in_progress.get(user, 0),
        )
        if refusal is not None:
            return refusal
        reserved = req.input_tokens + granted
        for name, start in starts.items():
            self._charged[(user, name, start)] += reserved
        self._minute[(user, minute)] += 1
        self._in_progress[user] += 1
        ticket = f"m{next(self._ids)}"
        self._tickets[ticket] = _Ticket(user, reserved, tuple(starts.items()))
        self._prune(req.now)
        taken = slot is not None and await self.acquire_slot(slot.holder, limit=slot.limit)
        return Admit(ticket, granted, slot=taken)

    async def settle(
        self,
        ticket: str,
        *,
        input_tokens: int,
        output_tokens: int,
        outcome: str,
        now: float,
        release: str | None = None,
    ) -> None:
        if release is not None:
            self._slots.discard(release)
        held = self._tickets.pop(ticket, None)
        if held is None:
            return
        used = input_tokens + output_tokens
        for name, start in held.windows:
            self._charged[(held.user, name, start)] += used - held.reserved
        self._in_progress[held.user] -= 1
        row = self._ledger[(utc_day(now), held.user)]
        row.requests[outcome] += 1
        row.input_tokens += input_tokens
        row.output_tokens += output_tokens

    async def usage(self, *, day_from: date, day_to: date) -> list[UsageRow]:
        return [
            UsageRow(day, user, dict(row.requests), row.input_tokens, row.output_tokens)
            for (day, user), row in sorted(self._ledger.items())
            if day_from <= day <= day_to
        ]

    async def acquire_slot(self, holder: str, *, limit: int) -> bool:
        if len(self._slots) >= limit:
            return False
        self._slots.add(holder)
        return True

    async def release_slot(self, holder: str) -> None:
        self._slots.discard(holder)

    def holds(self, holder: str) -> bool:
        return holder in self._slots

    async def aclose(self) -> None:
        return None

    def charged(self, user: str, window: TokenWindow, *, now: float) -> int:
        """Tokens charged or reserved in ``user``'s current ``window`` (tests, status)."""
        return self._charged.get((user, window.name, window_start(now, window.seconds)), 0)

    def _prune(self, now: float) -> None:
        """Drop windows that ended (at most once a minute; open tickets keep theirs)."""
        if now - self._pruned_at < MINUTE_SECONDS:
            return
        self._pruned_at = now
        live = {(t.user, name, start) for t in self._tickets.values() for name, start in t.windows}
        horizon = now - LONGEST_WINDOW_SECONDS
        for key in [k for k in self._charged if k[2] < horizon and k not in live]:
            del self._charged[key]
        minute = window_start(now, MINUTE_SECONDS)
        for user_minute in [k for k in self._minute if k[1] < minute]:
            del self._minute[user_minute]
