"""The capacity plan as text for humans: the output of ``sparkllm plan``.

Separate from the arithmetic so the numbers stay testable as numbers and the layout can
change without touching them. Every figure is labelled with its basis (where the weights
came from, how KV tokens were derived), because an estimate shown without its basis
gets quoted as a measurement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkllm.plan.capacity import CapacityPlan

_COLUMNS = (
    *("rank", "stage", "tp", "layers", "weights", "static", "KV pool", "KV tokens", "headroom"),
    "book",
)
_LEFT = 4  # rank, stage, tp, layers: left-aligned


def _partition(partition: tuple[int, ...]) -> str:
    return "/".join(str(count) for count in partition)


def _rows(plan: CapacityPlan) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for rank in plan.ranks:
        start, end = rank.layers
        tokens = "-" if rank.kv_tokens is None else f"{rank.kv_tokens:,}"
        rows.append(
            (
                str(rank.rank),
                str(rank.stage),
                str(rank.tp_rank),
                f"{start}-{end - 1} ({rank.layer_count})",
                f"{rank.weights_gb:.2f}",
                f"{rank.static_budget_gb:.2f}",
                f"{rank.kv_pool_gb:.2f}",
                tokens,
                f"{rank.headroom_gb:.2f}",
                f"{rank.book_headroom_gb:.2f}",
            )
        )
    return rows


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in [_COLUMNS, *rows]) for i in range(len(_COLUMNS))]
    lines = []
    for row in [_COLUMNS, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row[:_LEFT], widths, strict=False)]
        cells += [
            cell.rjust(width) for cell, width in zip(row[_LEFT:], widths[_LEFT:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def render_plan_table(plan: CapacityPlan) -> str:
    """The whole plan as aligned plain text, ending with the verdict."""
    average = plan.average
    weights_kind = "exact" if plan.weights_exact else "even split per layer, estimate"
    lines = [
        f"Capacity plan per replica: {len(plan.ranks)} ranks, one per DGX Spark "
        f"(tensorParallel {plan.tensor_parallel} x pipelineParallel {plan.pipeline_parallel}; "
        "memory in GB of 10^9 bytes)",
        f"  node memory {plan.node_memory_gb:g} GB unified; memFractionStatic "
        f"{plan.mem_fraction_static:g} x {plan.usable_memory_gb:g} GB = "
        f"{plan.ranks[0].static_budget_gb:.2f} GB static budget (weights + KV pool) per rank",
        f"  weights {plan.total_weight_gb:.2f} GB from {plan.weights_source} ({weights_kind})",
        f"  documents' first estimate: {plan.total_weight_gb:.2f} GB / {average.nodes} nodes = "
        f"{average.weights_gb:.2f} GB per node, book headroom {average.book_headroom_gb:.2f} GB "
        f"of {plan.node_memory_gb:g}",
        "",
        *_table(_rows(plan)),
        "",
        "  static = SGLang's reservation for weights + KV; headroom = node - static (OS, "
        "activations, CUDA graphs, NCCL); book = node - weights",
    ]
    tokens = plan.kv_pool_tokens
    if tokens is not None and plan.kv_basis is not None:
        lines.append(
            f"KV pool every rank reports (the smallest): {tokens:,} tokens = "
            f"{tokens / plan.context_length:.1f} full {plan.context_length:,}-token windows "
            f"(maxRunningRequests {plan.max_running_requests})"
        )
        lines.append(f"  basis: {plan.kv_basis.description}")
    else:
        lines.append(
            "KV pool in tokens: not estimated (no KV basis: pass --kv-bytes-per-token-layer "
            "or a model directory with config.json)"
        )
    lines.append(
        f"layer partition {_partition(plan.partition)} ({plan.partition_source}); "
        f"balanced by weight: {_partition(plan.recommended_partition)}"
    )
    lines.append(f"headroom minimum {plan.min_headroom_gb:g} GB per node")
    lines += [f"note: {note}" for note in plan.notes]
    lines.append("verdict: FITS" if plan.fits else "verdict: DOES NOT FIT")
    lines += [f"  - {problem}" for problem in plan.problems]
    return "\n".join(lines) + "\n"
