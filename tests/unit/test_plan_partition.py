"""Layer partitions: SGLang's default, and the weight-balanced recommendation."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkllm.errors import SpecError
from sparkllm.plan import recommend_partition, sglang_default_partition
from sparkllm.plan.partition import stage_ranges


@pytest.mark.parametrize(
    ("layers", "stages", "expected"),
    [(43, 3, (14, 14, 15)), (43, 2, (21, 22)), (10, 4, (2, 2, 3, 3)), (6, 3, (2, 2, 2))],
)
def test_sglang_default_gives_the_remainder_to_higher_ranks(
    layers: int, stages: int, expected: tuple[int, ...]
) -> None:
    assert sglang_default_partition(num_layers=layers, stages=stages) == expected


@pytest.mark.parametrize(
    ("layers", "stages", "expected"),
    [(43, 3, (14, 14, 15)), (43, 2, (21, 22)), (8, 8, (1,) * 8), (10, 1, (10,))],
)
def test_equal_layers_reproduce_the_documents_split(
    layers: int, stages: int, expected: tuple[int, ...]
) -> None:
    assert recommend_partition([1.0] * layers, stages=stages) == expected


def test_embeddings_and_head_shift_layers_to_the_middle() -> None:
    # A big vocabulary: embeddings and head each weigh about six layers.
    partition = recommend_partition([2592.0] * 6, stages=3, first_extra=16384, last_extra=16416)
    assert partition == (1, 4, 1)


def test_embeddings_alone_shift_layers_to_higher_ranks() -> None:
    assert recommend_partition([1.0] * 43, stages=3, first_extra=2.0) == (13, 15, 15)


def test_stage_ranges() -> None:
    assert stage_ranges((14, 14, 15)) == ((0, 14), (14, 28), (28, 43))


def test_more_stages_than_layers_is_refused() -> None:
    with pytest.raises(SpecError, match="cannot split 2 layers into 3"):
        recommend_partition([1.0, 1.0], stages=3)


def _heaviest(weights: list[int], partition: tuple[int, ...], first: int, last: int) -> int:
    loads = [sum(weights[a:b]) for a, b in stage_ranges(partition)]
    loads[0] += first
    loads[-1] += last
    return max(loads)


@given(
    weights=st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=9),
    stages=st.integers(min_value=1, max_value=4),
    first=st.integers(min_value=0, max_value=100),
    last=st.integers(min_value=0, max_value=100),
)
def test_recommendation_minimises_the_heaviest_stage(
    weights: list[int], stages: int, first: int, last: int
) -> None:
    if stages > len(weights):
        return
    got = recommend_partition(
        [float(w) for w in weights], stages=stages, first_extra=first, last_extra=last
    )
    assert sum(got) == len(weights)
    assert all(count >= 1 for count in got)
    cuts = combinations(range(1, len(weights)), stages - 1)
    best = min(
        _heaviest(
            weights,
            tuple(b - a for a, b in zip((0, *c), (*c, len(weights)), strict=True)),
            first,
            last,
        )
        for c in cuts
    )
    assert _heaviest(weights, got, first, last) == best
