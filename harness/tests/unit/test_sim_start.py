"""The simulator's start: SGLang's start lines in SGLang's order, cold then warm.

What the operator reads from a rank's log (``start_log.read_start_log``) must walk the same
stages on the simulator as on a real engine, and the cold/warm model must make a warm
cache pay off: a first start compiles and leaves its marker in the cache directory, the
next one finds it and skips the JIT time. Time is a recorded fake sleep, not a wait.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sparkllm.sglang_contract.start_log import StartStage, read_start_log
from sparkllm_dev.sim.options import parse_sim_options
from sparkllm_dev.sim.start import (
    JIT_MARKER,
    LABEL,
    SEEDS_WEIGHTS_GB,
    StartModel,
    cache_dir,
    fired_up,
    simulate_start,
)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _run(model: StartModel, *, rank: int, cache: Path | None) -> tuple[list[str], float, bool]:
    log = logging.getLogger(f"test-sim-start-{id(model)}-{rank}")
    log.setLevel(logging.INFO)
    log.propagate = False
    lines = _Lines()
    log.addHandler(lines)
    slept: list[float] = []
    warm = simulate_start(model, pp_size=3, rank=rank, cache=cache, log=log, sleep=slept.append)
    if rank == 0:
        fired_up(log)
    log.removeHandler(lines)
    return lines.lines, sum(slept), warm


def test_the_lines_walk_the_operators_stages_in_order(tmp_path: Path) -> None:
    lines, slept, warm = _run(StartModel(), rank=0, cache=tmp_path)
    assert slept == 0  # scale 0: the lines without waiting
    assert not warm
    assert all(line.endswith(LABEL) for line in lines)  # never mistaken for a real engine
    stages = []
    for end in range(1, len(lines) + 1):
        reading = read_start_log(lines[:end], rank=0)
        assert reading is not None, lines[end - 1]
        if not stages or stages[-1] != reading.stage:
            stages.append(reading.stage)
    assert stages == [
        StartStage.LOADING_WEIGHTS,
        StartStage.ALLOCATING_KV_CACHE,
        StartStage.KERNEL_CAPTURE,
        StartStage.WARMING_UP,
        StartStage.READY,
    ]
    reading = read_start_log(lines[:10], rank=0)
    assert reading is not None
    assert reading.shards == "9/46"  # the seeds' 46 shards, one progress line each
    worker, _, _ = _run(StartModel(), rank=2, cache=None)
    final = read_start_log(worker, rank=2)
    assert final is not None
    assert final.stage is StartStage.READY  # a worker logs no "fired up"


def test_a_warm_cache_skips_the_jit_time(tmp_path: Path) -> None:
    model = StartModel(scale=1.0)
    cold_lines, cold, warm_first = _run(model, rank=0, cache=tmp_path)
    assert not warm_first
    assert (tmp_path / JIT_MARKER).is_file()  # the first start filled the cache
    warm_lines, warm, warm_second = _run(model, rank=0, cache=tmp_path)
    assert warm_second
    weights = SEEDS_WEIGHTS_GB / 3 * model.load_seconds_per_gb
    assert cold == pytest.approx(weights + 5 + 240 + 30 + 5)  # 448 s at real scale
    assert warm == pytest.approx(weights + 5 + 10 + 30 + 5)
    assert cold == pytest.approx(model.seconds(pp_size=3, warm=False))
    assert warm == pytest.approx(model.seconds(pp_size=3, warm=True))
    assert any("(cold: compiling)" in line for line in cold_lines)
    assert any("(cache hit)" in line for line in warm_lines)
    # no cache directory: every start is cold
    _, again, warm_none = _run(model, rank=0, cache=None)
    assert not warm_none
    assert again == pytest.approx(cold)


def test_the_options_and_the_cache_directory() -> None:
    options = parse_sim_options(["--sim-start-scale", "0.01", "--sim-jit-cold-seconds", "100"])
    assert options.start.scale == 0.01
    assert options.start.jit_cold_seconds == 100
    assert parse_sim_options([]).start == StartModel()
    assert cache_dir({"SGLANG_CACHE_DIR": "/var/cache/x"}) == Path("/var/cache/x")
    local = {"SGLANG_CACHE_DIR": "/var/cache/x", "SPARKLLM_SIM_CACHE_DIR": "/tmp/n/x"}
    assert cache_dir(local) == Path("/tmp/n/x")  # the harness's node-local copy wins
    assert cache_dir({}) is None
