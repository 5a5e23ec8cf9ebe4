"""The capacity plan: per rank, weights, SGLang's static pool, the KV cache, and headroom.

Why before anything starts: a DGX Spark has 128 GB of unified memory that the CPU, the
OS and the GPU share, one Spark cannot hold the documents' 168.27 GB of weights, and a
plan that does not fit fails only after minutes of loading on every rank — or fits on
paper and then pushes the node into swap and memory pressure (the documents saw that at
12K-token inputs). The plan makes the arithmetic explicit, per rank, with SGLang's
meaning of each number:

- weights per rank: the layers of its stage, plus the embeddings on stage 0 and the
  final norm and head on the last stage (:mod:`~sparkllm.plan.weights`); with
  ``tensorParallel`` > 1 each of a stage's TP nodes loads 1/TP of what SGLang splits
  (attention projections, MoE experts, embeddings, head) and a whole copy of what it
  replicates (norms, router, attention down-projections);
- static budget = ``memFractionStatic`` x usable memory: what SGLang reserves for the
  weights AND the KV pool together (its ``--mem-fraction-static``);
- KV pool = static budget - weights; in tokens = pool / (layers x bytes per token per
  layer on that rank: a latent KV is whole on every TP rank, K/V heads are split)
  (:mod:`~sparkllm.plan.kv`). Every rank reports the smallest pool of the replica (the
  documents: 1,579,520 tokens on all three ranks);
- headroom = node memory - static budget: what stays outside SGLang's pool for the OS,
  activations (a 4,096-token prefill chunk), CUDA graphs, NCCL buffers and the page
  cache. It must be at least ``min_headroom_gb`` (default 16 GB, see below);
- book headroom = node memory - weights: the documents' own first figure (71.91 GB of
  128 on three nodes), shown for comparison, not used for the verdict.

Why a 16 GB minimum headroom: DGX OS with its services takes a few GB, the CUDA context
and kernel workspaces one to two, a 4K-token prefill chunk of a large MoE several, CUDA
graphs up to batch 4 and NCCL buffers about one each; 16 GB covers that with a margin.
It is a floor, not a guarantee: the documents saw memory pressure at 12K inputs with
64 GB outside the pool (fraction 0.50), which is why the admission cap, not this plan,
keeps inputs at 8K.

The approximation under TP: the split is by bytes (1/TP of every split tensor), which
is how SGLang shards them but ignores padding of vocabularies and expert dimensions to a
multiple of TP, and the per-rank activation and NCCL buffers TP adds are inside the
headroom, not modelled. The documents' two-node figures (84.14 GB per node, 43.86 GB
book headroom) hold for TP=2 and for PP=2 alike: the average is over all nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from sparkllm.api import InferenceClusterSpec, Reason
from sparkllm.plan.formulas import GB, AverageSplit, average_split
from sparkllm.plan.kv import KvBasis
from sparkllm.plan.partition import recommend_partition, sglang_default_partition, stage_ranges
from sparkllm.plan.table import render_plan_table
from sparkllm.plan.weights import WeightInventory

NODE_MEMORY_GB: Final = 128.0
MIN_HEADROOM_GB: Final = 16.0


@dataclass(frozen=True, slots=True)
class RankPlan:
    """One rank's memory, in GB of 10**9 bytes."""

    rank: int
    """The node rank: ``stage`` x tensorParallel + ``tp_rank`` (SGLang's --node-rank)."""
    layers: tuple[int, int]
    """[start, end) layer indices of this stage."""
    weights_gb: float
    static_budget_gb: float
    kv_pool_gb: float
    """Static budget minus weights; negative when the weights do not fit."""
    kv_tokens: int | None
    """Tokens this rank's pool could hold on its own (None without a KV basis)."""
    headroom_gb: float
    book_headroom_gb: float
    stage: int = 0
    tp_rank: int = 0

    @property
    def layer_count(self) -> int:
        return self.layers[1] - self.layers[0]


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    """The plan for one replica (every replica is the same)."""

    ranks: tuple[RankPlan, ...]
    node_memory_gb: float
    usable_memory_gb: float
    mem_fraction_static: float
    min_headroom_gb: float
    partition: tuple[int, ...]
    partition_source: str
    recommended_partition: tuple[int, ...]
    weights_source: str
    weights_exact: bool
    total_weight_gb: float
    average: AverageSplit
    kv_basis: KvBasis | None
    context_length: int
    max_running_requests: int
    problems: tuple[str, ...]
    notes: tuple[str, ...] = ()
    tensor_parallel: int = 1
    pipeline_parallel: int = 1

    @property
    def fits(self) -> bool:
        return not self.problems

    @property
    def kv_pool_tokens(self) -> int | None:
        """The pool every rank reports: the smallest of the ranks' pools."""
        tokens = [rank.kv_tokens for rank in self.ranks]
        return None if any(t is None for t in tokens) else min(t for t in tokens if t is not None)

    @property
    def reason(self) -> Reason:
        """The CapacityPlanned condition's reason."""
        return Reason.CAPACITY_FITS if self.fits else Reason.CAPACITY_EXCEEDED

    def condition_message(self) -> str:
        """One line for the CapacityPlanned condition."""
        if not self.fits:
            return "; ".join(self.problems)
        heaviest = max(self.ranks, key=lambda rank: rank.weights_gb)
        tokens = self.kv_pool_tokens
        pool = f", KV pool ~{tokens:,} tokens" if tokens is not None else ""
        return (
            f"every rank fits: heaviest rank {heaviest.rank} holds {heaviest.weights_gb:.2f} GB "
            f"of weights in a {heaviest.static_budget_gb:.2f} GB static budget{pool}, "
            f"{heaviest.headroom_gb:.2f} GB headroom of {self.node_memory_gb:g} GB"
        )

    def render_table(self) -> str:
        """The plan for humans (``sparkllm plan``)."""
        return render_plan_table(self)


def _kv_tokens(pool_gb: float, layers: int, basis: KvBasis | None, *, tp: int) -> int | None:
    if basis is None:
        return None
    # Rounded to 1e-6 before flooring, so float noise cannot cost a whole token.
    return max(0, int(round(pool_gb * GB / (layers * basis.per_tp_rank(tp)), 6)))


def _rank_word(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def _problems(
    ranks: Sequence[RankPlan], *, spec: InferenceClusterSpec, min_headroom_gb: float, usable: float
) -> list[str]:
    fraction = spec.engine.mem_fraction_static
    problems = [
        f"rank {rank.rank}: weights {rank.weights_gb:.2f} GB do not fit the static budget "
        f"{fraction:g} x {usable:g} GB = {rank.static_budget_gb:.2f} GB "
        "(spec.engine.memFractionStatic): no room for the KV cache"
        for rank in ranks
        if rank.kv_pool_gb <= 0
    ]
    short = [rank.rank for rank in ranks if rank.headroom_gb < min_headroom_gb]
    if short:
        problems.append(
            f"{_rank_word(short)}: only {ranks[short[0]].headroom_gb:.2f} GB of the node's "
            f"memory stays outside SGLang's static pool ({fraction:g} x {usable:g} GB), "
            f"below the {min_headroom_gb:g} GB minimum for the OS, activations, CUDA graphs "
            "and NCCL buffers: lower spec.engine.memFractionStatic"
        )
    window = spec.engine.context_length
    problems += [
        f"rank {rank.rank}: KV pool of {rank.kv_pool_gb:.2f} GB holds only {rank.kv_tokens:,} "
        f"tokens, less than one {window:,}-token window (spec.engine.contextLength)"
        for rank in ranks
        if rank.kv_pool_gb > 0 and rank.kv_tokens is not None and rank.kv_tokens < window
    ]
    return problems


def build_plan(
    spec: InferenceClusterSpec,
    *,
    inventory: WeightInventory,
    kv_basis: KvBasis | None,
    node_memory_gb: float = NODE_MEMORY_GB,
    usable_memory_gb: float | None = None,
    min_headroom_gb: float = MIN_HEADROOM_GB,
) -> CapacityPlan:
    """The plan from figures already gathered; pure."""
    engine, stages, tp = spec.engine, spec.engine.pipeline_parallel, spec.engine.tensor_parallel
    usable = node_memory_gb if usable_memory_gb is None else usable_memory_gb
    partition, source = _partition(spec)
    ranges = stage_ranges(partition)
    budget = engine.mem_fraction_static * usable
    per_node = inventory.node_bytes(ranges, tp=tp)
    ranks = [
        RankPlan(
            rank=stage * tp + tp_rank,  # SGLang: stage = node rank // tp, tp rank = % tp
            stage=stage,
            tp_rank=tp_rank,
            layers=layers,
            weights_gb=weight_bytes / GB,
            static_budget_gb=budget,
            kv_pool_gb=budget - weight_bytes / GB,
            kv_tokens=_kv_tokens(
                budget - weight_bytes / GB, layers[1] - layers[0], kv_basis, tp=tp
            ),
            headroom_gb=node_memory_gb - budget,
            book_headroom_gb=node_memory_gb - weight_bytes / GB,
        )
        for stage, (weight_bytes, layers) in enumerate(zip(per_node, ranges, strict=True))
        for tp_rank in range(tp)
    ]
    total = inventory.total_bytes / GB
    return CapacityPlan(
        ranks=tuple(ranks),
        node_memory_gb=node_memory_gb,
        usable_memory_gb=usable,
        mem_fraction_static=engine.mem_fraction_static,
        min_headroom_gb=min_headroom_gb,
        partition=partition,
        partition_source=source,
        recommended_partition=recommend_partition(
            inventory.layer_bytes,
            stages=stages,
            first_extra=inventory.first_rank_bytes,
            last_extra=inventory.last_rank_bytes,
        ),
        weights_source=inventory.source,
        weights_exact=inventory.exact,
        total_weight_gb=total,
        average=average_split(
            total_weight_gb=round(total, 2), nodes=stages * tp, node_memory_gb=node_memory_gb
        ),
        kv_basis=kv_basis,
        context_length=engine.context_length,
        max_running_requests=engine.max_running_requests,
        problems=tuple(_problems(ranks, spec=spec, min_headroom_gb=min_headroom_gb, usable=usable)),
        notes=_notes(inventory, num_layers=spec.model.num_layers, tp=tp),
        tensor_parallel=tp,
        pipeline_parallel=stages,
    )


def _partition(spec: InferenceClusterSpec) -> tuple[tuple[int, ...], str]:
    """The layers per stage SGLang will use, and where that split comes from."""
    if spec.engine.layer_partition is not None:
        return tuple(spec.engine.layer_partition), "spec.engine.layerPartition"
    stages, num_layers = spec.engine.pipeline_parallel, spec.model.num_layers
    partition = sglang_default_partition(num_layers=num_layers, stages=stages)
    return partition, "SGLang's even split (no spec.engine.layerPartition)"


def _notes(inventory: WeightInventory, *, num_layers: int, tp: int) -> tuple[str, ...]:
    """What the weights' inventory leaves out of the per-rank figures."""
    notes = []
    if tp > 1 and not inventory.replicated_layer_bytes:
        notes.append(
            f"tensorParallel {tp}: every weight is divided by {tp} (the tensors SGLang "
            "replicates on each TP rank, norms, router and attention down-projections, are "
            "known only from safetensors headers): a lower bound per node"
        )
    if inventory.not_loaded_bytes:
        notes.append(
            f"{inventory.not_loaded_bytes / GB:.2f} GB of tensors belong to layers beyond "
            f"{num_layers} (e.g. multi-token prediction) and are not loaded for serving"
        )
    if inventory.unclassified_bytes:
        notes.append(
            f"{inventory.unclassified_bytes / GB:.2f} GB of tensors are neither layers, "
            "embeddings nor head; counted on rank 0"
        )
    return tuple(notes)
