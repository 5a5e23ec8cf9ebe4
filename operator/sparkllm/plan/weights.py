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

Tensor parallelism (``tensorParallel`` > 1): each node of a stage loads its 1/TP share
of what SGLang splits and a whole copy of what it replicates. In SGLang 0.5.23's
DeepSeek V4 model (``srt/models/deepseek_v4.py``) the split layers are the attention's
up- and output projections (``wq_b``, ``wo_a``, ``wo_b``: Column/RowParallelLinear), the
MoE experts (their intermediate dimension is divided by TP, ``moe_tp_size``), the
vocabulary-parallel embeddings (``VocabParallelEmbedding``, unless DP attention is on)
and the ``ParallelLMHead``; replicated are the attention's down-projections
(``wq_a``, ``wkv``, ``wqkv_a``: ``ReplicatedLinear``; DeepSeek V2/V3's ``q_a_proj`` and
``kv_a_proj_with_mqa`` likewise), the MoE router (``gate``), every norm and the attention
sinks. From safetensors headers those are recognised by name (:data:`_REPLICATED`);
from a total, nothing is known to be replicated and everything is divided by TP, so the
per-node figure is a lower bound by the replicated share (small: norms and down-
projections, about a percent of a large MoE).

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
# Tensors SGLang replicates on every tensor-parallel rank (module docstring).
_REPLICATED = re.compile(
    r"(?:^|\.)(?:wq_a|wkv|wqkv_a|q_a_proj|kv_a_proj_with_mqa|gate|attn_sink)(?:\.|$)"
    r"|norm(?:\.|$)"
)
DOCUMENTED_TOTAL_WEIGHT_GB: Final = 168.27


def replicated_across_tp(name: str) -> bool:
    """Whether SGLang keeps a whole copy of this tensor on every tensor-parallel rank."""
    return _REPLICATED.search(name) is not None


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
    replicated_layer_bytes: tuple[float, ...] = ()
    """The part of each layer's bytes every TP rank holds whole (empty: none known)."""
    replicated_first_bytes: float = 0.0
    replicated_last_bytes: float = 0.0

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

    def node_bytes(self, ranges: tuple[tuple[int, int], ...], *, tp: int) -> tuple[float, ...]:
        """Bytes ONE node of each stage loads with ``tp`` tensor-parallel ranks per stage:
        the split part divided by ``tp``, plus the replicated part whole."""
        replicated_layers = self.replicated_layer_bytes or (0.0,) * len(self.layer_bytes)
        last = len(ranges) - 1
        replicated = tuple(
            sum(replicated_layers[start:end])
            + (self.replicated_first_bytes if rank == 0 else 0.0)
            + (self.replicated_last_bytes if rank == last else 0.0)
            for rank, (start, end) in enumerate(ranges)
        )
        return tuple(
            (stage - whole) / tp + whole
            for stage, whole in zip(self.stage_bytes(ranges), replicated, strict=True)
        )


def inventory_from_headers(
    shards: ShardTensorBytes, *, num_layers: int, source: str
) -> WeightInventory:
    """Sum every tensor's bytes (from the shards' headers) into its place; pure."""
    layers = [0.0] * num_layers
    replicated_layers = [0.0] * num_layers
    totals = dict.fromkeys(Placement, 0.0)
    replicated = dict.fromkeys(Placement, 0.0)
    for tensors in shards.values():
        for name, nbytes in tensors.items():
            placement, index = classify_tensor(name, num_layers=num_layers)
            whole = replicated_across_tp(name)
            if placement is Placement.LAYER and index is not None:
                layers[index] += nbytes
                replicated_layers[index] += nbytes if whole else 0
            else:
                totals[placement] += nbytes
                replicated[placement] += nbytes if whole else 0
    return WeightInventory(
        source=source,
        layer_bytes=tuple(layers),
        first_rank_bytes=totals[Placement.FIRST] + totals[Placement.UNCLASSIFIED],
        last_rank_bytes=totals[Placement.LAST],
        not_loaded_bytes=totals[Placement.NOT_LOADED],
        unclassified_bytes=totals[Placement.UNCLASSIFIED],
        exact=True,
        replicated_layer_bytes=tuple(replicated_layers),
        # Unclassified tensors count as replicated: the conservative guess.
        replicated_first_bytes=replicated[Placement.FIRST] + totals[Placement.UNCLASSIFIED],
        replicated_last_bytes=replicated[Placement.LAST],
    )


def inventory_from_total(
    *, total_weight_gb: float, num_layers: int, source: str
) -> WeightInventory:
    """An even split of a total over the layers; pure."""
    if total_weight_gb <= 0:
        raise SpecError("total weight must be positive")
    per_layer = total_weight_gb * GB / num_layers
    return WeightInventory(source=source, layer_bytes=(per_layer,) * num_layers)
