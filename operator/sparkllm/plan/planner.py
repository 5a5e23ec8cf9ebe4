"""``plan_capacity`` and ``sparkllm plan``: gather the figures, then build the plan.

The thin shell around the pure :func:`~sparkllm.plan.capacity.build_plan`: it reads the
model directory's safetensors headers and ``config.json`` when a directory is given, and
otherwise uses a total weight figure.

Where the total comes from without a directory: a plan input (``total_weight_gb``,
``--total-weight-gb``), defaulting to the documents' 168.27 GB for the DeepSeek V4 Flash
sample. The operator usually cannot read the model directory (a hostPath on the Spark
nodes), so for any other model the CapacityPlanned condition needs the figure from the
spec: an optional ``spec.model`` weight-size field is proposed for that (the API is not
this package's to change); until then the caller passes ``total_weight_gb``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from sparkllm.api import InferenceClusterSpec, validate_inference_cluster
from sparkllm.errors import SparkllmError, SpecError
from sparkllm.plan.capacity import MIN_HEADROOM_GB, NODE_MEMORY_GB, CapacityPlan, build_plan
from sparkllm.plan.kv import KvBasis, basis_from_config, documented_basis
from sparkllm.plan.weights import (
    DOCUMENTED_TOTAL_WEIGHT_GB,
    WeightInventory,
    inventory_from_total,
    load_inventory,
)

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


def _explicit_basis(value: float) -> KvBasis:
    return KvBasis(
        bytes_per_token_layer=value, description=f"{value:g} bytes per token per layer (given)"
    )


def plan_capacity(
    spec: InferenceClusterSpec,
    *,
    model_dir: Path | None = None,
    total_weight_gb: float | None = None,
    node_memory_gb: float = NODE_MEMORY_GB,
    usable_memory_gb: float | None = None,
    min_headroom_gb: float = MIN_HEADROOM_GB,
    kv_bytes_per_token_layer: float | None = None,
) -> CapacityPlan:
    """The capacity plan of one replica of ``spec``.

    Weights come from ``model_dir``'s safetensors headers when given (SpecError if it
    cannot be read), else from ``total_weight_gb`` spread over the layers (default: the
    documents' 168.27 GB). The KV basis is ``kv_bytes_per_token_layer`` when given, else
    ``config.json`` of ``model_dir``, else — only for the documents' default figures —
    the calibration from their 1,579,520 tokens at 0.57.
    """
    num_layers = spec.model.num_layers
    basis = None if kv_bytes_per_token_layer is None else _explicit_basis(kv_bytes_per_token_layer)
    inventory: WeightInventory
    if model_dir is not None:
        inventory = load_inventory(model_dir, num_layers=num_layers)
        basis = basis or basis_from_config(_read_config(model_dir))
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


def load_spec(path: Path) -> InferenceClusterSpec:
    """The validated spec of the InferenceCluster manifest at ``path``."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"cannot read {path}: {exc}") from exc
    if not isinstance(document, dict):
        raise SpecError(f"{path}: expected one InferenceCluster object")
    document.setdefault("metadata", {"name": "plan"})
    return validate_inference_cluster(document).spec


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add ``sparkllm plan``'s options to ``parser``."""
    parser.add_argument("-f", "--file", required=True, type=Path, help="InferenceCluster manifest")
    parser.add_argument(
        "--model-dir", type=Path, help="model directory: weights from its safetensors headers"
    )
    parser.add_argument(
        "--total-weight-gb",
        type=float,
        help=f"total weights without a model directory (default {DOCUMENTED_TOTAL_WEIGHT_GB})",
    )
    parser.add_argument("--node-memory-gb", type=float, default=NODE_MEMORY_GB)
    parser.add_argument(
        "--usable-memory-gb",
        type=float,
        help="memory SGLang's fraction applies to (default: the node memory)",
    )
    parser.add_argument("--min-headroom-gb", type=float, default=MIN_HEADROOM_GB)
    parser.add_argument("--kv-bytes-per-token-layer", type=float)


def run(args: argparse.Namespace) -> int:
    """Print the plan; 0 when it fits, 1 when it does not, 2 on an error."""
    try:
        plan = plan_capacity(
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
    print(plan.render_table(), end="")
    return EXIT_FITS if plan.fits else EXIT_DOES_NOT_FIT


def plan_main(argv: Sequence[str] | None = None) -> int:
    """``sparkllm plan -f cluster.yaml [--model-dir DIR]``; argv excludes the subcommand."""
    parser = argparse.ArgumentParser(
        prog="sparkllm plan", description="Per-rank memory plan of an InferenceCluster."
    )
    configure_parser(parser)
    return run(parser.parse_args(argv))
