"""Coalesced, serialized reconcile passes per InferenceCluster.

Watch events arrive in bursts (a gang restart touches every rank pod several times); a
pass reads everything fresh, so one pass after a burst is as good as one per event.
Each cluster key has a lock (never two passes at once for one object) and a pending
flag (a request during a pass causes exactly one more pass after it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

Key = tuple[str, str]  # (namespace, name)
logger = logging.getLogger(__name__)


@dataclass
class Coalescer:
    """Run ``action(key)`` for requested keys, one at a time per key, merging requests."""

    action: Callable[[Key], Awaitable[None]]
    retry_delay: float = 5.0
    _locks: dict[Key, asyncio.Lock] = field(default_factory=dict)
    _pending: dict[Key, bool] = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _timers: dict[Key, asyncio.TimerHandle] = field(default_factory=dict)
    # Per key: the number of requests so far, and (requests covered, error) of the last
    # finished pass, so a waiter learns the outcome of the pass that covered it.
    _requested: dict[Key, int] = field(default_factory=dict)
    _finished: dict[Key, tuple[int, Exception | None]] = field(default_factory=dict)

    async def run(self, key: Key) -> None:
        """Request a pass and wait for one that started after the request; raise its error."""
        self._requested[key] = ticket = self._requested.get(key, 0) + 1
        self._pending[key] = True
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            covered, error = self._finished.get(key, (0, None))
            if covered >= ticket:  # a pass that started after our request already ran
                if error is not None:
                    raise error
                return
            self._pending[key] = False
            started_for = self._requested[key]
            try:
                await self.action(key)
            except Exception as exc:
                self._finished[key] = (started_for, exc)
                raise
            self._finished[key] = (started_for, None)

    def trigger(self, key: Key) -> None:
        """Request a pass in the background (from watch events and timers)."""
        if self._pending.get(key) and self._locks.get(key, asyncio.Lock()).locked():
            return  # a pass is queued behind the running one already
        task = asyncio.get_running_loop().create_task(self._background(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def trigger_later(self, key: Key, delay: float) -> None:
        """Request a pass after ``delay`` seconds (keeps the earliest of several requests)."""
        loop = asyncio.get_running_loop()
        existing = self._timers.get(key)
        due = loop.time() + delay
        if existing is not None and existing.when() <= due:
            return
        if existing is not None:
            existing.cancel()
        self._timers[key] = loop.call_at(due, self._fire, key)

    def _fire(self, key: Key) -> None:
        self._timers.pop(key, None)
        self.trigger(key)

    async def _background(self, key: Key) -> None:
        try:
            await self.run(key)
        except Exception:  # logged and retried: a watch-driven pass has no caller to tell
            logger.exception(
                "reconcile of %s/%s failed; retrying in %.0f s", *key, self.retry_delay
            )
            self.trigger_later(key, self.retry_delay)

    def forget(self, key: Key) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._pending.pop(key, None)
        self._requested.pop(key, None)
        self._finished.pop(key, None)
        lock = self._locks.get(key)
        if lock is not None and not lock.locked():
            self._locks.pop(key, None)
