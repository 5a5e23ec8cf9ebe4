"""Two gateway processes on one Redis never overshoot a user's budget or the global slots.

Issue 17: "concurrent requests of one user can never overshoot the budget", "the total
in flight across replicas never exceeds admission.maxConcurrentRequests" — and the same
against a real Redis with two gateway processes. Each example below runs two worker
*processes* (spawned, each with its own RedisStore and connection pool, started together
on a barrier), each sending many concurrent requests of one user, settling each with a
random use at most its grant, while taking and releasing global slots. Hypothesis picks
the budget, sizes, minimum and limits. Afterwards the window holds exactly what was used
and never more than the budget, the ledger matches what the workers saw, and counters
each worker raised around its critical sections never passed the limits.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.managers import SyncManager
from typing import Any

import pytest
import redis.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkllm.gateway.governance.redis_store import RedisStore, parse_address
from sparkllm.gateway.governance.store import (
    Admit,
    AdmitRequest,
    TokenWindow,
    UserLimits,
    utc_day,
    window_start,
)
from sparkllm_dev.redis_fixture import RedisServer

USER = "heavy"
WORKERS = 2
SLOT_ATTEMPTS = 20_000


@dataclass(frozen=True)
class Workload:
    """What hypothesis varies: ``requests`` concurrent requests of USER per worker."""

    budget: int
    requests: int
    max_concurrent: int
    slots: int
    min_output: int
    seed: int


WORKLOADS = st.builds(
    Workload,
    budget=st.integers(min_value=200, max_value=5000),
    requests=st.integers(min_value=20, max_value=60),
    max_concurrent=st.integers(min_value=1, max_value=12),
    slots=st.integers(min_value=1, max_value=6),
    min_output=st.integers(min_value=1, max_value=50),
    seed=st.integers(min_value=0, max_value=2**31),
)


@dataclass(frozen=True)
class Job:
    """What one worker process does, and where."""

    address: str
    password: str
    prefix: str
    seed: int
    work: Workload
    now: float
    barrier: Any  # a Manager's Barrier proxy: both workers start together


@dataclass(frozen=True)
class Served:
    input_tokens: int
    requested: int
    granted: int
    output_tokens: int


@dataclass(frozen=True)
class Report:
    pid: int
    served: list[Served]
    refused: int
    most_in_progress: int  # the user's requests between admit and settle, seen by INCR
    most_in_flight: int  # holders of a global slot, seen by INCR


def hammer(job: Job) -> Report:
    """One gateway process (runs in a spawned worker)."""
    job.barrier.wait(timeout=60)
    return asyncio.run(_hammer(job))


async def _hammer(job: Job) -> Report:
    store = RedisStore.connect(job.address, password=job.password, key_prefix=job.prefix)
    host, port = parse_address(job.address)
    probe = redis.asyncio.Redis(host=host, port=port, password=job.password)
    rng = random.Random(job.seed)
    limits = UserLimits(
        max_concurrent_requests=job.work.max_concurrent,
        token_windows=(TokenWindow("hour", 3600, job.work.budget),),
    )
    seen = {"progress": 0, "flight": 0}

    async def critical(name: str, key: str) -> None:
        seen[name] = max(seen[name], int(await probe.incr(f"{job.prefix}:probe:{key}")))
        await asyncio.sleep(rng.random() * 0.004)
        await probe.decr(f"{job.prefix}:probe:{key}")

    async def one(number: int) -> Served | None:
        request = AdmitRequest(
            user=USER,
            input_tokens=rng.randint(1, job.work.budget // 4),
            requested_output_tokens=rng.randint(1, job.work.budget // 2),
            min_output_tokens=job.work.min_output,
            limits=limits,
            now=job.now,
        )
        admitted = await store.admit(request)
        if not isinstance(admitted, Admit):
            return None
        await critical("progress", "user")
        holder = f"local:{number}"
        for _ in range(SLOT_ATTEMPTS):
            if await store.acquire_slot(holder, limit=job.work.slots):
                break
            await asyncio.sleep(0.001)
        else:
            raise AssertionError(f"no global slot freed up in {SLOT_ATTEMPTS} attempts")
        await critical("flight", "slots")
        await store.release_slot(holder)
        output = rng.randint(0, admitted.granted_output_tokens)
        await store.settle(
            admitted.ticket,
            input_tokens=request.input_tokens,
            output_tokens=output,
            outcome="ok",
            now=job.now,
        )
        return Served(
            request.input_tokens,
            request.requested_output_tokens,
            admitted.granted_output_tokens,
            output,
        )

    try:
        results = await asyncio.gather(*(one(n) for n in range(job.work.requests)))
    finally:
        await store.aclose()
        await probe.aclose()
    served = [result for result in results if result is not None]
    return Report(
        pid=os.getpid(),
        served=served,
        refused=len(results) - len(served),
        most_in_progress=seen["progress"],
        most_in_flight=seen["flight"],
    )


@pytest.fixture(scope="module")
def workers() -> Iterator[tuple[ProcessPoolExecutor, SyncManager]]:
    context = get_context("spawn")
    with (
        context.Manager() as manager,
        ProcessPoolExecutor(max_workers=WORKERS, mp_context=context) as pool,
    ):
        yield pool, manager


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(work=WORKLOADS)
def test_two_gateway_processes_never_overshoot(
    redis_server: RedisServer,
    workers: tuple[ProcessPoolExecutor, SyncManager],
    work: Workload,
) -> None:
    pool, manager = workers
    prefix = f"sparkllm-test:shared-{work.seed}-{time.monotonic_ns()}"
    now = time.time()
    barrier = manager.Barrier(WORKERS)  # type: ignore[attr-defined]
    jobs = [
        Job(
            address=redis_server.address,
            password=redis_server.password,
            prefix=prefix,
            seed=work.seed + worker,
            work=work,
            now=now,
            barrier=barrier,
        )
        for worker in range(WORKERS)
    ]
    reports = [future.result(timeout=120) for future in [pool.submit(hammer, j) for j in jobs]]

    assert len({report.pid for report in reports}) == WORKERS  # two processes, really
    served = [one for report in reports for one in report.served]
    used = sum(one.input_tokens + one.output_tokens for one in served)
    with redis_server.client() as client:
        window = int(client.get(f"{prefix}:tokens:hour:{window_start(now, 3600)}:{USER}") or 0)
    assert used <= work.budget
    assert window == used  # every reservation settled to exactly what was used
    # Lowered to what the window allows, never below the minimum (unless asked for less).
    assert all(one.granted == one.requested or one.granted >= work.min_output for one in served)
    assert all(one.granted <= one.requested for one in served)
    assert all(r.most_in_progress <= work.max_concurrent for r in reports)
    assert all(r.most_in_flight <= work.slots for r in reports)
    # The control: the demand really exceeded what the budget or the limits allowed.
    assert served
    assert sum(report.refused for report in reports) > 0

    rows = asyncio.run(_usage(redis_server, prefix, now))
    assert [(r.user, dict(r.requests), r.input_tokens, r.output_tokens) for r in rows] == [
        (
            USER,
            {"ok": len(served)},
            sum(one.input_tokens for one in served),
            sum(one.output_tokens for one in served),
        )
    ]


async def _usage(server: RedisServer, prefix: str, now: float) -> list[Any]:
    store = RedisStore.connect(server.address, password=server.password, key_prefix=prefix)
    try:
        return await store.usage(day_from=utc_day(now), day_to=utc_day(now))
    finally:
        await store.aclose()
