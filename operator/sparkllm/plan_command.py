"""``sparkllm plan``: the shell around the pure capacity plan — it reads, the plan computes.

Why a module of its own: :mod:`sparkllm.plan` must be a function of its inputs (no file
reads), so that the operator's CapacityPlanned condition and the tests compute it from
plain values. A person at a terminal, though, points the command at a manifest and a
model directory. This module does that reading — the manifest, the model's
``config.json``, the weight index and every shard's safetensors header (never the
tensor data, with :mod:`sparkllm.integrity.safetensors`) — and hands the parsed figures
to :func:`sparkllm.plan.plan_capacity` as :class:`~sparkllm.plan.planner.ModelFiles`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypedDict, Unpack

from sparkllm import plan
from sparkllm.api import InferenceClusterSpec, validate_inference_cluster
from sparkllm.errors import SparkllmError, SpecError
from sparkllm.integrity.layout import INDEX_FILE, SINGLE_SHARD_FILE
from sparkllm.integrity.safetensors import SafetensorsError, read_header
from sparkllm.manifest_file import read_manifest
from sparkllm.plan.capacity import MIN_HEADROOM_GB, NODE_MEMORY_GB, CapacityPlan
from sparkllm.plan.planner import ModelFiles
from sparkllm.plan.weights import DOCUMENTED_TOTAL_WEIGHT_GB

EXIT_FITS = 0
EXIT_DOES_NOT_FIT = 1
EXIT_ERROR = 2


def _read_config(model_dir: Path) -> dict[str, object]:
    try:
        document = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise SpecError(f"{model_dir / 'config.json'}: {exc}") from exc
    return document if isinstance(document, dict) else {}


def _shard_names(model_dir: Path) -> list[str]:
    index_path = model_dir / INDEX_FILE
    if index_path.is_file():
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
            return sorted(set(index["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SpecError(f"{index_path}: cannot read the weight map: {exc}") from exc
    if (model_dir / SINGLE_SHARD_FILE).is_file():
        return [SINGLE_SHARD_FILE]
    raise SpecError(f"{model_dir}: neither {INDEX_FILE} nor {SINGLE_SHARD_FILE} is present")


def read_model_files(model_dir: Path) -> ModelFiles:
    """``config.json`` and every shard's tensor sizes under ``model_dir``; SpecError naming
    what cannot be read."""
    names = _shard_names(model_dir)
    try:
        headers = {name: read_header(model_dir / name, label=name) for name in names}
    except SafetensorsError as exc:
        raise SpecError(f"{model_dir}: {exc}") from exc
    shards = {
        name: {tensor: entry.nbytes for tensor, entry in header.tensors.items()}
        for name, header in headers.items()
    }
    return ModelFiles(
        config=_read_config(model_dir),
        shards=shards,
        source=f"safetensors headers of {len(names)} shard(s) in {model_dir}",
    )


class PlanOptions(TypedDict, total=False):
    """The plan's other inputs, as :func:`sparkllm.plan.plan_capacity` takes them."""

    total_weight_gb: float | None
    node_memory_gb: float
    usable_memory_gb: float | None
    min_headroom_gb: float
    kv_bytes_per_token_layer: float | None


def plan_capacity(
    spec: InferenceClusterSpec, *, model_dir: Path | None = None, **options: Unpack[PlanOptions]
) -> CapacityPlan:
    """:func:`sparkllm.plan.plan_capacity` with ``model_dir`` read first (when given)."""
    model = None if model_dir is None else read_model_files(model_dir)
    return plan.plan_capacity(spec, model=model, **options)


def load_spec(path: Path) -> InferenceClusterSpec:
    """The validated spec of the InferenceCluster manifest at ``path``."""
    document = read_manifest(path)
    document.setdefault("metadata", {"name": "plan"})
    return validate_inference_cluster(document).spec


def _figure(*, zero: bool) -> Callable[[str], float]:
    """An argparse type: a finite number, above 0 (or at least 0 when ``zero``); the
    plan divides by some and rounds others, so nan, inf or a negative memory would be a
    traceback or a nonsense table rather than a one-line usage error."""
    bound = "at least 0" if zero else "above 0"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
            raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number {bound}")
        return value

    return parse


_POSITIVE = _figure(zero=False)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add ``sparkllm plan``'s options to ``parser``."""
    parser.add_argument("-f", "--file", required=True, type=Path, help="InferenceCluster manifest")
    parser.add_argument(
        "--model-dir", type=Path, help="model directory: weights from its safetensors headers"
    )
    parser.add_argument(
        "--total-weight-gb",
        type=_POSITIVE,
        help=f"total weights without a model directory (default {DOCUMENTED_TOTAL_WEIGHT_GB})",
    )
    parser.add_argument("--node-memory-gb", type=_POSITIVE, default=NODE_MEMORY_GB)
    parser.add_argument(
        "--usable-memory-gb",
        type=_POSITIVE,
        help="memory SGLang's fraction applies to, at most the node memory (default: the "
        "node memory)",
    )
    parser.add_argument("--min-headroom-gb", type=_figure(zero=True), default=MIN_HEADROOM_GB)
    parser.add_argument("--kv-bytes-per-token-layer", type=_POSITIVE)


def run(args: argparse.Namespace) -> int:
    """Print the plan; 0 when it fits, 1 when it does not, 2 on an error."""
    try:
        usable = args.usable_memory_gb
        if usable is not None and usable > args.node_memory_gb:
            raise SpecError(
                f"--usable-memory-gb {usable:g} is more than the node's memory "
                f"(--node-memory-gb {args.node_memory_gb:g})"
            )
        capacity = plan_capacity(
            load_spec(args.file),
            model_dir=args.model_dir,
            total_weight_gb=args.total_weight_gb,
            node_memory_gb=args.node_memory_gb,
            usable_memory_gb=args.usable_memory_gb,
            min_headroom_gb=args.min_headroom_gb,
            kv_bytes_per_token_layer=args.kv_bytes_per_token_layer,
        )
    except SparkllmError as exc:
        print(f"sparkllm plan: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(capacity.render_table(), end="")
    return EXIT_FITS if capacity.fits else EXIT_DOES_NOT_FIT


def plan_main(argv: Sequence[str] | None = None) -> int:
    """``sparkllm plan -f cluster.yaml [--model-dir DIR]``; argv excludes the subcommand."""
    parser = argparse.ArgumentParser(
        prog="sparkllm plan", description="Per-rank memory plan of an InferenceCluster."
    )
    configure_parser(parser)
    return run(parser.parse_args(argv))
