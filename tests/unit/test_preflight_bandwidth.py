"""Bus bandwidth as nccl-tests computes it, the timing loop, and the threshold finding.

The three-process Gloo run of the same code needs torch (harness/sparkllm_dev/
gloo_bandwidth.py launches it); here the arithmetic and the orchestration are checked
with a clock and a collective that only count.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sparkllm.preflight import Check, Severity
from sparkllm.preflight.bandwidth import (
    DEFAULT_SIZES,
    MIB,
    BandwidthResult,
    Sample,
    bus_factor,
    evaluate,
    measure,
    result_from_json,
    table,
    time_collective,
    torch_collective,
)


def test_bus_factors_are_nccl_tests() -> None:
    assert bus_factor("all_reduce", ranks=3) == pytest.approx(4 / 3)
    assert bus_factor("all_gather", ranks=3) == pytest.approx(2 / 3)
    assert bus_factor("all_reduce", ranks=2) == 1.0
    with pytest.raises(ValueError, match="at least two ranks"):
        bus_factor("all_gather", ranks=1)


def test_the_documents_reported_all_gather() -> None:
    # ~23.7 GB/s all_gather busbw on a healthy Spark pair is ~190 Gb/s.
    sample = Sample(op="all_gather", nbytes=128 * MIB, ranks=2, seconds=128 * MIB / (2 * 23.7e9))
    assert sample.busbw_gbps == pytest.approx(189.6)
    assert sample.algbw_gbps == pytest.approx(2 * 189.6)


def _clock(step: float) -> Iterator[float]:
    now = 0.0
    while True:
        yield now
        now += step


def test_time_collective_averages_after_warmup() -> None:
    calls: list[int] = []
    ticks = _clock(0.5)
    seconds = time_collective(
        lambda: calls.append(1), warmup=2, iterations=4, clock=lambda: next(ticks)
    )
    assert len(calls) == 6
    assert seconds == 0.5 / 4
    with pytest.raises(ValueError, match="iterations"):
        time_collective(lambda: None, warmup=0, iterations=0)


def test_measure_runs_every_size_from_8_to_128_mib() -> None:
    made: list[int] = []

    def make_run(nbytes: int) -> Any:
        made.append(nbytes)
        return lambda: None

    ticks = _clock(0.01)
    samples = measure(make_run, op="all_reduce", ranks=3, clock=lambda: next(ticks))
    assert made == [8 * MIB, 16 * MIB, 32 * MIB, 64 * MIB, 128 * MIB] == list(DEFAULT_SIZES)
    assert [s.seconds for s in samples] == [pytest.approx(0.01 / 5)] * 5
    assert table(samples).splitlines()[0].split() == [
        "size",
        "time(us)",
        "algbw(GB/s)",
        "busbw(GB/s)",
        "busbw(Gb/s)",
    ]


def test_the_largest_size_is_compared_with_the_threshold() -> None:
    slow = Sample(op="all_gather", nbytes=128 * MIB, ranks=3, seconds=128 * MIB / 3e9)
    fast_small = Sample(op="all_gather", nbytes=8 * MIB, ranks=3, seconds=8 * MIB / 30e9)
    [finding] = evaluate([fast_small, slow], node="spark-1", threshold_gbps=150)
    assert finding.check is Check.BANDWIDTH
    assert finding.severity is Severity.ERROR
    assert finding.message == (
        "all_gather bus bandwidth 16.0 Gb/s at 128 MiB across 3 ranks, below the threshold 150 Gb/s"
    )
    [ok] = evaluate([slow], node="spark-1", threshold_gbps=10)
    assert ok.severity is Severity.INFO
    [none] = evaluate([], node="spark-1", threshold_gbps=10)
    assert none.severity is Severity.ERROR


class _Tensor:
    def __init__(self, count: int) -> None:
        self.count = count


class _Torch:
    float32 = "float32"

    def ones(self, count: int, *, dtype: str, device: str) -> _Tensor:
        return _Tensor(count)

    empty = ones


class _Dist:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def get_world_size(self) -> int:
        return 3

    def all_reduce(self, buffer: _Tensor) -> None:
        self.calls.append(("all_reduce", buffer.count, buffer.count))

    def all_gather_into_tensor(self, output: _Tensor, part: _Tensor) -> None:
        self.calls.append(("all_gather", output.count, part.count))


def test_torch_collective_sizes_as_nccl_tests() -> None:
    dist = _Dist()
    torch_collective(dist, _Torch(), op="all_reduce", device="cpu")(12 * MIB)()
    torch_collective(dist, _Torch(), op="all_gather", device="cpu")(12 * MIB)()
    count = 12 * MIB // 4
    assert dist.calls == [("all_reduce", count, count), ("all_gather", count, count // 3)]


def test_the_termination_message_round_trips() -> None:
    [finding] = evaluate(
        [Sample(op="all_reduce", nbytes=128 * MIB, ranks=3, seconds=0.01)],
        node="spark-0",
        threshold_gbps=150,
    )
    result = BandwidthResult(
        rank=0, op="all_reduce", ranks=3, nbytes=128 * MIB, busbw_gbps=143.16557,
        threshold_gbps=150, findings=(finding,),
    )  # fmt: skip
    back = result_from_json(result.to_json())
    assert back == BandwidthResult(
        rank=0, op="all_reduce", ranks=3, nbytes=128 * MIB, busbw_gbps=143.17,
        threshold_gbps=150, findings=(finding,),
    )  # fmt: skip
    for bad in ("[]", '{"op": "broadcast"}', '{"rank": 0}'):
        with pytest.raises((ValueError, KeyError)):
            result_from_json(bad)
