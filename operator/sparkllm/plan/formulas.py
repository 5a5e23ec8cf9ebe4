"""The documents' capacity and parallelism arithmetic, as small pure functions.

Why here and spelled out: the source documents (SEEDS.md, "Capacity arithmetic") argue
for three nodes, one replica per three-node group, and a conservative input cap with
these formulas; the planner and the docs quote them, and the tests pin them to the
documents' own worked examples so a refactor cannot quietly change the arithmetic.

Units: memory in GB of 10**9 bytes, as the documents write it (168.27 GB of weights,
128 GB per DGX Spark). Times in seconds, bandwidth in bytes per second.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from sparkllm.errors import SpecError

GB = 1_000_000_000
_CENT = Decimal("0.01")


def _round_half_up(value: Decimal) -> float:
    return float(value.quantize(_CENT, rounding=ROUND_HALF_UP))


@dataclass(frozen=True, slots=True)
class AverageSplit:
    """The documents' first estimate: weights divided evenly, and what is left of a node."""

    nodes: int
    weights_gb: float
    """Average weights per node, rounded half-up to 0.01 GB as the documents print it."""
    book_headroom_gb: float
    """Node memory minus that rounded average (the documents' "账面剩余", book headroom)."""


def average_split(*, total_weight_gb: float, nodes: int, node_memory_gb: float) -> AverageSplit:
    """168.27 GB over 3 nodes = 56.09 GB each, 71.91 GB of 128 left; over 2: 84.14 / 43.86.

    The documents round the average first (84.135 -> 84.14) and subtract the rounded
    figure (128 - 84.14 = 43.86), so this does the same, in decimal arithmetic.
    Only a first estimate: layers, embeddings and head are not uniform.
    """
    if nodes < 1:
        raise SpecError("nodes must be at least 1")
    average = Decimal(str(total_weight_gb)) / Decimal(nodes)
    rounded = _round_half_up(average)
    headroom = Decimal(str(node_memory_gb)) - Decimal(str(rounded))
    return AverageSplit(nodes=nodes, weights_gb=rounded, book_headroom_gb=_round_half_up(headroom))


def pipeline_utilisation(*, micro_batches: int, stages: int) -> float:
    """m / (m + p - 1): busy share of p equal stages fed m independent micro-batches.

    The documents' examples: p=4, m=1 -> 25 %; m=4 -> 57.1 %; m=8 -> 72.7 %. One
    request's next decode token depends on the previous one, so a single request is
    m=1: pipeline parallelism buys capacity, not speed.
    """
    if micro_batches < 1 or stages < 1:
        raise SpecError("micro_batches and stages must be at least 1")
    return micro_batches / (micro_batches + stages - 1)


def micro_batches_for_utilisation(*, target: float, stages: int) -> int:
    """The fewest independent micro-batches that reach ``target`` utilisation.

    From m / (m + p - 1) >= u: m >= u (p - 1) / (1 - u). The documents' exercise:
    four stages at 80 % need 12.
    """
    if not 0 < target < 1:
        raise SpecError("target utilisation must be between 0 and 1 (exclusive)")
    return max(1, math.ceil(target * (stages - 1) / (1 - target) - 1e-9))


def ring_allreduce_bytes_per_rank(*, ranks: int, message_bytes: float) -> float:
    """2 (p - 1) M / p: what each rank sends in a ring all-reduce of an M-byte message.

    Reduce-scatter then all-gather, p - 1 steps each of M / p. The documents' example:
    p=4, M=8 MiB -> 12 MiB.
    """
    if ranks < 1:
        raise SpecError("ranks must be at least 1")
    return 2 * (ranks - 1) * message_bytes / ranks


def ring_allreduce_seconds(
    *, ranks: int, message_bytes: float, step_latency_s: float, bandwidth_bytes_per_s: float
) -> float:
    """t ~ 2 (p - 1) a + [2 (p - 1) / p] M / b, with a per-step latency and b bandwidth.

    The documents' example: p=4, a=3 us, b=100 GB/s, M=8 MiB -> 18 us + 125.8 us =
    143.8 us. Small messages (decode) are dominated by the latency term.
    """
    if bandwidth_bytes_per_s <= 0:
        raise SpecError("bandwidth must be positive")
    sent = ring_allreduce_bytes_per_rank(ranks=ranks, message_bytes=message_bytes)
    return 2 * (ranks - 1) * step_latency_s + sent / bandwidth_bytes_per_s


def moe_expert_utilisation(tokens_per_rank: Sequence[int]) -> float:
    """sum(n_r) / (p * max n_r): the busiest expert rank sets the pace.

    The documents' example: loads [640, 128, 128, 128] -> 1024 / (4 * 640) = 40 %;
    balanced [256] * 4 -> 100 %.
    """
    if not tokens_per_rank or any(n < 0 for n in tokens_per_rank):
        raise SpecError("tokens_per_rank must be non-empty and non-negative")
    busiest = max(tokens_per_rank)
    if busiest == 0:
        return 1.0
    return sum(tokens_per_rank) / (len(tokens_per_rank) * busiest)
