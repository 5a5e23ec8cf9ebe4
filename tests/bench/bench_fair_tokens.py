"""Benchmark: fair by tokens (and, before, by slots), and interactive over batch.

Not a pytest test: numbers, never a verdict. Run from the repository root (about a
minute; no cluster needed):

    .venv/bin/python -m tests.bench.bench_fair_tokens [--seconds 8]

The engine is an **in-process stand-in timed by tokens** (``TokenEngine``), not the
harness simulator: it holds each request ``UNIT_SECONDS`` per prompt token plus
``OUTPUT_TOKEN_COST`` times that per output token (the gateway's own cost model,
limits.py), streams the first token after the prompt's share (the prefill), and answers
the prompt's real token count in ``usage``. Each concurrent request is held on its own
(no batching slowdown), so a slot's time is exactly the request's weighted tokens. In
front of it, the real gateway (uvicorn, 8 slots, no policy file) with its fair queue.

1. ``tokens``: a long-prompt user (~8K-token prompts) and a short-prompt user (~200)
   at equal weight, each with 16 requests always in flight (saturating the 8 slots),
   once ordered by requests (``Measure.REQUESTS``, a slot each: the order before issue
   29) and once by tokens (``Measure.TOKENS``, today's). Printed per mode: each user's
   requests and weighted tokens served (prompt + 4 x output, from the engine's usage)
   in the measured window, their shares, and Jain's index over requests (slot fairness)
   and over tokens (token fairness): 1 is equal, 0.5 is one user taking everything.
2. ``priority``: an interactive user sending one short streamed chat at a time; its
   time to first token (TTFT, at the client) alone, then with a flood of 32 long
   requests in flight from another user — once an ordinary (interactive) user, once
   ``sparkllm:bench``, batch by default (one slot reserved for interactive requests).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from sparkllm.gateway.limits import OUTPUT_TOKEN_COST, Measure
from sparkllm.render.names import BENCH_USER
from tests.bench import bench_governance
from tests.bench.common import percentile
from tests.unit.gateway_fixtures import MODEL, TOKENIZER_CORPUS_WORD, read_request_body, running

UNIT_SECONDS = 0.0005  # per prompt token: an 8K prompt holds its slot ~4 s, a 200 one 0.13 s
SLOTS = bench_governance.SLOTS
CLIENTS_PER_USER = 16
LONG_PROMPT, SHORT_PROMPT, OUTPUT = 8000, 200, 16
FLOOD_CLIENTS, FLOOD_PROMPT = 32, 4000
WARM_UP_SECONDS = 5.0  # longer than one long request: the order's steady state


def _body(words: int, *, max_tokens: int = OUTPUT, stream: bool = False) -> bytes:
    messages = [{"role": "user", "content": TOKENIZER_CORPUS_WORD * words}]
    payload: dict[str, Any] = {"model": MODEL, "messages": messages, "max_tokens": max_tokens}
    if stream:
        payload["stream"] = True
    return json.dumps(payload).encode()


class TokenEngine:
    """Holds a request for its weighted tokens' time; streams the first token after the
    prompt's share; ``usage`` has the prompt's words (one token each) and max_tokens."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        payload = json.loads(await read_request_body(receive))
        content = payload["messages"][-1]["content"]
        prompt = content.count(TOKENIZER_CORPUS_WORD.strip())
        output = int(payload.get("max_tokens") or payload.get("max_completion_tokens") or 1)
        usage = {"prompt_tokens": prompt, "completion_tokens": output}
        usage["total_tokens"] = prompt + output
        await asyncio.sleep(prompt * UNIT_SECONDS)  # the prefill
        if not payload.get("stream"):
            await asyncio.sleep(OUTPUT_TOKEN_COST * output * UNIT_SECONDS)
            body = {"object": "chat.completion", "choices": [], "usage": usage}
            head = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": head})
            await send({"type": "http.response.body", "body": json.dumps(body).encode()})
            return
        head = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        delta = {"index": 0, "delta": {"role": "assistant", "content": "x"}}
        first = {"object": "chat.completion.chunk", "choices": [delta]}
        await send({"type": "http.response.body", "body": _event(first), "more_body": True})
        await asyncio.sleep(OUTPUT_TOKEN_COST * output * UNIT_SECONDS)
        last = {"object": "chat.completion.chunk", "choices": [], "usage": usage}
        done = _event(last) + b"data: [DONE]\n\n"
        await send({"type": "http.response.body", "body": done})


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _gateway(workdir: Path, *, engine_url: str, users: Sequence[str]) -> Any:
    return bench_governance._app(
        workdir,
        policy=None,
        upstream_url=engine_url,
        users=users,
        queue_size=128,
        queue_timeout_seconds=120,
    )


@dataclass
class Served:
    """What one user's requests got in the measured window."""

    requests: int = 0
    tokens: float = 0.0  # prompt + OUTPUT_TOKEN_COST x output, as the engine answered
    ttft: list[float] = field(default_factory=list)


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one has everything."""
    total, squares = sum(values), sum(v * v for v in values)
    return total * total / (len(values) * squares) if squares else float("nan")


async def _saturate(url: str, users: dict[str, int], *, seconds: float) -> dict[str, Served]:
    """Each user keeps CLIENTS_PER_USER requests of its prompt size in flight."""
    served = {user: Served() for user in users}
    window: list[float] = []

    async def loop(client: httpx.AsyncClient, user: str, words: int) -> None:
        body = _body(words)
        while not window or time.monotonic() < window[1]:
            response = await client.post(url, content=body, headers=_auth(user))
            now = time.monotonic()
            if response.status_code == 200 and window and window[0] <= now <= window[1]:
                usage = response.json()["usage"]
                served[user].requests += 1
                cost = OUTPUT_TOKEN_COST * usage["completion_tokens"]
                served[user].tokens += usage["prompt_tokens"] + cost

    limits = httpx.Limits(max_connections=4 * CLIENTS_PER_USER)
    async with httpx.AsyncClient(timeout=180, limits=limits) as client:
        tasks = [
            asyncio.ensure_future(loop(client, user, words))
            for user, words in users.items()
            for _ in range(CLIENTS_PER_USER)
        ]
        await asyncio.sleep(WARM_UP_SECONDS)  # both backlogs build; the order settles
        window.extend([time.monotonic(), time.monotonic() + seconds])
        await asyncio.gather(*tasks)
    return served


def _auth(user: str) -> dict[str, str]:
    return {"authorization": f"Bearer key-{user}"}


def tokens(workdir: Path, *, seconds: float) -> None:
    users = {"long": LONG_PROMPT, "short": SHORT_PROMPT}
    print(
        f"\nfair by tokens: {SLOTS} slots, stand-in engine timed by tokens "
        f"({UNIT_SECONDS * 1e6:.0f} us per prompt token, x{OUTPUT_TOKEN_COST:g} per output "
        f"token); users 'long' (~{LONG_PROMPT}-token prompts) and 'short' (~{SHORT_PROMPT}), "
        f"weight 1 each, {CLIENTS_PER_USER} in flight each, {OUTPUT} output tokens; "
        f"{seconds:g} s measured"
    )
    print(
        f"{'order':<9} {'user':<6} {'requests':>8} {'req share':>9} "
        f"{'w. tokens':>10} {'tok share':>9}"
    )
    with running(TokenEngine(), lifespan="off") as engine:
        for name, measure in (("requests", Measure.REQUESTS), ("tokens", Measure.TOKENS)):
            app = _gateway(workdir, engine_url=engine.url, users=list(users))
            app.governor.limiter.measure = measure
            with running(app) as gateway:
                url = f"{gateway.url}/v1/chat/completions"
                served = asyncio.run(_saturate(url, users, seconds=seconds))
            requests = [served[user].requests for user in users]
            weighted = [served[user].tokens for user in users]
            for user in users:
                s = served[user]
                print(
                    f"{name:<9} {user:<6} {s.requests:>8} {s.requests / sum(requests):>9.1%} "
                    f"{s.tokens:>10.0f} {s.tokens / sum(weighted):>9.1%}"
                )
            print(
                f"  order by {name}: Jain's index over requests (slots) {jain(requests):.3f}, "
                f"over weighted tokens {jain(weighted):.3f}"
            )


async def _interactive(url: str, *, seconds: float, flood: str | None) -> list[float]:
    """TTFTs of one interactive user, one streamed chat at a time (while ``flood`` floods)."""
    stop = asyncio.Event()
    ttfts: list[float] = []

    async def flooding(client: httpx.AsyncClient, user: str) -> None:
        body = _body(FLOOD_PROMPT, max_tokens=64)
        while not stop.is_set():
            await client.post(url, content=body, headers=_auth(user))

    async def one(client: httpx.AsyncClient) -> None:
        headers = _auth("alice")
        started = time.perf_counter()
        async with client.stream(
            "POST", url, content=_body(200, stream=True), headers=headers
        ) as response:
            first: float | None = None
            async for chunk in response.aiter_bytes():
                if first is None and b"content" in chunk:
                    first = time.perf_counter() - started
            if first is not None and response.status_code == 200:
                ttfts.append(first)

    limits = httpx.Limits(max_connections=FLOOD_CLIENTS + 8)
    async with httpx.AsyncClient(timeout=180, limits=limits) as client:
        floods = [
            asyncio.ensure_future(flooding(client, flood))
            for _ in range(FLOOD_CLIENTS)
            if flood is not None
        ]
        await asyncio.sleep(WARM_UP_SECONDS if flood else 0.0)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await one(client)
        stop.set()
        await asyncio.gather(*floods)
    return ttfts


def priority(workdir: Path, *, seconds: float) -> None:
    print(
        f"\npriorities: {SLOTS} slots, 1 reserved for interactive (the default); alice sends "
        f"one streamed ~200-token chat at a time; a flood keeps {FLOOD_CLIENTS} "
        f"~{FLOOD_PROMPT}-token requests in flight (64 output tokens); TTFT at the client"
    )
    print(f"{'interactive TTFT':<40} {'chats':>6} {'p50 ms':>8} {'p95 ms':>8}")
    cases = (
        ("alone", None),
        ("with a flood by an interactive user", "flood"),
        (f"with a flood by {BENCH_USER} (batch)", BENCH_USER),
    )
    with running(TokenEngine(), lifespan="off") as engine:
        for case, flood in cases:
            app = _gateway(workdir, engine_url=engine.url, users=["alice", "flood", BENCH_USER])
            with running(app) as gateway:
                url = f"{gateway.url}/v1/chat/completions"
                ttfts = asyncio.run(_interactive(url, seconds=seconds, flood=flood))
            p50, p95 = percentile(ttfts, 0.5) * 1000, percentile(ttfts, 0.95) * 1000
            print(f"TTFT {case:<35} {len(ttfts):>6} {p50:>8.1f} {p95:>8.1f}")
    print(f"  (alone, the stand-in's prefill of 200 tokens: {200 * UNIT_SECONDS * 1000:.0f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--only", choices=("tokens", "priority"), help="one part (default: both)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "tokens"):
            tokens(Path(tmp), seconds=args.seconds)
        if args.only in (None, "priority"):
            priority(Path(tmp), seconds=args.seconds)


if __name__ == "__main__":
    main()
