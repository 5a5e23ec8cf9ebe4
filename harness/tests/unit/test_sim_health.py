"""The simulator's /health against SGLang 0.5.23's: constants read from the pinned wheel,
then the rule (any output within the window) on idle, long-prefill, busy and hung engines."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import re
from collections.abc import Coroutine
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
from tests.unit.sglang_reference import sglang_file

from sparkllm_dev.sim import health
from sparkllm_dev.sim.app import EngineApp
from sparkllm_dev.sim.health import HealthCheck, Progress, ServerStatus
from sparkllm_dev.sim.server import UsageError, prepare

WINDOW = 2  # a short SGLANG_HEALTH_CHECK_TIMEOUT: the rule is the same at any length
T = TypeVar("T")


def _health_generate() -> ast.AsyncFunctionDef:
    tree = ast.parse(sglang_file("srt/entrypoints/http_server.py").read_text())
    return next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.AsyncFunctionDef) and node.name == "health_generate"
    )


def test_timeout_variable_and_default_are_the_wheels() -> None:
    source = sglang_file("srt/entrypoints/http_server.py").read_text()
    found = re.search(r'^HEALTH_CHECK_TIMEOUT = int\(os\.getenv\("(\w+)", (\d+)\)\)$', source, re.M)
    assert found is not None
    assert (found.group(1), int(found.group(2))) == (
        health.HEALTH_CHECK_TIMEOUT_ENV,
        health.DEFAULT_HEALTH_CHECK_TIMEOUT,
    )
    assert health.health_check_timeout({}) == 20
    assert health.health_check_timeout({"SGLANG_HEALTH_CHECK_TIMEOUT": "7"}) == 7


def test_poll_and_rule_are_the_wheels() -> None:
    body = ast.unparse(_health_generate())
    sleeps = re.findall(r"await asyncio\.sleep\(([\d.]+)\)", body)
    assert [float(s) for s in sleeps] == [health.POLL_SECONDS]
    assert "while time.time() < tic + HEALTH_CHECK_TIMEOUT" in body
    assert "if _global_state.tokenizer_manager.last_receive_tstamp > tic:" in body
    assert "server_status = ServerStatus.UnHealthy" in body
    assert "return Response(status_code=503)" in body
    assert {s.value for s in ServerStatus} <= {"Up", "UnHealthy"}
    manager = sglang_file("srt/managers/tokenizer_manager.py").read_text()
    # every message from the detokenizer, whichever request it is for, counts
    loop = manager[manager.index("async def handle_loop") :][:800]
    assert "self.last_receive_tstamp = real_time()" in loop
    assert "return not self.is_pause and self.is_healthy()" in manager  # /ready


def test_generation_default_is_the_wheels() -> None:
    environ = sglang_file("srt/environ.py").read_text()
    assert f"{health.HEALTH_GENERATION_ENV} = EnvBool(True)" in environ
    assert health.health_generation({}) is True
    assert health.health_generation({health.HEALTH_GENERATION_ENV: "0"}) is False


class _VirtualClock(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps to the next timer when nothing is ready to run.

    The scenarios below are SGLang's real-time rule (a 1 s poll, 2 s windows, prefills of
    3-3.5 s): on this clock they keep their order and every duration, in no wall time
    (they took 4 s each). ``health.time`` reads the same clock while it runs.
    """

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        real, loop = self._selector, self

        class Jumping:
            def __getattr__(self, name: str) -> Any:
                return getattr(real, name)

            def select(self, timeout: float | None = None) -> Any:
                events = real.select(0)
                if not events and timeout:
                    loop.now += timeout  # nothing to do until the next timer: go there
                return events

        self._selector = Jumping()

    def time(self) -> float:
        return self.now


def _run(scenario: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the virtual clock, with the simulator's ``time.time`` on it too."""
    loop = _VirtualClock()
    wall = SimpleNamespace(time=lambda: 1_800_000_000.0 + loop.now)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(health, "time", wall)
        try:
            return loop.run_until_complete(scenario)
        finally:
            loop.close()


async def _timed_check(check: HealthCheck) -> tuple[int, float]:
    clock = asyncio.get_running_loop()
    started = clock.time()
    status = await check.check()
    return status, clock.time() - started


def test_idle_engine_answers_with_its_own_token() -> None:
    async def scenario() -> tuple[int, float]:
        return await _timed_check(HealthCheck(Progress(), timeout=WINDOW, token_seconds=0.01))

    status, took = _run(scenario())
    assert status == 200
    assert health.POLL_SECONDS <= took < WINDOW  # the first 1 s look sees the token


async def _prefill(progress: Progress, seconds: float) -> None:
    with progress.prefill():
        await asyncio.sleep(seconds)
    await progress.emit()  # its first token


def test_a_long_prefill_alone_fails_checks_that_end_before_its_first_token() -> None:
    async def scenario() -> tuple[tuple[int, float], tuple[int, float], ServerStatus]:
        progress = Progress()
        check = HealthCheck(progress, timeout=WINDOW, token_seconds=0.01)
        prefill = asyncio.ensure_future(_prefill(progress, 3.5))
        first = await _timed_check(check)  # [0, 2]: nothing comes out
        failed_status = check.status
        second = await _timed_check(check)  # the first token at 3.5 is inside [2, 4]
        await prefill
        return first, second, failed_status

    (first, took_first), (second, _), status_after_failure = _run(scenario())
    assert (first, second) == (503, 200)
    assert took_first >= WINDOW
    assert status_after_failure is ServerStatus.UNHEALTHY


def test_other_requests_output_keeps_it_healthy_during_a_prefill() -> None:
    async def decode(progress: Progress) -> None:
        for _ in range(40):
            await asyncio.sleep(0.1)
            await progress.emit()

    async def scenario() -> int:
        progress = Progress()
        check = HealthCheck(progress, timeout=WINDOW, token_seconds=0.01)
        busy = [
            asyncio.ensure_future(_prefill(progress, 3.0)),
            asyncio.ensure_future(decode(progress)),
        ]
        status = await check.check()
        await asyncio.gather(*busy)
        return status

    assert _run(scenario()) == 200


def test_a_hung_engine_fails_every_check_and_its_requests_stall() -> None:
    async def scenario() -> tuple[int, int, bool, ServerStatus]:
        progress = Progress()
        check = HealthCheck(progress, timeout=WINDOW, token_seconds=0.01)
        progress.hang()
        request = asyncio.ensure_future(_prefill(progress, 0.01))
        first, second = await check.check(), await check.check()
        stalled = not request.done()
        request.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await request
        return first, second, stalled, check.status

    first, second, stalled, status = _run(scenario())
    assert (first, second, stalled) == (503, 503, True)
    assert status is ServerStatus.UNHEALTHY


@pytest.mark.parametrize("value", ["1", "true", "True", "yes", "y"])
def test_generation_switch_spellings(value: str) -> None:
    assert health.health_generation({health.HEALTH_GENERATION_ENV: value}) is True


def _window(tmp_path: Path, *sim: str) -> int:
    """The /health window of a rank 0 built from the rank's env and ``sim`` options."""
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 43}))
    argv = [
        *sim, "--", "python3", "-m", "sglang.launch_server", "--model-path", str(tmp_path),
        "--nnodes", "3", "--node-rank", "0", "--dist-init-addr", "127.0.0.1:5000",
        "--pp-size", "3", "--tp-size", "1", "--port", "30000",
    ]  # fmt: skip
    env = {"SGLANG_PP_LAYER_PARTITION": "14,14,15", health.HEALTH_CHECK_TIMEOUT_ENV: "7"}
    app = prepare(argv, env=env).app
    assert isinstance(app, EngineApp)
    return app.health.timeout


def test_a_test_may_shorten_the_window_and_the_env_stays_the_default(tmp_path: Path) -> None:
    """--sim-health-check-timeout: the cluster test of a hang waits 2 s windows, not 20 s."""
    assert _window(tmp_path) == 7  # the rank's SGLANG_HEALTH_CHECK_TIMEOUT
    assert _window(tmp_path, "--sim-health-check-timeout", "2") == 2
    with pytest.raises(UsageError, match="at least 1 second"):
        _window(tmp_path, "--sim-health-check-timeout", "0")
