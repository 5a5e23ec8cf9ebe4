"""Concurrency limit in front of the engine: N in flight; waiters served fairly by tokens.

Why here as well as in the router: the documents' measurements show the pipeline
degrades sharply past 8 concurrent requests (TTFT p95 25 s at C8 vs 5 s at C4), and a
request the gateway refuses costs nothing downstream. A bounded queue absorbs bursts;
past it, or after ``timeout`` seconds of waiting, the client gets 429 with Retry-After
instead of an unbounded wait.

Fair by tokens (issue 29; issue 17 made it fair by slots): when slots are short, a freed
slot goes to the waiting user who has been *served least* lately — least attained
service, as llm-d's flow control orders its queues. A user's service is the tokens the
engine worked on for them, each output token counted ``OUTPUT_TOKEN_COST`` times a
prompt token, divided by the user's weight, and decayed exponentially with a half-life
of ``DECAY_HALF_LIFE_SECONDS``. Why tokens, not slots: one slot given to an 8K-token
prompt is ~40 times the engine's work of one given to a 200-token prompt, so sharing
slots in turn gave the long-prompt user ~40 times the engine. Why decay: service long
past (an hour-old batch) must not lock a user out now, and a user who was idle comes
back at the head of the line, not with credit saved up — a decayed sum forgets at a
known rate (after 5 half-lives, 3%), while a sum reset at window edges would lurch.

When it is charged: a request's prompt when it is given a slot (``acquire``,
``try_acquire``: the slot's holder starts being served), its output (and the prompt's
exact count, when the slot was charged the admission's byte bound) when it settles
(``charge``, from the answer's usage). So a user with eight long prompts in flight is
charged for them at once, and nobody is charged output that was never made.

Why ``OUTPUT_TOKEN_COST`` is 4: a prompt token is prefilled with the whole prompt in a
few forward passes (compute-bound), an output token costs a decode step of its own that
reads the weights and the KV cache for one token per sequence (memory-bound). DeepSeek's
published inference figures (V3/R1 inference system overview, 2025-03) give 73.7k
prompt tokens/s per H800 node in prefill against 14.8k output tokens/s in decode (~5x,
the prefill side counting cache hits), and its API prices output at ~4x input
(USD 1.10 vs 0.27 per million, cache miss); OpenAI's and Anthropic's price lists say 4-5x
too. We take the lower, rounder 4: erring low keeps a long-prompt user from being
undercharged, the case this order is for.

Priorities (``Priority``): every request is ``interactive`` (the default) or ``batch``.
A freed slot goes to an interactive waiter first; batch waiters are served among
themselves by the same order, and never hold more than ``max_in_flight -
reserved_slots`` slots (``reserved_slots``, the policy's ``reservedInteractiveSlots``:
slots an interactive request finds free even while batch work is queued). A batch request
*yields before its first byte*: while it waits in the queue, every interactive request
goes ahead of it, and a slot it could take is left free when it is one of the reserved.
It is never stopped once relayed (the engine has begun its prefill; docs/governance.md).

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

Per replica: this order lives in each gateway's process. With several gateway replicas
(a shared Redis store), the global slots, budgets and the ledger are shared, while each
replica orders its own waiters by the service it gave — a user spread over two replicas
is ordered by each on what that replica served (docs/governance.md, "Shared state").

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
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

SERVICE_SAMPLES: Final = 32  # slots given back that the service rate is measured over
SERVICE_WINDOW_SECONDS: Final = 60.0  # older ones say nothing of the rate now
COLD_SERVICE_SECONDS: Final = 20.0  # a slot's assumed hold while no rate is known
COLD_CAP_SECONDS: Final = 10.0  # the most a guess (no rate known) tells a client to wait
OUTPUT_TOKEN_COST: Final = 4.0  # an output token's engine cost in prompt tokens (docstring)
DECAY_HALF_LIFE_SECONDS: Final = 60.0  # attained service halves every minute
_FORGOTTEN: Final = 0.5  # below this (under a token), a user with nothing queued is dropped


class SlotResult(enum.Enum):
    """Outcome of asking for a slot."""

    ACQUIRED = "acquired"
    QUEUE_FULL = "queue_full"  # the gateway's queue is full (or this waiter was pushed out)
    USER_QUEUE_FULL = "user_queue"  # the user's own bound
    TIMED_OUT = "timed_out"


class Priority(enum.StrEnum):
    """A request's class: interactive goes first and has slots of its own."""

    INTERACTIVE = "interactive"
    BATCH = "batch"


class Measure(enum.Enum):
    """What the order counts as service: tokens (the gateway's), or requests (a slot
    each: the former order, kept to measure against in the benchmark)."""

    TOKENS = "tokens"
    REQUESTS = "requests"


@dataclass(slots=True, eq=False)  # identity: a waiter is itself, not its fields
class _Waiter:
    user: str
    priority: Priority
    weight: int
    input_tokens: int  # charged when it is given a slot
    seq: int
    future: asyncio.Future[SlotResult] = field(repr=False)


@dataclass(slots=True)
class _Service:
    value: float  # weighted service units, decayed to ``at``
    at: float


class ConcurrencyLimiter:
    """At most ``max_in_flight`` holders; waiters served by least attained service."""

    def __init__(
        self,
        *,
        max_in_flight: int,
        queue_size: int,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
        measure: Measure = Measure.TOKENS,
        half_life: float = DECAY_HALF_LIFE_SECONDS,
    ) -> None:
        if max_in_flight < 1 or queue_size < 0 or timeout <= 0 or half_life <= 0:
            raise ValueError(
                "max_in_flight >= 1, queue_size >= 0, timeout > 0 and half_life > 0 required"
            )
        self._max_in_flight = max_in_flight
        self._queue_size = queue_size
        self._timeout = timeout
        self.measure = measure  # what counts as service (the benchmark compares both)
        self._decay = math.log(2) / half_life
        self._in_flight = 0
        self._batch_in_flight = 0
        self._reserved = 0
        self._queued = 0
        self._queues: dict[str, collections.deque[_Waiter]] = {}
        self._service: dict[str, _Service] = {}
        self._seq = itertools.count()
        self._clock = clock
        self._given_back: collections.deque[float] = collections.deque(maxlen=SERVICE_SAMPLES)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def queued(self) -> int:
        return self._queued

    @property
    def reserved_slots(self) -> int:
        return self._reserved

    def reserve(self, slots: int) -> None:
        """Keep ``slots`` for interactive requests (at most all but one: batch is never
        locked out); a change applies to the next slot given."""
        self._reserved = max(0, min(slots, self._max_in_flight - 1))
        self._dispatch()  # fewer reserved: batch waiters may go now

    def queued_for(self, user: str) -> int:
        queue = self._queues.get(user)
        return 0 if queue is None else len(queue)

    def attained(self, user: str) -> float:
        """``user``'s weighted service now (decayed): what the order compares."""
        entry = self._service.get(user)
        return 0.0 if entry is None else self._decayed(entry, self._clock())

    def try_acquire(
        self,
        user: str = "",
        *,
        weight: int = 1,
        input_tokens: int = 0,
        priority: Priority = Priority.INTERACTIVE,
    ) -> bool:
        """Take a free slot without waiting (nobody ahead); ``release`` it after True."""
        if not self._free_for(priority) or self._ahead(priority):
            return False
        self._take(user, weight=weight, input_tokens=input_tokens, priority=priority)
        return True

    async def acquire(
        self,
        user: str = "",
        *,
        weight: int = 1,
        input_tokens: int = 0,
        max_queued: int | None = None,
        priority: Priority = Priority.INTERACTIVE,
    ) -> SlotResult:
        """Take a slot, waiting in ``user``'s queue if needed; ``release`` after ACQUIRED."""
        if self.try_acquire(user, weight=weight, input_tokens=input_tokens, priority=priority):
            return SlotResult.ACQUIRED
        mine = self.queued_for(user)
        if max_queued is not None and mine >= max_queued:
            return SlotResult.USER_QUEUE_FULL
        if self._queued >= self._queue_size and not self._push_out(user, mine):
            return SlotResult.QUEUE_FULL
        future: asyncio.Future[SlotResult] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(user, priority, weight, input_tokens, next(self._seq), future)
        self._queues.setdefault(user, collections.deque()).append(waiter)
        self._queued += 1
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self._timeout, self._settle, waiter, SlotResult.TIMED_OUT)
        try:
            return await waiter.future
        except asyncio.CancelledError:
            future = waiter.future
            if future.done() and not future.cancelled() and future.result() is SlotResult.ACQUIRED:
                self.release(waiter.priority)  # handed a slot as we were cancelled: pass it on
            else:
                self._remove(waiter)
            raise
        finally:
            timer.cancel()

    def charge(
        self,
        user: str,
        *,
        weight: int = 1,
        input_tokens: int = 0,
        output_tokens: int = 0,
        requests: int = 0,
    ) -> None:
        """Add to ``user``'s service (negative: give back what was charged too much)."""
        if self.measure is Measure.REQUESTS:
            units = float(requests)
        else:
            units = input_tokens + OUTPUT_TOKEN_COST * output_tokens
        if not units:
            return
        now = self._clock()
        entry = self._service.get(user)
        value = units / weight + (0.0 if entry is None else self._decayed(entry, now))
        self._service[user] = _Service(max(value, 0.0), now)

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

    def release(self, priority: Priority = Priority.INTERACTIVE) -> None:
        """Give a slot (taken as ``priority``) back: to the waiter served least, if any."""
        self._given_back.append(self._clock())
        self._in_flight -= 1
        if priority is Priority.BATCH:
            self._batch_in_flight -= 1
        self._dispatch()

    def _free_for(self, priority: Priority) -> bool:
        if self._in_flight >= self._max_in_flight:
            return False
        if priority is Priority.BATCH:
            return self._batch_in_flight < self._max_in_flight - self._reserved
        return True

    def _ahead(self, priority: Priority) -> bool:
        """Whether a waiter would be served before a newcomer of ``priority``."""
        if priority is Priority.BATCH:
            return self._queued > 0
        return any(q[0].priority is Priority.INTERACTIVE for q in self._queues.values())

    def _take(self, user: str, *, weight: int, input_tokens: int, priority: Priority) -> None:
        self._in_flight += 1
        if priority is Priority.BATCH:
            self._batch_in_flight += 1
        self.charge(user, weight=weight, input_tokens=input_tokens, requests=1)

    def _dispatch(self) -> None:
        """Hand free slots to the waiters the order picks, while any may take one."""
        while self._queued:
            waiter = self._next()
            if waiter is None:
                return
            self._remove(waiter)
            if not waiter.future.done():
                self._take(
                    waiter.user,
                    weight=waiter.weight,
                    input_tokens=waiter.input_tokens,
                    priority=waiter.priority,
                )
                waiter.future.set_result(SlotResult.ACQUIRED)
        self._forget()

    def _next(self) -> _Waiter | None:
        """The head of the queue of the least-served user whose class may take a free
        slot: interactive before batch, then least attained service, then arrival."""
        now = self._clock()
        best: _Waiter | None = None
        best_key = (True, 0.0, 0)
        for user, queue in self._queues.items():
            head = queue[0]
            if not self._free_for(head.priority):
                continue
            entry = self._service.get(user)
            served = 0.0 if entry is None else self._decayed(entry, now)
            key = (head.priority is Priority.BATCH, served, head.seq)
            if best is None or key < best_key:
                best, best_key = head, key
        return best

    def _decayed(self, entry: _Service, now: float) -> float:
        return entry.value * math.exp(-self._decay * max(now - entry.at, 0.0))

    def _forget(self) -> None:
        """Drop users served so long ago that they count as never seen (bounded state)."""
        if len(self._service) <= len(self._queues) + self._max_in_flight:
            return
        now = self._clock()
        for user in [u for u, e in self._service.items() if u not in self._queues]:
            if self._decayed(self._service[user], now) < _FORGOTTEN:
                del self._service[user]

    def _push_out(self, user: str, mine: int) -> bool:
        """Make room for ``user`` by refusing the newest waiter of the longest queue."""
        longest = max(self._queues, key=lambda other: len(self._queues[other]), default=None)
        if longest is None or longest == user or len(self._queues[longest]) <= mine + 1:
            return False
        self._settle(self._queues[longest][-1], SlotResult.QUEUE_FULL)
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
