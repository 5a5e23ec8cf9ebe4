"""Concurrency limit in front of the engine: N in flight; waiters served fairly by user.

Why here as well as in the router: the documents' measurements show the pipeline
degrades sharply past 8 concurrent requests (TTFT p95 25 s at C8 vs 5 s at C4), and a
request the gateway refuses costs nothing downstream. A bounded queue absorbs bursts;
past it, or after ``timeout`` seconds of waiting, the client gets 429 with Retry-After
instead of an unbounded wait.

Fair queuing over users (issue 17): when slots are short, waiting requests are served
by weight.

Why not first-come-first-served: one instance has 8 engine slots and answers in tens of
seconds, so a user who queues 16 requests at once would make everyone behind them wait
for all 16. Here each user has a queue of their own, and a freed slot goes to the user
whose head request has the smallest *start tag* (start-time fair queuing, Goyal et al.
1996, over users; every request costs one slot): a request's tag is ``max(V,
last finish of its user)`` and its user's finish then moves ``1 / weight`` on; ``V`` is
the tag of the request last given a slot. A user with nothing queued starts at ``V``,
ahead of a backlogged user, whose tags run ahead by ``1 / weight`` per queued request —
so a light user gets the next free slot, and backlogged users share by weight.

Bounds: ``queue_size`` waiters in all (as before), ``max_queued`` per user (the policy's
``maxQueuedRequests``), ``timeout`` per waiter. When the whole queue is full, a newcomer
whose user has fewer waiters than the user with the most pushes that user's newest
waiter out (it gets 429 queue_full): a full queue never locks a light user out.

How long a refused client should wait (``expected_wait``): slots are given back at the
rate the engine finishes requests, so the ``position``-th in line gets one after about
``position / rate`` seconds, the rate observed over the last ``SERVICE_SAMPLES`` slots
given back (at most ``SERVICE_WINDOW_SECONDS`` old). A 429 says that, not the queue
timeout: an SDK retries after Retry-After, and the timeout (tens of seconds) made every
client sleep that long while slots freed in a fraction of a second. With fewer than two
slots given back lately the rate is unknown (a cold start, a first burst): each slot is
then assumed busy for ``COLD_SERVICE_SECONDS`` (a conservative answer time: the
documents' C8 measurements answer in tens of seconds), so the ``position``-th waits
``position * COLD_SERVICE_SECONDS / max_in_flight``, capped at ``COLD_CAP_SECONDS`` and
at the queue timeout. Why a cap rather than the timeout (it said 60 s before): the guess
errs cheaply on the short side — an early retry costs one more 429, answered without
touching the engine, and by then slots have usually been given back and the rate is
known — while a long one makes a default SDK sleep for nothing.

One user's requests are served in arrival order. A freed slot is handed directly to the
chosen waiter (no thundering herd); a waiter cancelled at the moment it is handed a slot
passes it on, so slots are never lost. Timeouts are timer callbacks on the waiter's
future rather than ``wait_for``, whose cancellation races (it may swallow a cancel)
would make that hand-over ambiguous. Single event loop: no locks needed.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

SERVICE_SAMPLES: Final = 32  # slots given back that the service rate is measured over
SERVICE_WINDOW_SECONDS: Final = 60.0  # older ones say nothing of the rate now
COLD_SERVICE_SECONDS: Final = 20.0  # a slot's assumed hold while no rate is known
COLD_CAP_SECONDS: Final = 10.0  # the most a guess (no rate known) tells a client to wait


class SlotResult(enum.Enum):
    """Outcome of asking for a slot."""

    ACQUIRED = "acquired"
    QUEUE_FULL = "queue_full"  # the gateway's queue is full (or this waiter was pushed out)
    USER_QUEUE_FULL = "user_queue"  # the user's own bound
    TIMED_OUT = "timed_out"


@dataclass(slots=True, eq=False)  # identity: a waiter is itself, not its fields
class _Waiter:
    user: str
    start: float
    seq: int
    future: asyncio.Future[SlotResult] = field(repr=False)


class ConcurrencyLimiter:
    """At most ``max_in_flight`` holders; waiters served by weighted fair queuing."""

    def __init__(
        self,
        *,
        max_in_flight: int,
        queue_size: int,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_in_flight < 1 or queue_size < 0 or timeout <= 0:
            raise ValueError("max_in_flight >= 1, queue_size >= 0 and timeout > 0 required")
        self._max_in_flight = max_in_flight
        self._queue_size = queue_size
        self._timeout = timeout
        self._in_flight = 0
        self._queued = 0
        self._queues: dict[str, collections.deque[_Waiter]] = {}
        self._finish: dict[str, float] = {}
        self._vtime = 0.0
        self._seq = itertools.count()
        self._clock = clock
        self._given_back: collections.deque[float] = collections.deque(maxlen=SERVICE_SAMPLES)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def queued(self) -> int:
        return self._queued

    def queued_for(self, user: str) -> int:
        queue = self._queues.get(user)
        return 0 if queue is None else len(queue)

    def try_acquire(self) -> bool:
        """Take a free slot without waiting (nobody queued); ``release`` it after True."""
        if self._in_flight < self._max_in_flight and not self._queued:
            self._in_flight += 1
            return True
        return False

    async def acquire(
        self, user: str = "", *, weight: int = 1, max_queued: int | None = None
    ) -> SlotResult:
        """Take a slot, waiting in ``user``'s queue if needed; ``release`` after ACQUIRED."""
        if self.try_acquire():
            return SlotResult.ACQUIRED
        mine = self.queued_for(user)
        if max_queued is not None and mine >= max_queued:
            return SlotResult.USER_QUEUE_FULL
        if self._queued >= self._queue_size and not self._push_out(user, mine):
            return SlotResult.QUEUE_FULL
        waiter = self._enqueue(user, weight)
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self._timeout, self._settle, waiter, SlotResult.TIMED_OUT)
        try:
            return await waiter.future
        except asyncio.CancelledError:
            future = waiter.future
            if future.done() and not future.cancelled() and future.result() is SlotResult.ACQUIRED:
                self.release()  # handed a slot at the moment we were cancelled: pass it on
            else:
                self._remove(waiter)
            raise
        finally:
            timer.cancel()

    def expected_wait(self, position: int) -> float:
        """Seconds until the ``position``-th in line (1: next) would get a slot, at the
        rate slots were given back lately; when no rate is known, the capped cold guess
        (module docstring)."""
        now = self._clock()
        recent = [at for at in self._given_back if now - at <= SERVICE_WINDOW_SECONDS]
        if len(recent) < 2:
            guess = position * COLD_SERVICE_SECONDS / self._max_in_flight
            return min(guess, COLD_CAP_SECONDS, self._timeout)
        # The slots given back after the oldest sample, over the time since it (to now: a
        # pause since the last one lowers the rate).
        return position * max(now - recent[0], 1e-3) / (len(recent) - 1)

    def release(self) -> None:
        """Give a slot back: to the fairest waiter if any, else to the pool."""
        self._given_back.append(self._clock())
        while self._queued:
            waiter = self._next()
            self._remove(waiter)
            if not waiter.future.done():
                self._vtime = waiter.start
                waiter.future.set_result(SlotResult.ACQUIRED)  # in_flight is unchanged
                return
        self._in_flight -= 1

    def _enqueue(self, user: str, weight: int) -> _Waiter:
        start = max(self._vtime, self._finish.get(user, 0.0))
        self._finish[user] = start + 1.0 / weight
        future: asyncio.Future[SlotResult] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(user, start, next(self._seq), future)
        self._queues.setdefault(user, collections.deque()).append(waiter)
        self._queued += 1
        return waiter

    def _next(self) -> _Waiter:
        heads = (queue[0] for queue in self._queues.values())
        return min(heads, key=lambda waiter: (waiter.start, waiter.seq))

    def _push_out(self, user: str, mine: int) -> bool:
        """Make room for ``user`` by refusing the newest waiter of the longest queue."""
        longest = max(self._queues, key=lambda other: len(self._queues[other]), default=None)
        if longest is None or longest == user or len(self._queues[longest]) <= mine + 1:
            return False
        victim = self._queues[longest][-1]
        self._finish[longest] = victim.start  # its place in the user's share is given back
        self._settle(victim, SlotResult.QUEUE_FULL)
        return True

    def _settle(self, waiter: _Waiter, result: SlotResult) -> None:
        if not waiter.future.done():
            waiter.future.set_result(result)
            self._remove(waiter)

    def _remove(self, waiter: _Waiter) -> None:
        queue = self._queues.get(waiter.user)
        if queue is None or waiter not in queue:
            return
        queue.remove(waiter)
        self._queued -= 1
        if not queue:
            del self._queues[waiter.user]
            if self._finish.get(waiter.user, 0.0) <= self._vtime:
                del self._finish[waiter.user]  # idle and not ahead: same as never seen
