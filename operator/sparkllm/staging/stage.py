"""One node's stage: check space, fetch into a staging directory, verify, move into place.

Why a staging directory beside the final one (``<parent>/.staging/<name>``): ranks read
``spec.model.path`` and must never see a partial copy (issue 31: a group restart-looping
on a half-downloaded model). The files land in the staging directory; only when every
file matched its size and hash and ``verify-model``'s check passed is the directory
renamed to the target in one ``rename`` (same file system, atomic). A rerun resumes what
the staging directory (or the Hub's cache) holds. A finished target carries the
manifest peers copy from (:data:`~sparkllm.staging.serve.MANIFEST_FILE`, hidden: the
integrity check ignores dot files), and a rerun on a finished target does nothing.

The sources: ``spec.model.source`` (huggingFace, s3, https) for the node that downloads,
or a peer's URL for the others (``plan.plan_group`` says which). Credentials come from
the environment (the Job sets them from the spec's Secrets): ``HF_TOKEN``,
``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from sparkllm.api.model_staging import ModelSourceSpec, source_identity
from sparkllm.integrity.verify import VerifyRequest, verify_model
from sparkllm.staging.errors import StageError, from_os_error
from sparkllm.staging.http_fetch import (
    head_sizes,
    http_client,
    http_opener,
    https_files,
    peer_files,
)
from sparkllm.staging.plan import StageReason, StageState
from sparkllm.staging.progress import Progress
from sparkllm.staging.serve import MANIFEST_FILE
from sparkllm.staging.transfer import Fetched, fetch_resumable

STAGING_DIR: Final = ".staging"
HASH_CHUNK: Final = 8 * 1024 * 1024
FreeBytes = Callable[[Path], int]


def disk_free_bytes(path: Path) -> int:
    """Free bytes for an unprivileged writer on ``path``'s file system."""
    return shutil.disk_usage(path).free


@dataclass(frozen=True, kw_only=True)
class StageRequest:
    """What to stage where. Exactly one of ``source`` and ``peer``."""

    target: Path
    source: ModelSourceSpec | None = None
    peer: str | None = None
    expected_shards: int | None = None
    expected_layers: int | None = None
    ca_file: Path | None = None
    local_address: str | None = None
    environ: Mapping[str, str] = field(default_factory=dict)
    free_bytes: FreeBytes = disk_free_bytes
    wall: Callable[[], float] = time.time  # the manifest's stagedAt (--clean's "newest")


def staging_path(target: Path) -> Path:
    """Where ``target``'s files are written until they are verified."""
    return target.parent / STAGING_DIR / target.name


def stage_model(request: StageRequest, progress: Progress) -> dict[str, Fetched]:
    """Stage the model at ``request.target``; raises StageError with the reason."""
    target = request.target
    if (target / MANIFEST_FILE).is_file():
        _same_source(request)
        progress.set_stage(StageState.READY)
        progress.emit("done", message=f"{target} is already staged")
        return {}
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        # an empty directory (a hostPath made in advance) is replaced by the rename
        raise StageError(
            StageReason.INVALID_SOURCE,
            f"{target} exists and is not a staged copy: move it away, or drop model.source",
        )
    staging = staging_path(target)
    try:
        staging.mkdir(parents=True, exist_ok=True)
        fetched = _fetch(request, staging, progress)
        _remove_strays(staging, keep=set(fetched))
        progress.set_stage(StageState.VERIFYING)
        _verify(request, staging, fetched)
        manifest = [
            {"path": path, "size": f.size, "sha256": f.sha256}
            for path, f in sorted(fetched.items())
        ]
        record: dict[str, object] = {"files": manifest, "stagedAt": round(request.wall(), 3)}
        if request.source is not None:
            record["source"] = source_key(request.source)
        (staging / MANIFEST_FILE).write_text(json.dumps(record), encoding="utf-8")
        os.replace(staging, target)
    except OSError as exc:
        raise from_os_error(exc, what=str(staging)) from exc
    progress.set_stage(StageState.READY)
    progress.emit("done", files=len(fetched))
    return fetched


def source_key(source: ModelSourceSpec) -> str:
    """16 hex naming what a copy was downloaded from (``source_identity``)."""
    return hashlib.sha256(source_identity(source).encode()).hexdigest()[:16]


def _same_source(request: StageRequest) -> None:
    """A finished copy counts as staged only for the source it came from: a new revision
    (or bucket, or URL list) at the same path must not be answered with the old files.
    A copy made from a peer, or by a stage that recorded no source, is taken as it is."""
    if request.source is None:
        return
    path = request.target / MANIFEST_FILE
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise from_os_error(exc, what=str(path)) from exc
    except ValueError as exc:
        raise StageError(StageReason.INVALID_SOURCE, f"{path}: not a stage's manifest") from exc
    staged_from = recorded.get("source") if isinstance(recorded, dict) else None
    if staged_from is not None and staged_from != source_key(request.source):
        raise StageError(
            StageReason.INVALID_SOURCE,
            f"{request.target} holds a copy of another source (staged from {staged_from}, "
            f"asked for {source_key(request.source)}): give the new source a new model.path, "
            "or move the old copy away",
        )


def _remove_strays(staging: Path, *, keep: set[str]) -> None:
    """Files an earlier run left that this source does not have: never moved into place."""
    for path in sorted(staging.rglob("*"), reverse=True):
        relative = path.relative_to(staging).as_posix()
        if path.is_file() and relative not in keep:
            path.unlink()


def _fetch(request: StageRequest, staging: Path, progress: Progress) -> dict[str, Fetched]:
    source = request.source
    if (source is None) == (request.peer is None):
        raise StageError(StageReason.INVALID_SOURCE, "give exactly one of a source or a peer")
    if source is not None and source.hugging_face is not None:
        return _fetch_hub(request, source, staging, progress)
    if source is not None and source.s3 is not None:
        return _fetch_s3(request, source, staging, progress)
    local = request.local_address if request.peer is not None else None
    with http_client(ca_file=request.ca_file, local_address=local) as client:
        if request.peer is not None:
            files, stage = peer_files(client, request.peer), StageState.COPYING
        else:
            assert source is not None
            assert source.https is not None
            entries = [(u.url, u.sha256, u.path) for u in source.https.urls]
            files, stage = https_files(entries), StageState.DOWNLOADING
        expected = source.expected_bytes if source is not None else None
        total = expected or head_sizes(client, files)
        _check_space(request, staging, total)
        progress.set_stage(stage, total=total or 0)
        return {
            f.path: fetch_resumable(
                name=f.path,
                dest=_inside(staging, f.path),
                opener=http_opener(client, f.url, what=f"{f.path} ({f.url})"),
                expected=f.expected,
                progress=progress,
            )
            for f in files
        }


def _fetch_s3(
    request: StageRequest, source: ModelSourceSpec, staging: Path, progress: Progress
) -> dict[str, Fetched]:
    from sparkllm.staging.s3 import list_objects, s3_client, s3_opener

    assert source.s3 is not None
    env = request.environ
    client = s3_client(
        source.s3,
        access_key=env.get("AWS_ACCESS_KEY_ID") or None,
        secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
        ca_file=request.ca_file,
    )
    objects = list_objects(client, source.s3)
    total = source.expected_bytes or sum(o.expected.size or 0 for o in objects)
    _check_space(request, staging, total)
    progress.set_stage(StageState.DOWNLOADING, total=total)
    return {
        o.path: fetch_resumable(
            name=o.path,
            dest=_inside(staging, o.path),
            opener=s3_opener(client, source.s3.bucket, o.key),
            expected=o.expected,
            progress=progress,
        )
        for o in objects
    }


def _fetch_hub(
    request: StageRequest, source: ModelSourceSpec, staging: Path, progress: Progress
) -> dict[str, Fetched]:
    from sparkllm.staging.hub import hub_download, hub_sizes, trust

    assert source.hugging_face is not None
    if request.ca_file is not None:
        trust(request.ca_file)
    token = request.environ.get("HF_TOKEN") or None
    cache = staging.parent / "hub-cache"
    sizes = hub_sizes(source.hugging_face, cache=cache, token=token)
    total = source.expected_bytes or sum(sizes.values())
    _check_space(request, staging, total, staged_in=cache)
    progress.set_stage(StageState.DOWNLOADING, total=total)
    blobs = hub_download(
        source.hugging_face, cache=cache, token=token, into=staging, progress=progress
    )
    fetched = {}
    for path, blob_sha in blobs.items():
        result = _hash_file(staging / path)
        if blob_sha is not None and result.sha256 != blob_sha:
            raise StageError(
                StageReason.HASH_MISMATCH, f"{path}: sha256 {result.sha256}, the Hub's {blob_sha}"
            )
        fetched[path] = result
    # the library's count, replaced by what is on disk (cached blobs are not counted by it)
    progress.bytes_done = sum(f.size for f in fetched.values())
    return fetched


def _hash_file(path: Path) -> Fetched:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(HASH_CHUNK):
            digest.update(chunk)
    return Fetched(size=path.stat().st_size, sha256=digest.hexdigest())


def _inside(staging: Path, relative: str) -> Path:
    path = (staging / relative).resolve()
    if not path.is_relative_to(staging.resolve()):
        raise StageError(StageReason.INVALID_SOURCE, f"{relative} leaves the model directory")
    return path


def _check_space(
    request: StageRequest, staging: Path, total: int | None, *, staged_in: Path | None = None
) -> None:
    """DiskFull up front: the bytes still to fetch against the free space at the target.
    ``staged_in`` holds what earlier runs already wrote (default the staging directory)."""
    if not total:
        return
    where = staged_in or staging
    have = sum(p.stat().st_size for p in where.rglob("*") if p.is_file() and not p.is_symlink())
    needed = total - have
    free = request.free_bytes(staging)
    if needed > free:
        raise StageError(
            StageReason.DISK_FULL,
            f"{needed} more bytes needed at {staging.parent.parent}, {free} free "
            f"(model {total} bytes, {have} already staged)",
        )


def _verify(request: StageRequest, staging: Path, fetched: Mapping[str, Fetched]) -> None:
    """verify-model's own check on the staged files, with the hashes just computed."""
    if request.expected_shards is None:
        return
    summary = verify_model(
        VerifyRequest(
            model_dir=staging,
            expected_shards=request.expected_shards,
            expected_layers=request.expected_layers,
            manifest={path: f.sha256 for path, f in fetched.items()},
            hash_mode="full",
        ),
        out=io.StringIO(),  # its notes are not progress records
    )
    if not summary.ok:
        raise StageError(StageReason.VERIFICATION_FAILED, summary.error or "verify-model failed")
