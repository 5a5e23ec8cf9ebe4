"""Benchmark: what per-user governance costs, and what fair queuing gives a light user.

Not a pytest test (benchmarks report numbers, they never pass or fail). Run from the
repository root (about half a minute; no cluster needed):

    .venv/bin/python -m tests.bench.bench_governance [--runs 2000] [--seconds 6]

1. ``overhead``: the admission path at concurrency 1, in process (perf_counter), for a
   short chat (~256 prompt tokens, max_tokens 128), with and without a governance
   policy that sets token budgets, for the in-process store and for Redis (a
   ``redis-server`` started on loopback as the tests do; skipped, saying so, without
   one): the admission decision alone (the byte bound may spare the exact count); the
   decision plus governance's *admission path*, everything before the request would be
   relayed — the policy lookup, ``store.admit`` (the reservation; the byte bound is
   reserved when it leaves the requested output room, else the prompt is counted
   exactly) and the slot (free: no wait); and the *whole cycle*, which adds the release,
   reading ``usage`` from the answer and ``store.settle``. Printed: p50/p99 of each and
   the paired median of the per-run difference (the goal: governance adds at most 0.2 ms
   p50 to the admission path).
2. ``fairness``: a real gateway (uvicorn, 8 slots) in front of a stand-in engine that
   holds every request for ``SERVICE_SECONDS``: a heavy user keeps 16 requests in
   flight while a light user sends one at a time. Printed: both users' queue waits
   from the gateway's own ``sparkllm_gateway_user_queue_wait_seconds`` and client
   latencies, next to one slot turnover (the service time).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sparkllm.gateway.admission import Admitted, Route
from sparkllm.gateway.app import GatewayApp, build_gateway_app
from sparkllm.gateway.governance.meter import UsageMeter
from sparkllm.gateway.replies import ErrorReply
from sparkllm_dev.redis_fixture import RedisServer, start_redis_server
from tests.bench.common import percentile
from tests.unit.gateway_fixtures import (
    MODEL,
    TOKENIZER_CORPUS_WORD,
    gateway_config,
    histogram_by_label,
    read_request_body,
    running,
    train_tokenizer,
    write_keys,
    write_model_dir,
)

SERVICE_SECONDS = 0.25
WARM_UP_RUNS = 100  # not counted
HEAVY_CONCURRENCY = 16
SLOTS = 8
BUDGET_POLICY = "defaults: {tokensPerHour: 1000000000, tokensPerDay: 10000000000}\n"
USAGE = {"prompt_tokens": 256, "completion_tokens": 128, "total_tokens": 384}
ANSWER = json.dumps({"object": "chat.completion", "choices": [], "usage": USAGE}).encode()


def _body(max_tokens: int = 128) -> bytes:
    content = TOKENIZER_CORPUS_WORD * 240
    messages = [{"role": "user", "content": content}]
    return json.dumps({"model": MODEL, "messages": messages, "max_tokens": max_tokens}).encode()


def _app(
    workdir: Path,
    *,
    policy: str | None,
    upstream_url: str = "http://127.0.0.1:9",
    users: Sequence[str] = ("heavy", "light"),
    **overrides: Any,
) -> Any:
    """A gateway app of SLOTS slots for ``users`` (key ``key-<user>``); ``overrides``:
    more of its config (a Redis store, the queue)."""
    model = workdir / "model"
    if not model.exists():
        write_model_dir(model, train_tokenizer())
    keys = write_keys(workdir / "keys", {user: f"key-{user}" for user in users})
    settings: dict[str, Any] = {"max_concurrent_requests": SLOTS, "queue_size": 32, **overrides}
    if policy is not None:
        path = workdir / "policy.yaml"
        path.write_text(policy)
        settings["governance_policy_path"] = path
    config = gateway_config(model_dir=model, keys_dir=keys, upstream_url=upstream_url, **settings)
    return build_gateway_app(config)


@dataclass(frozen=True, slots=True)
class Cycle:
    """One request's governance cycle, timed from the decision on (seconds)."""

    admission: float  # decide + policy + admit + slot: the time before the request is relayed
    total: float  # + release, reading usage and settle: the whole cycle


async def _governed_path(app: GatewayApp, body: bytes) -> Cycle:
    """Everything a request's path does, with the relay replaced by ANSWER."""
    started = time.perf_counter()
    policy = app.governor.policy()
    assert not isinstance(policy, ErrorReply)
    decision = app.admission.decide(Route.CHAT, body, user="heavy")
    assert isinstance(decision, Admitted)
    recount = functools.partial(
        app.admission.decide, Route.CHAT, decision.body, user="heavy", exact=True
    )
    granted = await app.governor.admit("heavy", decision, policy=policy, recount=recount)
    assert not isinstance(granted, ErrorReply), granted
    holder = await app.governor.wait_for_slot(granted, _never_disconnects)
    assert isinstance(holder, str), holder
    admitted = time.perf_counter()

    async def sink(_message: Any) -> None:
        return None

    meter = UsageMeter(sink)
    await meter.send({"type": "http.response.start", "status": 200, "headers": []})
    await meter.send({"type": "http.response.body", "body": ANSWER})
    await app.governor.release(holder)
    used = await app.governor.measure(meter, granted, answered=True)
    await app.governor.finish(granted, used=used, outcome="ok")
    return Cycle(admitted - started, time.perf_counter() - started)


async def _never_disconnects() -> dict[str, Any]:
    await asyncio.Event().wait()
    return {}


def _timed(function: Callable[[], object]) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def _paths(
    app: GatewayApp, body: bytes, *, runs: int, server: RedisServer | None = None
) -> tuple[list[float], list[Cycle], list[float]]:
    """Per run: the decision alone, and the decision plus governance (then the store
    closes); with ``server``, a bare PING on a socket of its own after each governed run
    (the round trip under the same load as the run beside it)."""
    loop = asyncio.new_event_loop()
    pings: list[float] = []
    try:
        for _ in range(WARM_UP_RUNS):  # connects, loads the scripts, warms the caches
            loop.run_until_complete(_governed_path(app, body))
        decide = [
            _timed(lambda: app.admission.decide(Route.CHAT, body, user="heavy"))
            for _ in range(runs)
        ]
        ping = None if server is None else loop.run_until_complete(_pinger(server))
        governed = []
        for _ in range(runs):
            governed.append(loop.run_until_complete(_governed_path(app, body)))
            if ping is not None:
                pings.append(loop.run_until_complete(ping()))
        loop.run_until_complete(app.governor.store.aclose())
    finally:
        loop.close()
    return decide, governed, pings


async def _pinger(server: RedisServer) -> Callable[[], Awaitable[float]]:
    """A bare PING written to its own socket: the round trip every store call stands on."""
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(f"AUTH {server.password}\r\n".encode())
    await reader.readline()

    async def ping() -> float:
        started = time.perf_counter()
        writer.write(b"PING\r\n")
        await reader.readline()
        return time.perf_counter() - started

    return ping


def _print_mode(name: str, decide: list[float], governed: list[Cycle], pings: list[float]) -> float:
    """Print one mode's rows; what governance adds to the admission path (p50, s)."""
    admission = [cycle.admission for cycle in governed]
    total = [cycle.total for cycle in governed]
    for label, samples in (
        ("decide", decide),
        ("decide + admission path", admission),
        ("decide + whole cycle", total),
    ):
        p50, p99 = percentile(samples, 0.5) * 1000, percentile(samples, 0.99) * 1000
        print(f"{name + ': ' + label:<48} {p50:8.3f} {p99:8.3f}")
    adds = statistics.median(a - d for a, d in zip(admission, decide, strict=True))
    cycle = statistics.median(t - d for t, d in zip(total, decide, strict=True))
    print(f"  governance adds ({name}): {adds * 1000:+.3f} ms p50 (paired median, admission path)")
    print(f"  whole cycle ({name}): {cycle * 1000:+.3f} ms p50 (paired median, with settle)")
    if pings:
        print(f"  redis round trip beside it ({name}): {statistics.median(pings) * 1000:.3f} ms "
              f"p50 (a bare PING on a socket, after each run)")  # fmt: skip
    return adds


def overhead(workdir: Path, *, runs: int) -> None:
    body = _body()
    print(f"\n{'path':<48} {'p50 ms':>8} {'p99 ms':>8}   ({runs} runs, concurrency 1)")
    local: dict[str, float] = {}
    for name, policy in (("no policy", None), ("token budgets", BUDGET_POLICY)):
        local[name] = _print_mode(name, *_paths(_app(workdir, policy=policy), body, runs=runs))
    binary = shutil.which("redis-server")
    if binary is None:
        print("redis store: not measured (redis-server missing: bash hack/setup-test-tools.sh)")
        return
    server = start_redis_server(binary, workdir=workdir)
    try:
        for name, policy in (("no policy", None), ("token budgets", BUDGET_POLICY)):
            store = {
                "governance_redis_address": server.address,
                "governance_redis_password": server.password,
                "governance_key_prefix": f"sparkllm-bench:{{{uuid.uuid4().hex[:8]}}}",
            }
            app = _app(workdir, policy=policy, **store)
            runs_ = _paths(app, body, runs=runs, server=server)
            shared = _print_mode(f"redis, {name}", *runs_)
            over = (shared - local[name]) * 1000
            print(f"  redis over in-process ({name}): {over:+.3f} ms p50 (admission path)")
    finally:
        server.stop()


class SlowEngine:
    """Holds every generation for SERVICE_SECONDS, then answers with usage."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await read_request_body(receive)
        await asyncio.sleep(SERVICE_SECONDS)
        head = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": ANSWER})


def _queue_waits(exposition: str) -> dict[str, tuple[float, float]]:
    """Per user: (count, sum) of the queue-wait histogram."""
    return histogram_by_label(exposition, "sparkllm_gateway_user_queue_wait_seconds", "user")


async def _clients(url: str, *, seconds: float) -> tuple[list[float], list[float]]:
    stop = asyncio.Event()
    heavy: list[float] = []
    light: list[float] = []

    async def one(client: httpx.AsyncClient, key: str, into: list[float]) -> None:
        started = time.perf_counter()
        response = await client.post(url, content=_body(8), headers={"authorization": key})
        if response.status_code == 200:
            into.append(time.perf_counter() - started)

    async def heavy_loop(client: httpx.AsyncClient, delay: float) -> None:
        await asyncio.sleep(delay)  # staggered, as independent clients: no lockstep batches
        while not stop.is_set():
            await one(client, "Bearer key-heavy", heavy)

    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        stagger = SERVICE_SECONDS / SLOTS  # the slots turn over one after another
        loops = [
            asyncio.ensure_future(heavy_loop(client, n * stagger)) for n in range(HEAVY_CONCURRENCY)
        ]
        await asyncio.sleep(1.0)  # the backlog builds
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await one(client, "Bearer key-light", light)
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.gather(*loops)
    return heavy, light


def fairness(workdir: Path, *, seconds: float) -> None:
    with running(SlowEngine(), lifespan="off") as engine:
        app = _app(workdir, policy=None, upstream_url=engine.url)
        with running(app) as gateway:
            url = f"{gateway.url}/v1/chat/completions"
            heavy, light = asyncio.run(_clients(url, seconds=seconds))
            exposition = app.metrics.exposition()[0].decode()  # what its metrics port serves
    waits = _queue_waits(exposition)
    print(f"\nfair queue: 8 slots, service {SERVICE_SECONDS * 1000:.0f} ms = one slot turnover; "
          f"heavy user {HEAVY_CONCURRENCY} in flight, light user one at a time")  # fmt: skip
    print(f"{'user':<7} {'requests':>8} {'mean wait ms':>13} {'p50 e2e ms':>11} {'p99 e2e ms':>11}")
    for user, latencies in (("heavy", heavy), ("light", light)):
        count, total = waits.get(user, (0.0, 0.0))
        mean = total / count * 1000 if count else float("nan")
        p50, p99 = percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000
        print(f"{user:<7} {len(latencies):>8} {mean:>13.1f} {p50:>11.1f} {p99:>11.1f}")
    light_wait = percentile(light, 0.99) - SERVICE_SECONDS
    print(f"  light user's p99 wait (e2e - service): {light_wait * 1000:.1f} ms "
          f"(one slot turnover: {SERVICE_SECONDS * 1000:.0f} ms)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        overhead(Path(tmp), runs=args.runs)
        fairness(Path(tmp), seconds=args.seconds)


if __name__ == "__main__":
    main()
