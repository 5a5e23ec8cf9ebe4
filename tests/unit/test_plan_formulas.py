"""The documents' formulas, pinned to the documents' own worked examples."""

from __future__ import annotations

import pytest

from sparkllm.errors import SpecError
from sparkllm.plan import (
    average_split,
    micro_batches_for_utilisation,
    moe_expert_utilisation,
    pipeline_utilisation,
    ring_allreduce_bytes_per_rank,
    ring_allreduce_seconds,
)

MIB = 2**20


@pytest.mark.parametrize(
    ("nodes", "weights_gb", "headroom_gb"),
    [(3, 56.09, 71.91), (2, 84.14, 43.86)],
)
def test_average_split_as_the_documents_round_it(
    nodes: int, weights_gb: float, headroom_gb: float
) -> None:
    split = average_split(total_weight_gb=168.27, nodes=nodes, node_memory_gb=128)
    assert (split.weights_gb, split.book_headroom_gb) == (weights_gb, headroom_gb)


def test_average_split_refuses_zero_nodes() -> None:
    with pytest.raises(SpecError):
        average_split(total_weight_gb=168.27, nodes=0, node_memory_gb=128)


@pytest.mark.parametrize(
    ("micro_batches", "stages", "percent"),
    [(1, 4, 25.0), (4, 4, 57.1), (8, 4, 72.7), (1, 3, 33.3)],
)
def test_pipeline_utilisation(micro_batches: int, stages: int, percent: float) -> None:
    value = pipeline_utilisation(micro_batches=micro_batches, stages=stages)
    assert round(100 * value, 1) == percent


def test_micro_batches_for_eighty_percent_on_four_stages() -> None:
    needed = micro_batches_for_utilisation(target=0.8, stages=4)
    assert needed == 12
    assert pipeline_utilisation(micro_batches=needed, stages=4) >= 0.8
    assert pipeline_utilisation(micro_batches=needed - 1, stages=4) < 0.8


@pytest.mark.parametrize("target", [0.0, 1.0, -0.5])
def test_micro_batches_refuses_impossible_targets(target: float) -> None:
    with pytest.raises(SpecError):
        micro_batches_for_utilisation(target=target, stages=4)


@pytest.mark.parametrize(
    ("ranks", "message", "sent"),
    [(4, 8 * MIB, 12 * MIB), (8, 16 * MIB, 28 * MIB), (1, 8 * MIB, 0)],
)
def test_ring_allreduce_bytes(ranks: int, message: int, sent: int) -> None:
    assert ring_allreduce_bytes_per_rank(ranks=ranks, message_bytes=message) == sent


@pytest.mark.parametrize(
    ("message", "microseconds"),
    [
        (8 * MIB, 143.8),  # prefill T=1024, H=4096, BF16
        (8192, 18.1),  # decode T=1
        (262144, 21.9),  # decode T=32
    ],
)
def test_ring_allreduce_time_matches_the_documents_table(message: int, microseconds: float) -> None:
    seconds = ring_allreduce_seconds(
        ranks=4, message_bytes=message, step_latency_s=3e-6, bandwidth_bytes_per_s=100e9
    )
    assert round(seconds * 1e6, 1) == microseconds


def test_ring_allreduce_time_refuses_zero_bandwidth() -> None:
    with pytest.raises(SpecError):
        ring_allreduce_seconds(ranks=4, message_bytes=1, step_latency_s=0, bandwidth_bytes_per_s=0)


@pytest.mark.parametrize(
    ("loads", "utilisation"),
    [([640, 128, 128, 128], 0.40), ([256, 256, 256, 256], 1.0), ([0, 0], 1.0), ([3], 1.0)],
)
def test_moe_expert_utilisation(loads: list[int], utilisation: float) -> None:
    assert moe_expert_utilisation(loads) == pytest.approx(utilisation)


@pytest.mark.parametrize("loads", [[], [1, -1]])
def test_moe_expert_utilisation_refuses_bad_loads(loads: list[int]) -> None:
    with pytest.raises(SpecError):
        moe_expert_utilisation(loads)
