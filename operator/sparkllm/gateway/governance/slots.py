"""A request's two slots — the local fair queue's and the global one — with few round trips.

Why its own module: the local slot (limits.py, fair by user) bounds this gateway and the
global slot (the store's) bounds every replica together at ``maxConcurrentRequests``;
each request takes both before it is relayed and gives both back, whatever happens. With
a shared store every global-slot step is a round trip (~0.15 ms to a Redis next door),
so this keeper takes and gives them back with as few as it can:

* at admission, when a local slot is free at once (nobody queued), the governor takes it
  and asks the store for the budget *and* the global slot in one call (``ask``); the
  slots taken are kept under the ticket until ``wait`` hands them out. A request that
  must queue, or finds every global slot taken then, asks for the global slot once it
  has its local one (``claim``; polled until the queue timeout);
* after the relay, ``release`` gives the local slot back at once but keeps the global
  one as a *spare* until ``finishing``, whose holder the store releases in the same call
  that settles the budget. A request of this replica handed the local slot meanwhile
  takes the spare instead of asking (``store.holds`` vouches its lease is still good).

Spares never outnumber the requests between ``release`` and ``finishing`` (each
``finishing`` takes one if there is one, and only ``claim`` takes one for a request,
which gives it back by its own ``release``), so none is kept once the gateway is idle.
Slots ``ask`` took and no one came for are given back by ``finishing``.

A local slot is taken as its request's class (limits.py: batch may not take the slots
reserved for interactive requests), so the keeper remembers each holder's class and
gives the slot back as that class.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time

from sparkllm.errors import GovernanceStoreError
from sparkllm.gateway.asgi import Receive, wait_for_disconnect
from sparkllm.gateway.governance import replies
from sparkllm.gateway.governance.store import GovernanceStore, Limit, SlotRequest
from sparkllm.gateway.limits import ConcurrencyLimiter, Priority, SlotResult
from sparkllm.gateway.metrics import UserMetrics
from sparkllm.gateway.replies import ErrorReply

GLOBAL_SLOT_POLL_SECONDS = 0.05  # how often a request holding a local slot retries the global
_QUEUE_LIMITS = {
    SlotResult.QUEUE_FULL: Limit.QUEUE_FULL,
    SlotResult.USER_QUEUE_FULL: Limit.USER_QUEUE,
    SlotResult.TIMED_OUT: Limit.QUEUE_TIMEOUT,
}


class SlotKeeper:
    """Local and global slots of this gateway's requests; see the module docstring."""

    def __init__(
        self,
        *,
        store: GovernanceStore,
        limiter: ConcurrencyLimiter,
        metrics: UserMetrics,
        max_in_flight: int,
        queue_timeout: float,
        replica: str,
    ) -> None:
        self.store = store
        self.limiter = limiter
        self.metrics = metrics
        self._max_in_flight = max_in_flight
        self._queue_timeout = queue_timeout
        self._replica = replica
        self._holders = itertools.count(1)
        # Ticket -> what admission took for it: a local slot (of a class) and the global
        # slot's holder (None: the global slot is still to take). Handed out by wait().
        self._early: dict[str, tuple[str | None, Priority]] = {}
        self._classes: dict[str, Priority] = {}  # holder -> the class its local slot has
        self._spares: list[str] = []  # global slots released locally, not yet in the store

    def ask(self) -> SlotRequest:
        """Holding a free local slot: the global slot to ask for with the admission.

        Never a spare: asking costs no trip of its own, and a spare lent to an admission
        that is then refused would come back after the ``finishing`` meant to release it.
        """
        return SlotRequest(self._new_holder(), self._max_in_flight)

    def keep(self, ticket: str, holder: str | None, priority: Priority) -> None:
        """Admitted holding a local slot (and ``holder``'s global one): kept for wait()."""
        self._early[ticket] = (holder, priority)

    async def wait(
        self,
        *,
        ticket: str,
        user: str,
        weight: int,
        max_queued: int | None,
        receive: Receive,
        input_tokens: int = 0,
        priority: Priority = Priority.INTERACTIVE,
    ) -> str | ErrorReply | None:
        """A slot's holder id, the 429, or None if the client disconnects first."""
        if ticket in self._early:  # admission took the local slot (and the global one)
            holder, priority = self._early.pop(ticket)
            if holder is None:
                return await self.claim(user, priority=priority)
            self.metrics.waited(user, 0.0)
            self._classes[holder] = priority
            return holder
        taken = self.limiter.try_acquire(
            user, weight=weight, input_tokens=input_tokens, priority=priority
        )
        if taken:  # the common case, without a task
            return await self.claim(user, priority=priority)
        queued = self.queue(
            user, weight=weight, max_queued=max_queued, input_tokens=input_tokens, priority=priority
        )
        waiting = asyncio.ensure_future(queued)
        disconnect = asyncio.ensure_future(wait_for_disconnect(receive))
        try:
            await asyncio.wait((waiting, disconnect), return_when=asyncio.FIRST_COMPLETED)
        finally:
            disconnect.cancel()
            if not waiting.done():
                waiting.cancel()  # queue() gives back what it held meanwhile
                with contextlib.suppress(asyncio.CancelledError):
                    await waiting
        # A client gone just as a slot came is seen by the relay at once.
        return None if waiting.cancelled() else waiting.result()

    async def queue(
        self,
        user: str,
        *,
        weight: int,
        max_queued: int | None,
        input_tokens: int = 0,
        priority: Priority = Priority.INTERACTIVE,
    ) -> str | ErrorReply:
        """Wait for a local slot (fairly), then the global one: the holder id, or the 429.

        A caller cancelled meanwhile (the client left) gives back what it held.
        """
        waited_from = time.perf_counter()
        queued = await self.limiter.acquire(
            user, weight=weight, input_tokens=input_tokens, max_queued=max_queued, priority=priority
        )
        if queued is not SlotResult.ACQUIRED:
            limit = _QUEUE_LIMITS[queued]
            self.metrics.refused(user, reason=limit.value)
            return replies.queue_refused(limit, retry_after=self._retry_after())
        return await self.claim(user, priority=priority, waited_from=waited_from)

    async def claim(
        self, user: str, *, priority: Priority, waited_from: float | None = None
    ) -> str | ErrorReply:
        """Holding a local slot: take the global one (or give the local one back, 429)."""
        started = time.perf_counter() if waited_from is None else waited_from
        holder = self._take_spare()  # a global slot this replica just finished with
        if holder is None:
            holder = self._new_holder()
            try:
                acquired = await self._global_slot(holder, deadline=started + self._queue_timeout)
            except GovernanceStoreError as exc:
                self.limiter.release(priority)
                return replies.store_unavailable(str(exc))
            except BaseException:
                self.limiter.release(priority)
                raise
            if not acquired:
                self.limiter.release(priority)
                self.metrics.refused(user, reason=Limit.QUEUE_TIMEOUT.value)
                return replies.queue_refused(Limit.QUEUE_TIMEOUT, retry_after=self._retry_after())
        self.metrics.waited(user, time.perf_counter() - started)
        self._classes[holder] = priority
        return holder

    def release(self, holder: str) -> None:
        """Give the local slot back; the global one waits, a spare, for ``finishing``."""
        priority = self._classes.pop(holder, Priority.INTERACTIVE)
        self._spares.append(holder)  # before a waiter handed the local slot looks for it
        self.limiter.release(priority)

    def finishing(self, ticket: str) -> str | None:
        """At settlement: give back what admission kept for ``ticket`` and no one came
        for; the global holder to release with the settlement (a spare), if any."""
        if ticket in self._early:
            holder, priority = self._early.pop(ticket)
            self.limiter.release(priority)
            self._keep_spare(holder)
        return self._spares.pop() if self._spares else None

    def _retry_after(self) -> float:
        """When a newcomer would get a slot: behind everyone queued now (limits.py)."""
        return self.limiter.expected_wait(self.limiter.queued + 1)

    def _new_holder(self) -> str:
        return f"{self._replica}:{next(self._holders)}"

    def _take_spare(self) -> str | None:
        """A spare global slot whose lease is surely good, if there is one."""
        if self._spares and self.store.holds(self._spares[-1]):
            return self._spares.pop()
        return None

    def _keep_spare(self, holder: str | None) -> None:
        if holder is not None:
            self._spares.append(holder)

    async def _global_slot(self, holder: str, *, deadline: float) -> bool:
        while not await self.store.acquire_slot(holder, limit=self._max_in_flight):
            if time.perf_counter() >= deadline:
                return False
            await asyncio.sleep(GLOBAL_SLOT_POLL_SECONDS)
        return True


__all__ = ["GLOBAL_SLOT_POLL_SECONDS", "SlotKeeper"]
