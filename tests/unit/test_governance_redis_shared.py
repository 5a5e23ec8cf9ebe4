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

The second property runs the same through each process's *governor* (gate.py), the
path the gateway takes: the budget and the global slot in one script when a local slot
is free, the two-step path when it must queue or every global slot is taken, global
slots handed from one local request to the next (spares), settle and release in one
script; some clients leave before asking for their slot. Afterwards, besides the above,
no global slot and no local one is left held.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.managers import SyncManager
from typing import Any

import pytest
import redis.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from sparkllm.gateway.admission import Admitted
from sparkllm.gateway.governance.gate import Governor
from sparkllm.gateway.governance.meter import Used
from sparkllm.gateway.governance.policy import Policy
from sparkllm.gateway.governance.redis_store import RedisStore, parse_address
from sparkllm.gateway.governance.store import (
    Admit,
    AdmitRequest,
    TokenWindow,
    UserLimits,
    utc_day,
    window_start,
)
from sparkllm.gateway.limits import ConcurrencyLimiter
from sparkllm.gateway.metrics import UserMetrics
from sparkllm.gateway.replies import ErrorReply
from sparkllm_dev.redis_fixture import RedisServer

USER = "heavy"
WORKERS = 2
SLOT_ATTEMPTS = 20_000
SETTINGS: Any = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture]}


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
    return _report(results, seen)


def govern(job: Job) -> Report:
    """One gateway process's governor (runs in a spawned worker)."""
    job.barrier.wait(timeout=60)
    return asyncio.run(_govern(job))


async def _govern(job: Job) -> Report:
    work, rng = job.work, random.Random(job.seed)
    store = RedisStore.connect(job.address, password=job.password, key_prefix=job.prefix)
    governor = Governor(
        store=store,
        limiter=ConcurrencyLimiter(max_in_flight=work.slots, queue_size=work.requests, timeout=60),
        metrics=UserMetrics(CollectorRegistry()),
        policy=None,
        max_in_flight=work.slots,  # each replica's local bound is the global one, as deployed
        queue_timeout=60,
        replica=f"r{job.seed}",
        clock=lambda: job.now,  # one hour window for the whole run, whatever the wall clock
    )
    policy = Policy.parse(
        f"minOutputTokens: {work.min_output}\n"
        f"defaults: {{tokensPerHour: {work.budget}, maxConcurrentRequests: {work.max_concurrent}}}"
    )
    host, port = parse_address(job.address)
    probe = redis.asyncio.Redis(host=host, port=port, password=job.password)
    seen = {"progress": 0, "flight": 0}

    async def enter(name: str) -> None:
        seen[name] = max(seen[name], int(await probe.incr(f"{job.prefix}:probe:{name}")))
        await asyncio.sleep(rng.random() * 0.004)

    async def one(_number: int) -> Served | None:
        await asyncio.sleep(rng.random() * 0.05)  # arrivals spread, as clients come and go
        # Small requests, so that many are admitted together and the slots are contended.
        input_tokens, requested = (
            rng.randint(1, work.budget // 40),
            rng.randint(1, work.budget // 20),
        )
        body = json.dumps({"model": "m", "prompt": "p", "max_tokens": requested}).encode()
        decision = Admitted(body, input_tokens, True, requested, stream=False)
        granted = await governor.admit(USER, decision, policy=policy)
        if isinstance(granted, ErrorReply):
            assert granted.status == 429, granted
            return None
        await enter("progress")
        output = 0
        if rng.random() < 0.9:  # else the client leaves before asking for its slot
            holder = await governor.wait_for_slot(granted, _never_disconnects)
            assert isinstance(holder, str), holder
            await enter("flight")
            await probe.decr(f"{job.prefix}:probe:flight")
            await governor.release(holder)
            output = rng.randint(0, granted.reserved_output)
        await probe.decr(f"{job.prefix}:probe:progress")
        await governor.finish(granted, used=Used(input_tokens, output, measured=True), outcome="ok")
        return Served(input_tokens, requested, granted.reserved_output, output)

    try:
        results = await asyncio.gather(*(one(n) for n in range(work.requests)))
        assert governor.limiter.in_flight == 0  # every local slot given back
    finally:
        await store.aclose()
        await probe.aclose()
    return _report(results, seen)


async def _never_disconnects() -> dict[str, Any]:
    await asyncio.Event().wait()
    return {}


def _report(results: list[Served | None], seen: dict[str, int]) -> Report:
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


@settings(max_examples=8, **SETTINGS)
@given(work=WORKLOADS)
def test_two_gateway_processes_never_overshoot(
    redis_server: RedisServer,
    workers: tuple[ProcessPoolExecutor, SyncManager],
    work: Workload,
) -> None:
    _check_two_processes(redis_server, workers, work, serve=hammer)


@settings(max_examples=6, **SETTINGS)
@given(work=WORKLOADS)
def test_two_governors_never_overshoot_and_leave_no_slot_held(
    redis_server: RedisServer,
    workers: tuple[ProcessPoolExecutor, SyncManager],
    work: Workload,
) -> None:
    prefix = _check_two_processes(redis_server, workers, work, serve=govern)
    with redis_server.client() as client:
        assert client.zcard(f"{prefix}:slots") == 0  # every global slot released, spares too
        assert client.zcard(f"{prefix}:leases") == 0
        assert not client.exists(f"{prefix}:busy:{USER}")


def _check_two_processes(
    redis_server: RedisServer,
    workers: tuple[ProcessPoolExecutor, SyncManager],
    work: Workload,
    *,
    serve: Callable[[Job], Report],
) -> str:
    """Run ``serve`` in two processes on one prefix; check what they did (the prefix)."""
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
    reports = [future.result(timeout=120) for future in [pool.submit(serve, j) for j in jobs]]

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
    return prefix


async def _usage(server: RedisServer, prefix: str, now: float) -> list[Any]:
    store = RedisStore.connect(server.address, password=server.password, key_prefix=prefix)
    try:
        return await store.usage(day_from=utc_day(now), day_to=utc_day(now))
    finally:
        await store.aclose()
