"""File fingerprints: sha256 manifests, parallel hashing with progress, sampled hashes.

Why parallel threads: the documents' model is 168 GB in 46 shards; one sha256 stream
runs at roughly 1-2 GB/s, a local NVMe reads faster, and ``hashlib`` releases the GIL
while it hashes large buffers, so a few threads keep the disk busy. Progress lines
(files done, bytes, bytes/s) go to the log so an init container that takes minutes is
visibly alive. After each chunk the pages are dropped from the page cache
(``posix_fadvise(DONTNEED)``): on a DGX Spark the page cache shares the 128 GB with the
GPU, which is why NVIDIA's playbook flushes it before loading a model.

Two kinds of fingerprint, written ``<kind>:<hex>``:

- ``sha256:<hex>`` — the file's full sha256 (with a manifest, or ``--hash full``, and
  for every file up to 64 MiB).
- ``sampled:<hex>`` — sha256 over the size and the first, middle and last MiB of a large
  file. It is the same on every node when the files are the same, costs milliseconds
  per shard, and catches truncation, a different file, or a different version; it does
  NOT catch corruption elsewhere in the middle of a file. Use a manifest for that.

Modification times are never part of a fingerprint: they differ between nodes that
hold identical files.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final, TextIO

from sparkllm.errors import SparkllmError

CHUNK_BYTES: Final = 8 * 1024 * 1024
SAMPLE_BYTES: Final = 1024 * 1024
FULL_HASH_BELOW_BYTES: Final = 64 * 1024 * 1024
PROGRESS_INTERVAL_SECONDS: Final = 5.0
_MANIFEST_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")


class ChecksumError(SparkllmError):
    """A manifest is malformed or a file cannot be hashed; the message names it."""


def parse_manifest(text: str, *, source: str = "manifest") -> dict[str, str]:
    """``sha256sum`` output -> {relative path: lowercase hex}; pure.

    Lines are ``<64 hex><space><space or *><path>``; blank lines and ``#`` comments are
    skipped. Paths must be relative and stay inside the model directory.
    """
    entries: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _MANIFEST_LINE.match(line.rstrip("\r\n"))
        if match is None:
            raise ChecksumError(f"{source} line {number}: expected '<sha256>  <path>'")
        digest, name = match.group(1).lower(), match.group(2).removeprefix("./")
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts:
            raise ChecksumError(f"{source} line {number}: {name} is outside the model directory")
        if name in entries and entries[name] != digest:
            raise ChecksumError(f"{source} line {number}: {name} listed twice, differently")
        entries[name] = digest
    if not entries:
        raise ChecksumError(f"{source} lists no files")
    return entries


def _drop_from_page_cache(fd: int, offset: int, length: int) -> None:
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        with contextlib.suppress(OSError):  # advisory only
            advise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def sha256_file(path: Path, *, on_bytes: Callable[[int], None] = lambda n: None) -> str:
    """Full sha256 of ``path`` (hex), reporting progress through ``on_bytes``."""
    digest = hashlib.sha256()
    try:
        with path.open("rb", buffering=0) as stream:
            offset = 0
            while chunk := stream.read(CHUNK_BYTES):
                digest.update(chunk)
                _drop_from_page_cache(stream.fileno(), offset, len(chunk))
                offset += len(chunk)
                on_bytes(len(chunk))
    except OSError as exc:
        raise ChecksumError(f"cannot read {path.name}: {exc.strerror or exc}") from exc
    return digest.hexdigest()


def sampled_hash(path: Path) -> str:
    """sha256 over the size and the first, middle and last MiB (hex)."""
    try:
        size = path.stat().st_size
        digest = hashlib.sha256(b"sparkllm-sampled-v1\0" + size.to_bytes(8, "little"))
        with path.open("rb") as stream:
            for offset in (0, max(0, size // 2 - SAMPLE_BYTES // 2), max(0, size - SAMPLE_BYTES)):
                stream.seek(offset)
                digest.update(stream.read(SAMPLE_BYTES))
    except OSError as exc:
        raise ChecksumError(f"cannot read {path.name}: {exc.strerror or exc}") from exc
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class FileJob:
    """One file to fingerprint: its relative path, size, and whether to hash it fully."""

    name: str
    size: int
    full: bool


class Progress:
    """Thread-safe byte/file counter that prints a progress line now and then."""

    def __init__(
        self,
        *,
        total_files: int,
        total_bytes: int,
        out: TextIO,
        clock: Callable[[], float] = time.monotonic,
        interval: float = PROGRESS_INTERVAL_SECONDS,
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._out = out
        self._interval = interval
        self.total_files, self.total_bytes = total_files, total_bytes
        self.files_done = self.bytes_done = 0
        self._started = self._last_line = clock()

    def add_bytes(self, count: int) -> None:
        with self._lock:
            self.bytes_done += count
            if self._clock() - self._last_line >= self._interval:
                self._print()

    def file_done(self) -> None:
        with self._lock:
            self.files_done += 1
            self._print()

    def _print(self) -> None:
        now = self._clock()
        self._last_line = now
        elapsed = max(now - self._started, 1e-9)
        rate = self.bytes_done / elapsed
        print(
            f"[verify-model] hashed {self.files_done}/{self.total_files} files, "
            f"{self.bytes_done / 1e9:.2f}/{self.total_bytes / 1e9:.2f} GB, "
            f"{rate / 1e6:.1f} MB/s, {elapsed:.0f}s elapsed",
            file=self._out,
            flush=True,
        )


def fingerprint_files(
    model_dir: Path,
    jobs: Sequence[FileJob],
    *,
    threads: int,
    out: TextIO = sys.stdout,
) -> dict[str, str]:
    """``{relative path: "sha256:<hex>" | "sampled:<hex>"}`` for every job, hashed in parallel.

    Full hashes run on ``threads`` workers; sampled ones are cheap and run inline.
    """
    full_jobs = [job for job in jobs if job.full]
    progress = Progress(
        total_files=len(full_jobs), total_bytes=sum(job.size for job in full_jobs), out=out
    )

    def hash_fully(job: FileJob) -> tuple[str, str]:
        value = sha256_file(model_dir / job.name, on_bytes=progress.add_bytes)
        progress.file_done()
        return job.name, f"sha256:{value}"

    results = {
        job.name: f"sampled:{sampled_hash(model_dir / job.name)}" for job in jobs if not job.full
    }
    if full_jobs:
        with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="sha256") as pool:
            results.update(pool.map(hash_fully, full_jobs))
    return results


def manifest_mismatches(manifest: Mapping[str, str], fingerprints: Mapping[str, str]) -> list[str]:
    """Problems of files against the manifest, each naming the file; pure."""
    problems = []
    for name, expected in sorted(manifest.items()):
        actual = fingerprints.get(name)
        if actual is None:
            problems.append(f"{name} is listed in the checksum manifest but missing")
        elif actual != f"sha256:{expected}":
            shown = actual.split(":", 1)[1][:16]
            problems.append(
                f"{name}: sha256 {shown}... does not match the manifest's {expected[:16]}..."
            )
    return problems
