"""``plan_capacity``: gather the figures the plan needs, then build it. Pure.

The step between what the caller knows and the pure :func:`~sparkllm.plan.capacity.build_plan`:
it chooses where the weights and the KV basis come from. It reads nothing itself: the
model directory's ``config.json`` and safetensors headers, when there is one, are read
by the shell (``sparkllm plan``, :mod:`sparkllm.plan_command`) and handed in as
:class:`ModelFiles`, so the plan is a function of its inputs and is tested with plain
values.

Where the total comes from without a directory: a plan input (``total_weight_gb``,
``--total-weight-gb``), defaulting to the documents' 168.27 GB for the DeepSeek V4 Flash
sample. The operator usually cannot read the model directory (a hostPath on the Spark
nodes), so for any other model the CapacityPlanned condition takes the figure from the
spec (``spec.model.weightsGB``), passed as ``total_weight_gb``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparkllm.api import InferenceClusterSpec
from sparkllm.plan.capacity import MIN_HEADROOM_GB, NODE_MEMORY_GB, CapacityPlan, build_plan
from sparkllm.plan.kv import KvBasis, basis_from_config, documented_basis
from sparkllm.plan.weights import (
    DOCUMENTED_TOTAL_WEIGHT_GB,
    ShardTensorBytes,
    WeightInventory,
    inventory_from_headers,
    inventory_from_total,
)


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """What the plan uses from a model directory, already read and parsed by the caller."""

    config: Mapping[str, object]
    """``config.json`` (empty when the directory has none)."""
    shards: ShardTensorBytes
    """Every shard's tensors and their bytes, from the safetensors headers."""
    source: str
    """Where they were read, for the plan's text, e.g. ``safetensors headers of 3 shard(s)
    in /models/x``."""


def _explicit_basis(value: float) -> KvBasis:
    return KvBasis(
        bytes_per_token_layer=value, description=f"{value:g} bytes per token per layer (given)"
    )


def plan_capacity(
    spec: InferenceClusterSpec,
    *,
    model: ModelFiles | None = None,
    total_weight_gb: float | None = None,
    node_memory_gb: float = NODE_MEMORY_GB,
    usable_memory_gb: float | None = None,
    min_headroom_gb: float = MIN_HEADROOM_GB,
    kv_bytes_per_token_layer: float | None = None,
) -> CapacityPlan:
    """The capacity plan of one replica of ``spec``.

    Weights come from ``model``'s safetensors headers when given, else from
    ``total_weight_gb`` spread over the layers (default: the documents' 168.27 GB). The
    KV basis is ``kv_bytes_per_token_layer`` when given, else ``model``'s
    ``config.json``, else — only for the documents' default figures — the calibration
    from their 1,579,520 tokens at 0.57.
    """
    num_layers = spec.model.num_layers
    basis = None if kv_bytes_per_token_layer is None else _explicit_basis(kv_bytes_per_token_layer)
    inventory: WeightInventory
    if model is not None:
        inventory = inventory_from_headers(model.shards, num_layers=num_layers, source=model.source)
        basis = basis or basis_from_config(model.config)
    elif total_weight_gb is not None:
        inventory = inventory_from_total(
            total_weight_gb=total_weight_gb,
            num_layers=num_layers,
            source=f"the plan input total_weight_gb={total_weight_gb:g}",
        )
    else:
        inventory = inventory_from_total(
            total_weight_gb=DOCUMENTED_TOTAL_WEIGHT_GB,
            num_layers=num_layers,
            source="the documents' weight index (DeepSeek V4 Flash NVFP4, 46 shards)",
        )
        basis = basis or documented_basis()
    return build_plan(
        spec,
        inventory=inventory,
        kv_basis=basis,
        node_memory_gb=node_memory_gb,
        usable_memory_gb=usable_memory_gb,
        min_headroom_gb=min_headroom_gb,
    )
