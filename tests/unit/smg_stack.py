"""The front door on loopback with its real parts: the SGLang simulator, ``smg``, the gateway.

Not a test module. The simulator runs in process on its own HTTP server, the router is
the pinned ``smg`` launched with the arguments the operator renders (only its ports and
its worker made local), and the gateway in front of it, as in a pod.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sparkllm.gateway.app import GatewayApp, build_gateway_app
from sparkllm.gateway.config import GatewayConfig
from sparkllm_dev.devcluster.gateway_io import (
    ROUTER_PORT_FLAGS,
    free_port,
    localize_router_args,
    with_worker_url,
)
from sparkllm_dev.sim.server import prepare
from tests.unit.accept_sim import KEY, MODEL, sim_argv
from tests.unit.gateway_fixtures import (
    gateway_config,
    running,
    train_tokenizer,
    wait_until,
    write_keys,
    write_model_dir,
)
from tests.unit.test_render_secret_args import router_command

SMG = Path(sys.executable).parent / "smg"


@dataclass(frozen=True)
class Stack:
    sim_url: str
    router_url: str
    app: GatewayApp
    url: str  # the gateway's
    config: GatewayConfig  # the gateway's: another may be built on the same router


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readiness", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def smg_stack(
    root: Path, *, keys: dict[str, str], sim: Sequence[str] = (), **gateway: Any
) -> Iterator[Stack]:
    """Simulator -> smg -> gateway, for ``keys`` (user -> key); ``gateway``: config values."""
    model = write_model_dir(root / "model", train_tokenizer())
    engine = prepare([*sim_argv(model, sim=sim, parsers=False), "--enable-metrics"], env={})
    with running(engine.app) as engine_server:
        ports = {flag: free_port("127.0.0.1") for flag in ROUTER_PORT_FLAGS}
        rendered = router_command(key=KEY)  # smg's words as the router container runs it
        assert rendered[:2] == ["smg", "launch"]
        args = localize_router_args(
            with_worker_url(rendered[2:], url=engine_server.url), ports=ports
        )
        with (root / "smg.log").open("wb") as sink:
            router = subprocess.Popen([str(SMG), "launch", *args], stdout=sink, stderr=sink)
        try:
            router_url = f"http://127.0.0.1:{ports['--port']}"
            wait_until(lambda: _ready(router_url), timeout=60, what="smg to register the engine")
            config = gateway_config(
                model_dir=model, keys_dir=write_keys(root / "keys", keys),
                upstream_url=router_url, upstream_api_key=KEY, served_model_name=MODEL,
                **{"model_aliases": (), **gateway},
            )  # fmt: skip
            app = build_gateway_app(config)
            with running(app) as gateway_server:
                yield Stack(engine_server.url, router_url, app, gateway_server.url, config)
        finally:
            router.kill()  # ours; a graceful stop waits out smg's drain window
            router.wait(timeout=30)
