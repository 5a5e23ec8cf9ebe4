"""Helpers for the acceptance tests: the simulator in process, optionally with a fault,
behind a stand-in front door that applies the gateway's own tool-feature policy.

Not a test module. The stand-in is the gateway's ``check_tool_features`` (the real
policy, the real error reply) in front of the simulator's ASGI app; everything else goes
straight through, so the checks read the simulator's answers as they would the engine's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx

from sparkllm.bench.accept.load import LoadSizes
from sparkllm.gateway.replies import RequestRejectedError
from sparkllm.gateway.rules.allowlist import check_tool_features
from sparkllm_dev.sim.server import prepare

# The documents' load items, small enough for a unit test.
SMALL = LoadSizes(
    scale8_requests=6,
    scale8_concurrency=3,
    arrival_requests=4,
    arrival_rate=40.0,
    soak_seconds=0.3,
    soak_concurrency=2,
    input_tokens=16,
    output_tokens=8,
)
KEY = "engine-secret"
MODEL = "dsv4"
T = TypeVar("T")


def sim_argv(model: Path, *, sim: Sequence[str] = (), parsers: bool = True) -> list[str]:
    extra = ["--reasoning-parser", "deepseek-v4", "--tool-call-parser", "deepseekv4"]
    return [
        *sim, "--", "python3", "-m", "sglang.launch_server", "--model-path", str(model),
        "--served-model-name", MODEL, "--nnodes", "3", "--node-rank", "0",
        "--dist-init-addr", "127.0.0.1:5000", "--pp-size", "3", "--tp-size", "1",
        "--mem-fraction-static", "0.5", "--context-length", "4096", "--chunked-prefill-size",
        "4096", "--cuda-graph-max-bs-decode", "4", "--max-running-requests", "8",
        "--host", "0.0.0.0", "--port", "30000", "--api-key", KEY, *(extra if parsers else ()),
    ]  # fmt: skip


def model_dir(directory: Path) -> Path:
    config = {"num_hidden_layers": 43, "max_position_embeddings": 1048576, "model_type": "x"}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


class FrontDoor:
    """The gateway's tool-feature policy in front of an ASGI app."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        try:
            check_tool_features(json.loads(raw or b"{}"), enabled=frozenset())
        except RequestRejectedError as refused:
            headers = refused.reply.headers()
            await send({"type": "http.response.start", "status": 400, "headers": headers})
            await send({"type": "http.response.body", "body": refused.reply.body()})
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": raw, "more_body": False}

        await self.app(scope, replay, send)


@contextmanager
def served(
    directory: Path, *, faults: Sequence[str] = (), front_door: bool = True
) -> Iterator[Callable[[Callable[[httpx.AsyncClient], Awaitable[T]]], T]]:
    """A runner: ``run(fn)`` calls ``fn(client)`` against the simulator (and front door)."""
    sim = [f"--sim-fault={fault}" for fault in faults]
    app = prepare(sim_argv(model_dir(directory), sim=sim), env={}).app
    wrapped = FrontDoor(app) if front_door else app

    def run(function: Callable[[httpx.AsyncClient], Awaitable[T]]) -> T:
        async def go() -> T:
            transport = httpx.ASGITransport(app=wrapped)
            async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
                return await function(client)

        return asyncio.run(go())

    yield run
