"""Files from the Hugging Face Hub (or a mirror), with the ``huggingface_hub`` library's code.

Why the library and not our HTTP loop: it owns the Hub's API (revision resolution, LFS
and Xet redirects, auth), its cache layout (``blobs/`` named by content hash,
``snapshots/<commit>/`` of links) and its resume (``.incomplete`` blobs continue where they
stopped). Pinned in pyproject.toml. The cache lives beside the target
(``<parent>/.staging/hub-cache``), on the same file system, so the finished snapshot is
hard-linked into the staging directory instead of copied; a rerun after a kill resumes
in the cache.

Sizes come first from a dry run (the disk-space check needs them). Afterwards each
file's sha256 is computed for the manifest peers copy against, and compared with the
blob's name where the Hub names a blob by its sha256 (LFS files).
"""

from __future__ import annotations

import os
import re
import shutil
import ssl
from pathlib import Path
from typing import Any

import certifi
import httpx2
from huggingface_hub import set_client_factory, snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils._http import default_client_factory
from huggingface_hub.utils.tqdm import tqdm as hub_tqdm

from sparkllm.api.model_staging import DEFAULT_HF_ENDPOINT, HuggingFaceSource
from sparkllm.staging.errors import StageError, from_os_error
from sparkllm.staging.plan import StageReason
from sparkllm.staging.progress import Progress

_SHA256_NAME = re.compile(r"^[0-9a-f]{64}$")


def _translate(exc: BaseException, *, what: str) -> StageError:
    """The first error in ``exc``'s chain that names a reason (the library wraps an HTTP
    error of its metadata request in LocalEntryNotFoundError when nothing is cached)."""
    seen: BaseException | None = exc
    visited: set[int] = set()
    while seen is not None and id(seen) not in visited:
        visited.add(id(seen))
        error = _reason_of(seen, what=what)
        if error is not None:
            return error
        seen = seen.__cause__ or seen.__context__
    return StageError(StageReason.CONNECTION_LOST, f"{what}: {type(exc).__name__}: {exc}")


def _reason_of(exc: BaseException, *, what: str) -> StageError | None:
    if isinstance(exc, GatedRepoError):
        return StageError(StageReason.UNAUTHORIZED, f"{what}: gated repository, no access")
    if isinstance(exc, RepositoryNotFoundError) and _status(exc) == 401:
        # the Hub answers 401 both for a missing repository and a private one without access
        return StageError(
            StageReason.UNAUTHORIZED,
            f"{what}: HTTP 401: the repository is private or gated and the token (or its "
            "absence) grants no access, or it does not exist",
        )
    if isinstance(exc, RepositoryNotFoundError | RevisionNotFoundError):
        return StageError(StageReason.NOT_FOUND, f"{what}: {type(exc).__name__}")
    if isinstance(exc, HfHubHTTPError):
        status = _status(exc)
        if status in (401, 403):
            return StageError(StageReason.UNAUTHORIZED, f"{what}: HTTP {status}")
        if status == 404:
            return StageError(StageReason.NOT_FOUND, f"{what}: HTTP 404")
        return StageError(StageReason.INVALID_SOURCE, f"{what}: HTTP {status}")
    local = isinstance(exc, OSError) and not isinstance(exc, LocalEntryNotFoundError)
    if local and isinstance(exc, OSError) and exc.errno is not None:
        return from_os_error(exc, what=what)
    return None


def _status(exc: HfHubHTTPError) -> int | None:
    return exc.response.status_code if exc.response is not None else None


def trust(ca_file: Path) -> None:
    """Make the library trust ``ca_file`` besides the system's (a mirror with its own CA),
    through its documented hook: one shared client for the process (one stage a process).
    Its default factory (private in the pinned 2.4.0) supplies its request hooks."""
    context = ssl.create_default_context(cafile=certifi.where())
    context.load_verify_locations(cafile=str(ca_file))

    def factory() -> httpx2.Client:
        client = default_client_factory()
        return httpx2.Client(
            event_hooks=client.event_hooks, follow_redirects=True, timeout=None, verify=context
        )

    set_client_factory(factory)


def byte_counter(progress: Progress) -> type[hub_tqdm]:
    """A silent tqdm class for snapshot_download that feeds its written bytes to ``progress``.

    The library reports bytes on two bars: "Reconstructing" (bytes written to disk, which
    is what a resumable copy counts) and a transfer bar (network bytes); only the first
    is forwarded. Everything else a bar does is tqdm's own, disabled.
    """

    class _Counter(hub_tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._forward = str(kwargs.get("desc", "")).startswith("Reconstructing")
            super().__init__(*args, **{**kwargs, "disable": True})  # type: ignore[no-untyped-call]

        def update(self, n: float | None = 1) -> bool | None:
            if self._forward and n:
                progress.add(int(n), file="")
            result: bool | None = super().update(n)
            return result

    return _Counter


def _call(source: HuggingFaceSource, cache: Path, token: str | None, **kwargs: Any) -> Any:
    what = f"huggingFace {source.repo}@{source.revision[:12]}"
    try:
        return snapshot_download(
            source.repo,
            revision=source.revision,
            cache_dir=cache,
            endpoint=source.endpoint or DEFAULT_HF_ENDPOINT,
            token=token or False,
            max_workers=4,
            **kwargs,
        )
    except Exception as exc:  # the library's errors, translated at this boundary
        raise _translate(exc, what=what) from exc


def hub_sizes(source: HuggingFaceSource, *, cache: Path, token: str | None) -> dict[str, int]:
    """{path: size} of the revision's files (a dry run: nothing is downloaded)."""
    infos = _call(source, cache, token, dry_run=True)
    return {info.filename: int(info.file_size) for info in infos}


def hub_download(
    source: HuggingFaceSource, *, cache: Path, token: str | None, into: Path, progress: Progress
) -> dict[str, str | None]:
    """Download the revision into the library's cache and link its files ``into``.

    Returns {path: the sha256 the cache names its blob by (LFS files), else None}.
    """
    snapshot = Path(_call(source, cache, token, tqdm_class=byte_counter(progress)))
    linked: dict[str, str | None] = {}
    for root, dirs, files in os.walk(snapshot):
        dirs.sort()
        for name in sorted(files):
            link = Path(root) / name
            relative = link.relative_to(snapshot).as_posix()
            blob = link.resolve()
            target = into / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            try:
                os.link(blob, target)
            except OSError:
                shutil.copyfile(blob, target)
            linked[relative] = blob.name if _SHA256_NAME.match(blob.name) else None
    return linked
