"""The Coalescer: serialised, coalesced reconcile passes per cluster key.

Each test runs its own event loop with ``asyncio.run`` (no pytest-asyncio). Passes are
gated by ``asyncio.Event``s the test controls, so "during a pass" is a fact, not a
timing guess; waits poll to a generous deadline. Timer ordering is observed through
other keys' timers: asyncio fires timers in deadline order, so a sentinel scheduled
after the timers under test fires only once they all had their chance.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from sparkllm.reconcile.triggers import Coalescer, Key

A: Key = ("ns", "a")
B: Key = ("ns", "b")
SENTINEL: Key = ("ns", "sentinel")
MIDDLE: Key = ("ns", "middle")
DEADLINE_SECONDS = 10.0


async def until(check: Callable[[], bool], what: str) -> None:
    """Poll ``check`` to a deadline (yielding to the loop between looks)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_SECONDS
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


@dataclass
class Recorder:
    """An action that records each pass; a pass of a gated key waits for its gate."""

    passes: list[Key] = field(default_factory=list)
    finished: list[Key] = field(default_factory=list)
    running: dict[Key, int] = field(default_factory=dict)
    most_at_once: dict[Key, int] = field(default_factory=dict)
    gates: dict[Key, asyncio.Event] = field(default_factory=dict)
    failures: dict[Key, int] = field(default_factory=dict)  # key -> passes left to fail

    async def __call__(self, key: Key) -> None:
        self.passes.append(key)
        self.running[key] = self.running.get(key, 0) + 1
        self.most_at_once[key] = max(self.most_at_once.get(key, 0), self.running[key])
        try:
            gate = self.gates.get(key)
            if gate is not None:
                await gate.wait()
            else:
                await asyncio.sleep(0)
            if self.failures.get(key, 0) > 0:
                self.failures[key] -= 1
                raise RuntimeError(f"pass of {key} failed")
        finally:
            self.running[key] -= 1
            self.finished.append(key)

    def count(self, key: Key) -> int:
        return self.passes.count(key)

    def done(self, key: Key) -> int:
        return self.finished.count(key)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), timeout=DEADLINE_SECONDS * 2))


# --- serialisation and coalescing ----------------------------------------------------------


def test_passes_of_one_key_never_overlap() -> None:
    async def scenario() -> None:
        recorder = Recorder()
        coalescer = Coalescer(action=recorder)
        await asyncio.gather(*(coalescer.run(A) for _ in range(5)))
        for _ in range(5):
            coalescer.trigger(A)
        await until(lambda: recorder.running.get(A) == 0 and not coalescer._tasks, "idle")
        assert recorder.most_at_once[A] == 1
        assert recorder.count(A) >= 2

    run(scenario)


def test_requests_during_a_pass_cause_exactly_one_more_pass() -> None:
    async def scenario() -> None:
        recorder = Recorder(gates={A: asyncio.Event()})
        coalescer = Coalescer(action=recorder)
        first = asyncio.create_task(coalescer.run(A))
        await until(lambda: recorder.count(A) == 1, "the first pass to start")
        for _ in range(10):  # a burst of watch events while the pass runs
            coalescer.trigger(A)
        waiter = asyncio.create_task(coalescer.run(A))  # and a handler waiting for a pass
        await asyncio.sleep(0)
        assert recorder.count(A) == 1  # nothing overlaps the running pass
        recorder.gates[A].set()
        await asyncio.gather(first, waiter)
        await until(lambda: not coalescer._tasks, "background requests to settle")
        assert recorder.count(A) == 2
        assert recorder.most_at_once[A] == 1

    run(scenario)


def test_a_request_waits_for_a_pass_that_started_after_it() -> None:
    async def scenario() -> None:
        seen: list[int] = []
        version = 0
        gate = asyncio.Event()

        async def action(key: Key) -> None:
            seen.append(version)  # what this pass reads
            await gate.wait()

        coalescer = Coalescer(action=action)
        first = asyncio.create_task(coalescer.run(A))
        await until(lambda: seen == [0], "the first pass")
        version = 1  # changed after the first pass read it
        second = asyncio.create_task(coalescer.run(A))
        await asyncio.sleep(0)
        gate.set()
        await first
        await second
        assert seen == [0, 1]  # the second request did not return on the stale pass

    run(scenario)


def test_a_burst_before_any_pass_is_coalesced() -> None:
    async def scenario() -> None:
        recorder = Recorder()
        coalescer = Coalescer(action=recorder)
        for _ in range(20):
            coalescer.trigger(A)
        await until(lambda: not coalescer._tasks, "the burst to settle")
        assert 1 <= recorder.count(A) <= 2

    run(scenario)


def test_different_keys_run_concurrently() -> None:
    async def scenario() -> None:
        a_started, b_started = asyncio.Event(), asyncio.Event()

        async def action(key: Key) -> None:
            # Each key's pass waits until the other key's pass has started: only
            # possible if the two run at the same time.
            mine, other = (a_started, b_started) if key == A else (b_started, a_started)
            mine.set()
            await other.wait()

        coalescer = Coalescer(action=action)
        await asyncio.wait_for(
            asyncio.gather(coalescer.run(A), coalescer.run(B)), timeout=DEADLINE_SECONDS
        )

    run(scenario)


# --- errors and retries -------------------------------------------------------------------


def test_run_raises_the_error_of_its_pass() -> None:
    async def scenario() -> None:
        recorder = Recorder(failures={A: 1})
        coalescer = Coalescer(action=recorder)
        with pytest.raises(RuntimeError, match="failed"):
            await coalescer.run(A)
        await coalescer.run(A)  # the key is usable again
        assert recorder.count(A) == 2

    run(scenario)


def test_a_failed_background_pass_is_logged_and_retried(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        recorder = Recorder(failures={A: 2})
        coalescer = Coalescer(action=recorder, retry_delay=0.01)
        coalescer.trigger(A)
        await until(lambda: recorder.done(A) == 3, "two retries after two failures")
        await until(lambda: not coalescer._tasks, "the last pass to finish")
        assert recorder.failures[A] == 0

    with caplog.at_level(logging.ERROR, logger="sparkllm.reconcile.triggers"):
        run(scenario)
    failures = [r for r in caplog.records if "failed; retrying" in r.getMessage()]
    assert len(failures) == 2
    assert failures[0].getMessage() == "reconcile of ns/a failed; retrying in 0 s"
    assert failures[0].exc_info is not None


def test_run_raises_when_the_pass_it_waited_for_failed() -> None:
    async def scenario() -> None:
        gate = asyncio.Event()
        passes: list[int] = []

        async def action(key: Key) -> None:
            passes.append(len(passes) + 1)
            if len(passes) == 1:
                await gate.wait()  # the first pass succeeds once released
                return
            raise RuntimeError("second pass failed")

        coalescer = Coalescer(action=action, retry_delay=60)
        first = asyncio.create_task(coalescer.run(A))
        await until(lambda: passes == [1], "the first pass")
        coalescer.trigger(A)  # a watch event: its background request queues first
        await asyncio.sleep(0)
        waiter = asyncio.create_task(coalescer.run(A))  # the kopf handler's request
        await asyncio.sleep(0)
        gate.set()
        await first
        try:
            with pytest.raises(RuntimeError, match="second pass failed"):
                await waiter
            assert passes == [1, 2]  # the failed pass started after the handler's request
        finally:
            coalescer.forget(A)

    run(scenario)


# --- timers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "delays",
    [pytest.param((0.02, 0.2), id="earlier-first"), pytest.param((0.2, 0.02), id="later-first")],
)
def test_trigger_later_keeps_the_earliest(delays: tuple[float, float]) -> None:
    async def scenario() -> None:
        recorder = Recorder()
        coalescer = Coalescer(action=recorder)
        for delay in delays:
            coalescer.trigger_later(A, delay)
        coalescer.trigger_later(MIDDLE, 0.1)
        coalescer.trigger_later(SENTINEL, 0.3)
        await until(lambda: recorder.count(SENTINEL) == 1, "the sentinel pass")
        # One pass of A, at the earlier deadline (before MIDDLE's), none at the later one.
        assert recorder.passes == [A, MIDDLE, SENTINEL]

    run(scenario)


def test_forget_cancels_a_pending_timer() -> None:
    async def scenario() -> None:
        recorder = Recorder()
        coalescer = Coalescer(action=recorder)
        coalescer.trigger_later(A, 0.05)
        coalescer.trigger_later(SENTINEL, 0.15)
        coalescer.forget(A)
        await until(lambda: recorder.count(SENTINEL) == 1, "the sentinel pass")
        assert recorder.passes == [SENTINEL]
        coalescer.trigger_later(A, 0.01)  # a forgotten key can be requested again
        await until(lambda: recorder.count(A) == 1, "a pass after forget")

    run(scenario)


def test_a_timer_fires_once() -> None:
    async def scenario() -> None:
        recorder = Recorder()
        coalescer = Coalescer(action=recorder)
        coalescer.trigger_later(A, 0.01)
        await until(lambda: recorder.count(A) == 1, "the timed pass")
        coalescer.trigger_later(SENTINEL, 0.1)
        await until(lambda: recorder.count(SENTINEL) == 1, "the sentinel pass")
        assert recorder.count(A) == 1
        coalescer.trigger_later(A, 0.01)  # after firing, a new request schedules anew
        await until(lambda: recorder.count(A) == 2, "the second timed pass")

    run(scenario)
