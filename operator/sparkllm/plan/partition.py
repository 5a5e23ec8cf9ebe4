"""Layer partitions: SGLang's default split, and a recommended one that balances weights.

Why recommend one: pipeline stages are not equal. Rank 0 also holds the token
embeddings and the last rank the final norm and the output head (BF16 in the documents'
model), so equal layer counts give unequal memory, and the fullest rank fixes the KV
pool of every rank (they all report the smallest). SGLang's docs therefore suggest
larger partitions on higher ranks; the documents ran 14 / 14 / 15.

The recommendation is the contiguous split into ``stages`` non-empty stages that first
minimises the heaviest stage, then, among those, is most even (smallest sum of squared
stage weights), and among equals puts more layers on higher ranks. For 43 equal layers
on 3 stages that is the documents' 14 / 14 / 15. Dynamic programming, O(stages x
layers^2): instant for real models (tens to a few hundred layers).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

from sparkllm.errors import SpecError

_RELATIVE_TIE = 1e-9


def sglang_default_partition(*, num_layers: int, stages: int) -> tuple[int, ...]:
    """What SGLang does without SGLANG_PP_LAYER_PARTITION: the last ``L % p`` stages get +1."""
    base, remainder = divmod(num_layers, stages)
    return tuple(base + (1 if stage >= stages - remainder else 0) for stage in range(stages))


def stage_ranges(partition: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """[start, end) layer indices of each stage."""
    ends = list(accumulate(partition))
    return tuple((end - count, end) for count, end in zip(partition, ends, strict=True))


def _better(candidate: float, best: float) -> bool:
    if best == float("inf"):
        return candidate < best
    return candidate < best - _RELATIVE_TIE * max(abs(best), 1.0)


def recommend_partition(
    layer_weights: Sequence[float],
    *,
    stages: int,
    first_extra: float = 0.0,
    last_extra: float = 0.0,
) -> tuple[int, ...]:
    """The balanced partition of ``layer_weights`` (one per layer) into ``stages`` stages.

    ``first_extra`` is added to stage 0 (embeddings), ``last_extra`` to the last stage
    (final norm, head); with one stage both apply to it.
    """
    layers = len(layer_weights)
    if not 1 <= stages <= layers:
        raise SpecError(f"cannot split {layers} layers into {stages} non-empty stages")
    prefix = [0.0, *accumulate(layer_weights)]

    def cost(stage: int, start: int, end: int) -> float:
        extra = (first_extra if stage == 0 else 0.0) + (last_extra if stage == stages - 1 else 0.0)
        return prefix[end] - prefix[start] + extra

    inf = float("inf")
    # Pass 1: the smallest possible heaviest stage.
    heaviest = [[inf] * (layers + 1) for _ in range(stages + 1)]
    heaviest[0][0] = 0.0
    for stage in range(1, stages + 1):
        for end in range(stage, layers - (stages - stage) + 1):
            for start in range(stage - 1, end):
                value = max(heaviest[stage - 1][start], cost(stage - 1, start, end))
                heaviest[stage][end] = min(heaviest[stage][end], value)
    bound = heaviest[stages][layers] * (1 + _RELATIVE_TIE)
    # Pass 2: within that bound, the most even split; ties favour longer later stages.
    squares = [[inf] * (layers + 1) for _ in range(stages + 1)]
    choice = [[0] * (layers + 1) for _ in range(stages + 1)]
    squares[0][0] = 0.0
    for stage in range(1, stages + 1):
        for end in range(stage, layers - (stages - stage) + 1):
            for start in range(stage - 1, end):  # ascending start = longest last stage first
                weight = cost(stage - 1, start, end)
                if weight > bound or squares[stage - 1][start] == inf:
                    continue
                value = squares[stage - 1][start] + weight * weight
                if _better(value, squares[stage][end]):
                    squares[stage][end], choice[stage][end] = value, start
    partition = []
    end = layers
    for stage in range(stages, 0, -1):
        start = choice[stage][end]
        partition.append(end - start)
        end = start
    return tuple(reversed(partition))
