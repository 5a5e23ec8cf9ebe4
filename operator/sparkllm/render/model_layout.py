"""Where a node keeps its copy of ``spec.model.source``: one directory per source digest.

Why a directory per digest: a new revision is staged BESIDE the copy the replicas serve
from (issue 31, item 4), and replicas roll over to it one at a time, so for a while a
node holds both; and the copy before the current one is kept for a revert without a
download (the cleaning rule, docs/model-staging.md). Every pod that reads the model (the
ranks, the gateway, the benchmark and acceptance Jobs) mounts the directory of the
digest it runs at the container path ``spec.model.path``, so engine flags, verify-model
and the tokenizer paths never name a digest. The stage writes the same directory (its
``--target``); its staging directory, ``<target's parent>/.staging/<digest>``, is on the
same file system, so the final rename stays atomic.

Without a source the model is where the spec says, ``spec.model.path`` (as before).
Pure: one rule, used by the staging Jobs and the pods alike.
"""

from __future__ import annotations

import hashlib
from pathlib import PurePosixPath

from sparkllm.api import InferenceCluster
from sparkllm.api.model_staging import source_identity
from sparkllm.staging.args import COPIES_DIR  # the clean command checks the same name


def staging_digest(ic: InferenceCluster) -> str:
    """10 hex of what the source holds and the target path: what a node's copy is a copy
    of (``source_identity``: not how it is fetched or spread)."""
    source = ic.spec.model.source
    assert source is not None  # only called with a source
    text = f"{source_identity(source)}\n{ic.spec.model.path}"
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def copy_dir(model_path: str, digest: str) -> str:
    """``<parent of model_path>/.sparkllm-models/<basename>/<digest>``: digest's copy."""
    path = PurePosixPath(model_path)
    return str(path.parent / COPIES_DIR / path.name / digest)


def host_model_dir(ic: InferenceCluster, digest: str | None = None) -> str:
    """The host directory a pod mounts at ``spec.model.path``: with a source, the copy of
    ``digest`` (default: the current source's); without one, ``spec.model.path``."""
    if ic.spec.model.source is None:
        return ic.spec.model.path
    return copy_dir(ic.spec.model.path, digest or staging_digest(ic))


__all__ = ["COPIES_DIR", "copy_dir", "host_model_dir", "staging_digest"]
