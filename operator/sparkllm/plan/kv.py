"""How many bytes one token costs in the KV cache of one layer, and where that figure is from.

SGLang sizes its KV pool in bytes (what ``--mem-fraction-static`` leaves after the
weights) and reports it in tokens (``max_total_num_tokens``), so turning one into the
other needs the cache's bytes per token per layer. Three sources, best first:

1. Given by the caller (``--kv-bytes-per-token-layer``), e.g. from a real engine's log.
2. ``config.json``: an MLA model (DeepSeek) caches one latent of ``kv_lora_rank +
   qk_rope_head_dim`` values per token per layer; other models ``2 x
   num_key_value_heads x head_dim`` values. Two bytes each: SGLang's
   ``--kv-cache-dtype auto`` keeps the model's BF16 (an FP8 cache halves it).
3. The documents: all three ranks report 1,579,520 tokens at ``mem_fraction_static``
   0.57. With the documents' 168.27 GB split evenly, the heaviest rank (15 of 43 layers,
   58.70 GB) has 0.57 x 128 - 58.70 = 14.26 GB of pool, i.e. about 602 bytes per token
   per layer. That is a CALIBRATION (it reproduces the documents' figure by
   construction), useful to predict other fractions; it is consistent with a compressed
   MLA-style latent of 576 values stored in about one byte each, and rules out a dense
   BF16 cache, which for a model of this size would need tens of kilobytes.

Per tensor-parallel rank: an MLA latent (sources 2 and 3) is one vector per token that
every TP rank of a stage caches whole (SGLang's MLA pool is not split by heads), so TP
does not shrink it; K and V of ``num_key_value_heads`` heads are split over the TP ranks,
each holding ``max(1, heads // tp)`` of them (replicated when TP exceeds the heads).
A given figure (source 1) is taken as per rank, as an engine's log reports it.

One more figure lives here, so that nothing else models the pool on its own:
:func:`proportional_pool_tokens`, the documents' pool scaled in proportion to the
fraction. It is what a stand-in engine that knows no weights reports (the dev cluster's
simulator); the plan itself always subtracts the rank's weights (``capacity``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sparkllm.plan.formulas import GB

DOCUMENTED_KV_TOKENS: Final = 1_579_520
DOCUMENTED_MEM_FRACTION: Final = 0.57
DOCUMENTED_NODE_MEMORY_GB: Final = 128.0
DOCUMENTED_TOTAL_WEIGHT_GB: Final = 168.27
DOCUMENTED_NUM_LAYERS: Final = 43
DOCUMENTED_HEAVIEST_STAGE_LAYERS: Final = 15
KV_ELEMENT_BYTES: Final = 2


@dataclass(frozen=True, slots=True)
class KvBasis:
    """Bytes per token per layer, and a sentence saying where the number comes from."""

    bytes_per_token_layer: float
    description: str
    kv_heads: int | None = None
    """K/V heads the figure covers, split over TP ranks; None: a latent every rank holds."""

    def per_tp_rank(self, tp: int) -> float:
        """Bytes per token per layer on one of ``tp`` tensor-parallel ranks."""
        if self.kv_heads is None:
            return self.bytes_per_token_layer
        return self.bytes_per_token_layer * max(1, self.kv_heads // tp) / self.kv_heads


def implied_bytes_per_token_layer(*, kv_pool_bytes: float, layers: int, tokens: int) -> float:
    """The bytes per token per layer a reported pool implies (pool / (layers x tokens))."""
    return kv_pool_bytes / (layers * tokens)


def documented_basis() -> KvBasis:
    """The calibration from the documents' 1,579,520 tokens at 0.57 (see module docstring)."""
    budget = DOCUMENTED_MEM_FRACTION * DOCUMENTED_NODE_MEMORY_GB * GB
    heaviest = (
        DOCUMENTED_TOTAL_WEIGHT_GB * GB * DOCUMENTED_HEAVIEST_STAGE_LAYERS / DOCUMENTED_NUM_LAYERS
    )
    value = implied_bytes_per_token_layer(
        kv_pool_bytes=budget - heaviest,
        layers=DOCUMENTED_HEAVIEST_STAGE_LAYERS,
        tokens=DOCUMENTED_KV_TOKENS,
    )
    return KvBasis(
        bytes_per_token_layer=value,
        description=f"{value:.1f} bytes per token per layer, calibrated from the documents' "
        f"{DOCUMENTED_KV_TOKENS:,} tokens at {DOCUMENTED_MEM_FRACTION} (an estimate)",
    )


def proportional_pool_tokens(mem_fraction_static: float) -> int:
    """The documents' 1,579,520 tokens at 0.57, in proportion to ``mem_fraction_static``.

    Coarser than the plan (the real pool is what the fraction leaves after the weights),
    and meant only where no weights are known: it keeps a simulated engine's
    ``max_total_num_tokens`` at the documents' figure for the documents' fraction.
    """
    return round(DOCUMENTED_KV_TOKENS * mem_fraction_static / DOCUMENTED_MEM_FRACTION)


def _positive_int(config: Mapping[str, Any], key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def basis_from_config(config: Mapping[str, Any]) -> KvBasis | None:
    """From a Hugging Face ``config.json``; None when it does not say enough."""
    latent, rope = _positive_int(config, "kv_lora_rank"), _positive_int(config, "qk_rope_head_dim")
    if latent is not None and rope is not None:
        return KvBasis(
            bytes_per_token_layer=float((latent + rope) * KV_ELEMENT_BYTES),
            description=f"config.json MLA latent ({latent} + {rope} values) x "
            f"{KV_ELEMENT_BYTES} bytes (BF16 KV cache assumed; every TP rank holds it)",
        )
    heads = _positive_int(config, "num_attention_heads")
    kv_heads = _positive_int(config, "num_key_value_heads") or heads
    hidden = _positive_int(config, "hidden_size")
    head_dim = _positive_int(config, "head_dim") or (hidden // heads if hidden and heads else None)
    if kv_heads is None or head_dim is None:
        return None
    return KvBasis(
        bytes_per_token_layer=float(2 * kv_heads * head_dim * KV_ELEMENT_BYTES),
        description=f"config.json K and V of {kv_heads} heads x {head_dim} values x "
        f"{KV_ELEMENT_BYTES} bytes (BF16 KV cache assumed; heads split over TP ranks)",
        kv_heads=kv_heads,
    )
