"""One file onto the disk, resumably, checked: the loop every source shares.

Why one loop: an HTTPS URL, an S3 object and a peer's copy differ only in how a byte
stream from an offset is opened (:class:`Opener`). Resuming (a partial file continues
where it stopped, in this run after a dropped connection or in the next run after a
killed Job), hashing (sha256 over the whole file, existing bytes included), the size and
hash checks, one re-fetch of a corrupted file, and the translation of a full disk are
written once here.

A dropped connection is retried from the current offset up to ``attempts`` times without
a pause while bytes keep arriving; an attempt that adds nothing counts against them. A
hash mismatch deletes the file and fetches it once more from the start (a corrupted
transfer or a bad cache line upstream); a second mismatch is :data:`HashMismatch`.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final, Protocol

from sparkllm.staging.errors import StageError, from_os_error
from sparkllm.staging.plan import StageReason
from sparkllm.staging.progress import Progress

DEFAULT_ATTEMPTS: Final = 5
HASH_CHUNK: Final = 8 * 1024 * 1024


class ConnectionLostError(Exception):
    """The stream broke mid-transfer (an opener's transport error); retried here."""


@dataclass(frozen=True, slots=True)
class Stream:
    """An open byte stream: its chunks, and whether it starts at the offset asked for.

    ``from_start`` True means the source ignored the offset (an HTTP 200 to a Range
    request): the local bytes are discarded and the file is written anew.
    """

    chunks: Iterator[bytes]
    from_start: bool
    total: int | None


class Opener(Protocol):
    """Opens the file's bytes from ``offset``; raises StageError or ConnectionLostError."""

    def __call__(self, offset: int) -> contextlib.AbstractContextManager[Stream | None]:
        """None: nothing left from ``offset`` (the file is complete)."""
        ...


@dataclass(frozen=True, slots=True)
class Expected:
    """What the finished file must be (each check only when known)."""

    size: int | None = None
    sha256: str | None = None
    md5: str | None = None  # an S3 single-part ETag


@dataclass(frozen=True, slots=True)
class Fetched:
    """A finished file: its size and sha256 (for the manifest a peer serves)."""

    size: int
    sha256: str


def fetch_resumable(
    *,
    name: str,
    dest: Path,
    opener: Opener,
    expected: Expected,
    progress: Progress,
    attempts: int = DEFAULT_ATTEMPTS,
) -> Fetched:
    """Bring ``dest`` to the source's bytes, resuming what is there; checked as above."""
    for refetch in (False, True):
        try:
            size, digests = _download(name, dest, opener, progress, attempts)
        except OSError as exc:
            raise from_os_error(exc, what=f"writing {name}") from exc
        problem = _mismatch(expected, size, digests)
        if problem is None:
            return Fetched(size=size, sha256=digests["sha256"].hexdigest())
        progress.bytes_done -= size
        dest.unlink(missing_ok=True)
        if refetch:
            raise StageError(StageReason.HASH_MISMATCH, f"{name}: {problem} (after a re-fetch)")
        progress.retry(StageReason.HASH_MISMATCH, f"{problem}; fetching it again", file=name)
    raise AssertionError("unreachable")


def _hashers(dest: Path, progress: Progress, name: str) -> dict[str, hashlib._Hash]:
    hashers = {"sha256": hashlib.sha256(), "md5": hashlib.md5(usedforsecurity=False)}
    if dest.exists():
        with dest.open("rb") as fh:
            while chunk := fh.read(HASH_CHUNK):
                for hasher in hashers.values():
                    hasher.update(chunk)
        progress.add(dest.stat().st_size, file=name)
    return hashers


def _download(
    name: str, dest: Path, opener: Opener, progress: Progress, attempts: int
) -> tuple[int, dict[str, hashlib._Hash]]:
    dest.parent.mkdir(parents=True, exist_ok=True)
    hashers = _hashers(dest, progress, name)
    offset = dest.stat().st_size if dest.exists() else 0
    failures = 0
    while True:
        before = offset
        try:
            with opener(offset) as stream:
                if stream is None:
                    return offset, hashers
                if stream.from_start and offset:
                    progress.bytes_done -= offset
                    hashers = _hashers(_truncate(dest), progress, name)
                    offset = 0
                with dest.open("ab") as out:
                    offset = _copy(stream.chunks, out, hashers, progress, name, offset)
                return offset, hashers
        except ConnectionLostError as exc:
            offset = dest.stat().st_size if dest.exists() else 0
            failures = 0 if offset > before else failures + 1
            if failures >= attempts:
                raise StageError(
                    StageReason.CONNECTION_LOST,
                    f"{name}: {exc} ({attempts} attempts without progress at byte {offset})",
                ) from exc
            progress.retry(
                StageReason.CONNECTION_LOST, f"{exc}; resuming at byte {offset}", file=name
            )


def _truncate(dest: Path) -> Path:
    dest.unlink(missing_ok=True)
    return dest


def _copy(  # noqa: PLR0917 (private; the loop's state)
    chunks: Iterator[bytes],
    out: BinaryIO,
    hashers: dict[str, hashlib._Hash],
    progress: Progress,
    name: str,
    offset: int,
) -> int:
    for chunk in chunks:
        out.write(chunk)
        out.flush()  # a dropped connection leaves every byte received on disk
        for hasher in hashers.values():
            hasher.update(chunk)
        offset += len(chunk)
        progress.add(len(chunk), file=name)
    return offset


def _mismatch(expected: Expected, size: int, digests: dict[str, hashlib._Hash]) -> str | None:
    if expected.size is not None and size != expected.size:
        return f"size {size} bytes, expected {expected.size}"
    sha256 = digests["sha256"].hexdigest()
    if expected.sha256 is not None and sha256 != expected.sha256.lower():
        return f"sha256 {sha256}, expected {expected.sha256.lower()}"
    md5 = digests["md5"].hexdigest()
    if expected.md5 is not None and md5 != expected.md5.lower():
        return f"MD5 {md5} differs from the ETag {expected.md5.lower()}"
    return None
