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
"""

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
