"""The SIMULATOR's process shell: parse the rank's command, validate, serve with uvicorn.

Why this order: SGLang refuses a bad command line before anything else (argparse exits
with code 2 and ``sglang serve: error: …``) and a bad deployment (layer partition, model
name) at startup with a Python exception (exit code 1); the operator's restart and
ConfigApplied logic is tested against exactly those outcomes, so the simulator keeps
them. Then it logs ONE line saying it is a SIMULATOR with the parallel layout it parsed,
serves rank 0's API or a worker's dummy health server, and exits 0 after a graceful
shutdown on SIGTERM/SIGINT (uvicorn's signal handling), or 1 after ``--sim-fail-after``.
SIGUSR1 is the hang fault: rank 0 stays up and stops generating (``health.py``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import socket
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn

from sparkllm.errors import SpecError
from sparkllm.sglang_contract.flags import SGLANG_VERSION, flag_spec, parse_sglang_argv
from sparkllm_dev.sim.asgi import ASGIApp
from sparkllm_dev.sim.engine_config import EngineConfig, build_engine_config
from sparkllm_dev.sim.model_files import load_model_files
from sparkllm_dev.sim.options import parse_sim_options, split_command
from sparkllm_dev.sim.start import cache_dir, fired_up, simulate_start
from sparkllm_dev.sim.worker import WorkerApp

if TYPE_CHECKING:  # imported by rank 0 only: a worker serves no API (generation, tokens)
    from sparkllm_dev.sim.app import EngineApp

logger = logging.getLogger("sparkllm_dev.sim")
EXIT_USAGE = 2
EXIT_STARTUP = 1


class UsageError(SpecError):
    """The command line itself is refused (argparse would exit with code 2)."""


@dataclass(slots=True)
class SimulatedRank:
    """A configured rank: its effective config and the ASGI app that serves it."""

    config: EngineConfig
    app: ASGIApp
    token_counting: str
    engine: EngineApp | None = None  # rank 0's API (``app``); None on a worker


def prepare(argv: Sequence[str], *, env: Mapping[str, str]) -> SimulatedRank:
    """Build the rank from ``[sim options] -- command``; UsageError / EngineStartupError."""
    try:
        sim_args, sglang_args = split_command(argv, env)
        sim = parse_sim_options(sim_args)
        for name in sim.ignored_flags:
            flag_spec(name)
    except SpecError as exc:
        raise UsageError(f"python -m sparkllm_dev.sim: error: {exc}") from exc
    try:
        parsed = parse_sglang_argv(sglang_args)
    except SpecError as exc:
        raise UsageError(f"usage: sglang serve [-h] ...\nsglang serve: error: {exc}") from exc
    # The dev cluster's engine harness maps the node's hostPath model directory to a local
    # one; --model-path itself stays as rendered, so /get_server_info echoes the spec.
    worker = int(str(parsed.get("node_rank") or 0)) > 0  # EngineConfig.is_worker, before it
    model = load_model_files(
        env.get("SPARKLLM_SIM_MODEL_DIR") or str(parsed["model_path"]), tokenizer=not worker
    )
    config = build_engine_config(parsed=parsed, sim=sim, env=env, model_config=model.config)
    if config.is_worker:
        return SimulatedRank(config=config, app=WorkerApp(config), token_counting="none (worker)")
    from sparkllm_dev.sim.app import EngineApp

    engine = EngineApp(
        config,
        tokens=model.tokens,
        model_config=model.config,
        launch_command=shlex.join(sglang_args),
        env=env,
    )
    return SimulatedRank(config=config, app=engine, token_counting=model.tokens.kind, engine=engine)


def describe(rank: SimulatedRank) -> str:
    """The one start-up log line (never contains the API key)."""
    config = rank.config
    layers = config.layers_of_this_rank()
    return (
        f"SGLang {SGLANG_VERSION} SIMULATOR (no GPU, no model weights): "
        f"node_rank={config.node_rank} nnodes={config.nnodes} pp_size={config.pp_size} "
        f"tp_size={config.tp_size} layers={'unknown' if layers is None else list(layers)} "
        f"layer_partition={list(config.layer_partition or []) or 'even'} "
        f"pp_rank={config.pp_rank} tp_rank={config.tp_rank} "
        f"role={'worker dummy health server' if config.is_worker else 'rank 0 HTTP API'} "
        f"listen={config.host}:{config.port} context_length={config.context_length} "
        f"max_running_requests={config.max_running_requests} "
        f"max_total_num_tokens={config.max_total_num_tokens} "
        f"api_key={'set' if config.api_key else 'none'} tokens={rank.token_counting}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sparkllm_dev.sim [--sim-… options] -- <the rank's container command>``."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s")
    try:
        rank = prepare(sys.argv[1:] if argv is None else argv, env=os.environ)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except SpecError as exc:  # EngineStartupError (SGLang's own words) or unreadable files
        print(f"SIMULATOR startup failed: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    logger.info(describe(rank))
    config = rank.config
    simulate_start(
        config.sim.start, pp_size=config.pp_size, rank=config.node_rank,
        cache=cache_dir(os.environ), log=logging.getLogger("sglang"),
    )  # fmt: skip
    server = _Server(
        uvicorn.Config(
            rank.app,
            host=rank.config.host,
            port=rank.config.port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=5,
        ),
        engine=rank.engine,
    )
    if rank.engine is not None:
        rank.engine.on_crash = server.crash
    server.run()
    if not server.started:
        where = f"{rank.config.host}:{rank.config.port}"
        print(f"SIMULATOR could not listen on {where}", file=sys.stderr)
        return EXIT_STARTUP
    logger.info("SGLang SIMULATOR stopped (node_rank=%d)", rank.config.node_rank)
    return EXIT_STARTUP if server.crashed else 0


class _Server(uvicorn.Server):
    """uvicorn's server, telling rank 0 when shutdown starts (so /health turns 503)."""

    def __init__(self, config: uvicorn.Config, *, engine: EngineApp | None) -> None:
        super().__init__(config)
        self._engine = engine
        self.crashed = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's, then rank 0's "fired up" line once it listens (as SGLang's)."""
        await super().startup(sockets)
        if self.started and self._engine is not None:
            fired_up(logging.getLogger("sglang"))

    def crash(self) -> None:
        self.crashed = True
        self.should_exit = True

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Like uvicorn's, minus re-raising the signal afterwards: a drained stop exits 0."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        stop_signals = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in stop_signals}
        previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, self.handle_hang)
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_hang(self, sig: int, frame: FrameType | None) -> None:
        """SIGUSR1: the hang fault (rank 0 stalls; a worker's dummy server has nothing to stall)."""
        if self._engine is not None:
            self._engine.progress.hang()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._engine is not None:
            self._engine.shutting_down = True
        super().handle_exit(sig, frame)
