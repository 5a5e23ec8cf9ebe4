"""Where the weight bytes are: per layer, on the first rank, on the last rank.

Two sources, best first:

1. The model directory's safetensors headers (read by the shell, ``sparkllm plan``, with
   :mod:`sparkllm.integrity.safetensors`, never the data, and passed in as tensor sizes):
   every tensor's bytes, mapped by name — ``…layers.{i}.…`` to layer i, embeddings to
   rank 0, the final norm and the output head to the last rank. This is exact for what
   the checkpoint stores.
2. A total (``--total-weight-gb``, default the documents' 168.27 GB for DeepSeek V4
   Flash) spread evenly over the layers. Embeddings and head are then not separated, so
   the per-rank figures are only as good as the documents' own average.

Tensors of layers at or beyond ``num_layers`` (e.g. DeepSeek's multi-token-prediction
layer, stored as ``model.layers.{num_layers}``) are not loaded for serving without
speculative decoding; they are counted as "not loaded". Any other tensor that is neither
a layer, an embedding nor the head is placed on rank 0 and counted as unclassified, so
that it is never silently dropped. With tied embeddings the last rank also needs the
embedding matrix; checkpoints that tie store it once, and the plan does not add it.

Pure: no file is read here (the plan must be computable from what the caller hands in).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

from sparkllm.errors import SpecError
from sparkllm.plan.formulas import GB

# Tensor sizes of a checkpoint: {shard file: {tensor name: bytes}}.
ShardTensorBytes = Mapping[str, Mapping[str, int]]

_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")
_FIRST = re.compile(r"(?:^|\.)(?:embed_tokens|embed|wte|word_embeddings|tok_embeddings)(?:\.|$)")
_LAST = re.compile(
    r"(?:^|\.)(?:lm_head|head|output|final_layernorm|ln_f)(?:\.|$)|^(?:model\.)?norm\."
)
DOCUMENTED_TOTAL_WEIGHT_GB: Final = 168.27


class Placement(Enum):
    """Which rank a tensor lives on, by its name."""

    LAYER = "layer"
    FIRST = "first"
    LAST = "last"
    NOT_LOADED = "not loaded"
    UNCLASSIFIED = "unclassified"


def classify_tensor(name: str, *, num_layers: int) -> tuple[Placement, int | None]:
    """(placement, layer index or None) of one tensor name; pure."""
    layer = _LAYER.search(name)
    if layer is not None:
        index = int(layer.group(1))
        if index >= num_layers:
            return Placement.NOT_LOADED, index
        return Placement.LAYER, index
    if _FIRST.search(name):
        return Placement.FIRST, None
    if _LAST.search(name):
        return Placement.LAST, None
    return Placement.UNCLASSIFIED, None


@dataclass(frozen=True, slots=True)
class WeightInventory:
    """Weight bytes by layer and by the ranks' extras, with where the figures came from."""

    source: str
    layer_bytes: tuple[float, ...]
    first_rank_bytes: float = 0.0
    """Embeddings, plus unclassified tensors (see the module docstring)."""
    last_rank_bytes: float = 0.0
    not_loaded_bytes: float = 0.0
    unclassified_bytes: float = 0.0
    exact: bool = False
    """True when read from the checkpoint's headers; False for an even split of a total."""

    @property
    def total_bytes(self) -> float:
        return sum(self.layer_bytes) + self.first_rank_bytes + self.last_rank_bytes

    def stage_bytes(self, ranges: tuple[tuple[int, int], ...]) -> tuple[float, ...]:
        """Bytes each stage loads, for [start, end) layer ranges in rank order."""
        last = len(ranges) - 1
        return tuple(
            sum(self.layer_bytes[start:end])
            + (self.first_rank_bytes if rank == 0 else 0.0)
            + (self.last_rank_bytes if rank == last else 0.0)
            for rank, (start, end) in enumerate(ranges)
        )


def inventory_from_headers(
    shards: ShardTensorBytes, *, num_layers: int, source: str
) -> WeightInventory:
    """Sum every tensor's bytes (from the shards' headers) into its place; pure."""
    layers = [0.0] * num_layers
    totals = dict.fromkeys(Placement, 0.0)
    for tensors in shards.values():
        for name, nbytes in tensors.items():
            placement, index = classify_tensor(name, num_layers=num_layers)
            if placement is Placement.LAYER and index is not None:
                layers[index] += nbytes
            else:
                totals[placement] += nbytes
    return WeightInventory(
        source=source,
        layer_bytes=tuple(layers),
        first_rank_bytes=totals[Placement.FIRST] + totals[Placement.UNCLASSIFIED],
        last_rank_bytes=totals[Placement.LAST],
        not_loaded_bytes=totals[Placement.NOT_LOADED],
        unclassified_bytes=totals[Placement.UNCLASSIFIED],
        exact=True,
    )


def inventory_from_total(
    *, total_weight_gb: float, num_layers: int, source: str
) -> WeightInventory:
    """An even split of a total over the layers; pure."""
    if total_weight_gb <= 0:
        raise SpecError("total weight must be positive")
    per_layer = total_weight_gb * GB / num_layers
    return WeightInventory(source=source, layer_bytes=(per_layer,) * num_layers)
