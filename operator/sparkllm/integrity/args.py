"""``sparkllm verify-model``'s options, one type for its parser and the init container.

The rank pods' ``verify-model`` init container (``render/ranks.py``) fills one in from the
spec and writes it with ``cli_args.command_line``; the command's parser is built from the
same fields (``integrity/verify.py``), so a flag is spelled, typed and defaulted once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Final, Literal

from sparkllm.cli_args import option

DEFAULT_TERMINATION_LOG: Final = "/dev/termination-log"
DEFAULT_JOBS: Final = min(4, os.cpu_count() or 1)
HashMode = Literal["sampled", "full"]


@dataclass(frozen=True, kw_only=True)
class VerifyModelArgs:
    """What ``sparkllm verify-model`` checks, in the order its pods write the flags."""

    COMMAND: ClassVar[tuple[str, ...]] = ("verify-model",)

    model_dir: Path = option("--model-dir", help="the model directory")
    expected_shards: int = option("--expected-shards", help="spec.model.expectedShards")
    expected_layers: int | None = option(
        "--expected-layers", default=None, help="spec.model.numLayers (optional)"
    )
    checksums: Path | None = option(
        "--checksums", default=None, help="sha256sum-format manifest (optional)"
    )
    hash: HashMode = option(
        "--hash",
        default="sampled",
        help="without a manifest: fingerprint large files by samples (default) or fully",
    )
    jobs: int = option("--jobs", default=DEFAULT_JOBS, help="hashing threads")
    termination_log: str = option(
        "--termination-log",
        default=DEFAULT_TERMINATION_LOG,
        help=f"where to write the JSON summary (default {DEFAULT_TERMINATION_LOG})",
    )
