"""Model integrity: is every rank's copy of the model complete, and are the copies equal?

The documents' acceptance item 2 ("model complete: all 46 shards, the index and
tokenizer files present, hashes identical on all three nodes"), split so the part that
needs a node runs on the node and the part that needs all nodes is pure:

- ``safetensors``: the file format's header, read with the standard library.
- ``layout``: the directory's structure (index, shards, config, tokenizer).
- ``checksums``: sha256 manifests, parallel hashing with progress, sampled hashes.
- ``summary``: the compact per-rank summary (termination message) and
  :func:`compare_rank_summaries`, the pure cross-rank comparison the operator runs.
- ``verify``: ``sparkllm verify-model``, the init container.
"""

from sparkllm.integrity.layout import LayoutReport, check_layout
from sparkllm.integrity.safetensors import (
    SafetensorsError,
    SafetensorsHeader,
    TensorEntry,
    read_header,
)
from sparkllm.integrity.summary import ModelSummary, SummaryError, compare_rank_summaries
from sparkllm.integrity.verify import VerifyRequest, verify_main, verify_model

__all__ = [
    "LayoutReport",
    "ModelSummary",
    "SafetensorsError",
    "SafetensorsHeader",
    "SummaryError",
    "TensorEntry",
    "VerifyRequest",
    "check_layout",
    "compare_rank_summaries",
    "read_header",
    "verify_main",
    "verify_model",
]
