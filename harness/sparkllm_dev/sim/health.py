"""SGLang 0.5.23's ``/health`` verdict in the SIMULATOR: "did the engine produce anything?".

Why its own module: the operator's probes (render/ranks.py ``_probes``) and its hung-
pipeline check are reasoned against exactly this rule, so the simulator must answer
``/health`` the way the pinned wheel does, including during a long prefill and during a
hang. What ``health_generate`` in ``sglang/srt/entrypoints/http_server.py`` does:

- 503 at once while the server is starting or shutting down;
- otherwise it submits a one-token generation and then, every 1 s
  (``await asyncio.sleep(1)``) for ``HEALTH_CHECK_TIMEOUT`` seconds
  (``int(os.getenv("SGLANG_HEALTH_CHECK_TIMEOUT", 20))``), looks whether the tokenizer
  manager received ANY output since the check began (``last_receive_tstamp > tic``,
  bumped in ``handle_loop`` for every message from the detokenizer — any request's
  tokens, not only the check's own). Yes: 200 and ``server_status = Up``. The window
  passes without output: 503 and ``server_status = UnHealthy``, which also turns
  ``/ready`` 503 (``is_ready()``) until a later check succeeds.
- ``/health`` with ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0`` answers 200 without
  generating (the default is on); ``/health_generate`` always generates.

So a check fails only when nothing at all comes out for 20 s: other requests decoding
keep it green, and its own token is all an idle engine needs. Its own token waits, like
any request, behind the prefill in progress — the simulator lets it through only when no
request is in its time-to-first-token, then takes one TPOT — so one long prefill alone
(the documents' 8K prompt: 44 s) fails the checks that start in its first ~24 s. A
hung engine (``hang``: ``SIGUSR1`` or ``--sim-hang-after``) emits nothing ever again:
every check fails.

Not simulated: SGLang's decode steps pause during another request's prefill chunk; the
simulator keeps decoding, so with other requests running it is more lenient than SGLang.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Mapping
from enum import Enum
from typing import Final

logger = logging.getLogger("sparkllm_dev.sim")

HEALTH_CHECK_TIMEOUT_ENV: Final = "SGLANG_HEALTH_CHECK_TIMEOUT"
DEFAULT_HEALTH_CHECK_TIMEOUT: Final = 20  # http_server.py's default for the variable
HEALTH_GENERATION_ENV: Final = "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"
POLL_SECONDS: Final = 1.0  # the check looks once a second


class ServerStatus(Enum):
    """``sglang.srt.managers.io_struct.ServerStatus``, the values the health path sets."""

    UP = "Up"
    UNHEALTHY = "UnHealthy"


def health_check_timeout(env: Mapping[str, str]) -> int:
    """``HEALTH_CHECK_TIMEOUT`` as SGLang computes it from the rank's environment."""
    return int(env.get(HEALTH_CHECK_TIMEOUT_ENV, DEFAULT_HEALTH_CHECK_TIMEOUT))


def health_generation(env: Mapping[str, str]) -> bool:
    """``envs.SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION`` (an EnvBool, default True)."""
    value = env.get(HEALTH_GENERATION_ENV)
    return True if value is None else value.lower() in ("true", "1", "yes", "y")


class Progress:
    """The engine's output clock: ``last_output`` (SGLang's ``last_receive_tstamp``),
    the prefills in progress, and whether generation flows at all (a hang stops it)."""

    def __init__(self) -> None:
        self.last_output = time.time()
        self.prefilling = 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def hung(self) -> bool:
        return not self._flowing.is_set()

    def hang(self) -> None:
        """From now on nothing is generated; the process and its HTTP server stay up."""
        if not self.hung:
            logger.error("SIMULATOR: pipeline hung (injected): generation stalls, process alive")
        self._flowing.clear()

    async def emit(self) -> None:
        """One output leaves the engine (a token of any request): waits forever when hung."""
        await self._flowing.wait()
        self.last_output = time.time()

    @contextlib.contextmanager
    def prefill(self) -> Iterator[None]:
        """Held during a request's time to first token: the engine is busy prefilling."""
        self.prefilling += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.prefilling -= 1
            if self.prefilling == 0:
                self._idle.set()

    async def no_prefill(self) -> None:
        """Wait until no prefill is in progress (where a queued one-token request runs)."""
        await self._idle.wait()


class HealthCheck:
    """``health_generate``: a one-token generation, then a 1 s poll for any output."""

    def __init__(self, progress: Progress, *, timeout: int, token_seconds: float) -> None:
        self.progress = progress
        self.timeout = timeout
        self.token_seconds = token_seconds
        self.status = ServerStatus.UP

    async def _one_token(self) -> None:
        await self.progress.no_prefill()
        await asyncio.sleep(self.token_seconds)
        await self.progress.emit()

    async def check(self) -> int:
        """200 when the engine produced anything within the window, else 503."""
        tic = time.time()
        task = asyncio.ensure_future(self._one_token())
        try:
            while time.time() < tic + self.timeout:
                await asyncio.sleep(POLL_SECONDS)
                if self.progress.last_output > tic:
                    self.status = ServerStatus.UP
                    return 200
        finally:
            task.cancel()
        logger.error(
            "Health check failed. Server couldn't get a response from detokenizer for last "
            "%d seconds.",
            self.timeout,
        )
        self.status = ServerStatus.UNHEALTHY
        return 503
