"""Capacity planning: does one replica fit, rank by rank, in 128 GB per DGX Spark?

The CapacityPlanned condition and ``sparkllm plan`` (DESIGN.md, "Capacity plan"). The
arithmetic is pure and follows the source documents (SEEDS.md, "Capacity arithmetic"):

- ``formulas``: the documents' formulas (average split, pipeline utilisation, ring
  all-reduce, MoE expert utilisation), pinned to their worked examples.
- ``weights``: weight bytes per layer and per rank, from safetensors headers or a total.
- ``partition``: SGLang's default layer split and a weight-balanced recommendation.
- ``kv``: bytes per token per layer of the KV cache, and where that figure comes from.
- ``capacity``: the per-rank plan and its verdict; ``table``: its text rendering.
- ``planner``: :func:`plan_capacity`, which picks the figures' sources and builds the plan.

Pure throughout: nothing here reads a file. ``sparkllm plan`` (:mod:`sparkllm.plan_command`)
reads the manifest and the model directory and passes what it read in.

The names below load on first use (PEP 562): ``capacity`` imports ``sparkllm.api``
(pydantic, ~0.5 s of CPU), which a user of one module (the dev cluster's engine simulator
imports ``kv`` in each rank's process) need not pay for.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkllm.plan.capacity import MIN_HEADROOM_GB, CapacityPlan, RankPlan, build_plan
    from sparkllm.plan.formulas import (
        AverageSplit,
        average_split,
        micro_batches_for_utilisation,
        moe_expert_utilisation,
        pipeline_utilisation,
        ring_allreduce_bytes_per_rank,
        ring_allreduce_seconds,
    )
    from sparkllm.plan.partition import recommend_partition, sglang_default_partition
    from sparkllm.plan.planner import ModelFiles, plan_capacity

_MODULE_OF = {
    "AverageSplit": "sparkllm.plan.formulas",
    "CapacityPlan": "sparkllm.plan.capacity",
    "MIN_HEADROOM_GB": "sparkllm.plan.capacity",
    "ModelFiles": "sparkllm.plan.planner",
    "RankPlan": "sparkllm.plan.capacity",
    "average_split": "sparkllm.plan.formulas",
    "build_plan": "sparkllm.plan.capacity",
    "micro_batches_for_utilisation": "sparkllm.plan.formulas",
    "moe_expert_utilisation": "sparkllm.plan.formulas",
    "pipeline_utilisation": "sparkllm.plan.formulas",
    "plan_capacity": "sparkllm.plan.planner",
    "recommend_partition": "sparkllm.plan.partition",
    "ring_allreduce_bytes_per_rank": "sparkllm.plan.formulas",
    "ring_allreduce_seconds": "sparkllm.plan.formulas",
    "sglang_default_partition": "sparkllm.plan.partition",
}

__all__ = [
    "MIN_HEADROOM_GB",
    "AverageSplit",
    "CapacityPlan",
    "ModelFiles",
    "RankPlan",
    "average_split",
    "build_plan",
    "micro_batches_for_utilisation",
    "moe_expert_utilisation",
    "pipeline_utilisation",
    "plan_capacity",
    "recommend_partition",
    "ring_allreduce_bytes_per_rank",
    "ring_allreduce_seconds",
    "sglang_default_partition",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
