"""``sparkllm stage-model``'s options: one frozen type for its parser and the operator's Jobs.

Why a module of its own: the operator's renderer (``render/model_staging.py``) writes the
command the staging Jobs run, and ``render`` sits under ``reconcile.decide``, which may
import nothing doing I/O; ``staging.command`` imports the servers and the downloads. So the
options live here, with no imports beyond ``cli_args``, and both sides take them from here
(``tests/unit/test_command_args.py`` writes every field and reads it back).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Final

from sparkllm.cli_args import option

DEFAULT_LISTEN: Final = "0.0.0.0:8390"
# Where a node keeps every copy of a source's model, one directory per digest:
# <parent of spec.model.path>/.sparkllm-models/<name>/<digest> (render/model_layout.py);
# ``--clean`` works only under it.
COPIES_DIR: Final = ".sparkllm-models"


@dataclass(frozen=True, kw_only=True)
class StageModelArgs:
    """``sparkllm stage-model``'s options, for its parser and the staging Jobs' renderer."""

    COMMAND: ClassVar[tuple[str, ...]] = ("stage-model",)

    target: Path = option("--target", help="the model directory to create (spec.model.path)")
    source: str | None = option(
        "--source", default=None, help="spec.model.source as JSON (the downloading node)"
    )
    peer: str | None = option(
        "--peer", default=None, help="a peer's --serve URL to copy from (the other nodes)"
    )
    expected_shards: int | None = option(
        "--expected-shards", default=None, help="spec.model.expectedShards: run verify-model"
    )
    expected_layers: int | None = option(
        "--expected-layers", default=None, help="spec.model.numLayers (with --expected-shards)"
    )
    local_address: str | None = option(
        "--local-address",
        default=None,
        help="with --peer: copy from this node's address on the group's link",
    )
    ca_file: Path | None = option(
        "--ca-file", default=None, help="PEM bundle to trust for https (besides the system's)"
    )
    progress_file: Path | None = option(
        "--progress-file", default=None, help="keep the latest progress record here"
    )
    serve: bool = option("--serve", default=False, help="serve the finished --target to peers")
    listen: str = option("--listen", default=DEFAULT_LISTEN, help="with --serve: ADDR:PORT")
    clean: bool = option(
        "--clean",
        default=False,
        help="remove this model's other copies beside the finished --target (the cleaning rule)",
    )
    keep_previous: int = option(
        "--keep-previous",
        default=1,
        help="with --clean: how many other finished copies to keep, newest first",
    )
