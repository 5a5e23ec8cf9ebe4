"""Admission inside the SIMULATED engine: at most ``--max-running-requests`` run at once.

Why: SGLang's scheduler runs a bounded batch and queues the rest, and that queue is what
the gateway's own admission limits and the ``sglang:num_queue_reqs`` alert are about. The
simulator keeps the same shape — a FIFO of waiters behind a fixed number of slots — and
keeps the scheduler gauges current as requests enter, start and leave. It does not model
KV-pool pressure (no request is ever retracted); ``num_used_tokens`` is the sum of the
running requests' prompt and completion tokens, capped by the pool.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sparkllm_dev.sim.metrics import EngineMetrics


@dataclass(slots=True)
class RunningRequest:
    """Tokens one running request holds in the (simulated) KV pool."""

    tokens: int


class RequestSlots:
    """A FIFO semaphore that reports running/queued counts into the scheduler gauges."""

    def __init__(self, *, capacity: int, metrics: EngineMetrics) -> None:
        self._semaphore = asyncio.Semaphore(max(1, capacity))
        self._metrics = metrics
        self.running = 0
        self.queued = 0
        self.used_tokens = 0
        self._window_start = time.monotonic()
        self._window_tokens = 0
        self._throughput = 0.0

    def _publish(self) -> None:
        self._metrics.set_scheduler_state(
            running=self.running,
            queued=self.queued,
            used_tokens=min(self.used_tokens, self._metrics.max_total_num_tokens),
            throughput=self._throughput,
        )

    def record_generated(self, running: RunningRequest, tokens: int) -> None:
        """Count generated tokens toward ``gen_throughput`` (tokens/s over ~1 s windows)."""
        running.tokens += tokens
        self.used_tokens += tokens
        self._window_tokens += tokens
        elapsed = time.monotonic() - self._window_start
        if elapsed >= 1.0:
            self._throughput = round(self._window_tokens / elapsed, 2)
            self._window_start, self._window_tokens = time.monotonic(), 0
        self._publish()

    @asynccontextmanager
    async def slot(self, *, prompt_tokens: int) -> AsyncIterator[RunningRequest]:
        """Wait (queued) for a free slot, then hold it (running) for the body's duration."""
        self.queued += 1
        self._publish()
        try:
            await self._semaphore.acquire()
        finally:
            self.queued -= 1
        running = RunningRequest(tokens=prompt_tokens)
        self.running += 1
        self.used_tokens += prompt_tokens
        self._publish()
        try:
            yield running
        finally:
            self.running -= 1
            self.used_tokens -= running.tokens
            self._semaphore.release()
            self._publish()
