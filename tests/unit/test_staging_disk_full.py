"""``sparkllm stage-model`` onto a real full disk: a tmpfs mounted for the test.

Two ways a disk is full, both with the real free-space check and the real writes (nothing
injected): a tmpfs smaller than the toy model (the check up front says DiskFull before a
byte is fetched), and a tmpfs with room whose space another writer takes while the stage
downloads (a proxy in front of the peer's server fills the disk when the second shard is
asked for, before the request goes on: the shard's first write gets ENOSPC). Each is one
``DiskFull`` line on stderr, exit 1 and a failed record; and after the space is freed
(the tmpfs grown, the other writer's file deleted) a rerun completes, resuming what the
staging directory holds.

Mounting needs root (or CAP_SYS_ADMIN), which the tests and CI run as; without it the test
skips with the reason, and under CI=true fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sparkllm.cli import main
from sparkllm.staging.stage import staging_path
from sparkllm_dev.ci import unavailable
from tests.unit.staging_fixtures import peer_server, seed_copy, toy_model
from tests.unit.test_staging_s3 import FaultProxy

SHARD = "model-00002-of-00003.safetensors"
PAGE = 4096  # tmpfs allocates in pages


@contextmanager
def tmpfs(where: Path, *, size: int) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes mounted at ``where`` for the block."""
    where.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        unavailable(f"cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): {mounted.stderr}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True, timeout=30)


def grow(where: Path, *, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(where)], check=True, timeout=30)


def fill(where: Path) -> Path:
    """Another writer takes every free byte of ``where``'s file system (allocated, so the
    pages are taken at once, as a writer's data would take them)."""
    filler = where / "other-writer"
    with filler.open("wb") as out:
        os.posix_fallocate(out.fileno(), 0, shutil.disk_usage(where).free)
    assert shutil.disk_usage(where).free == 0
    return filler


@pytest.fixture
def origin(tmp_path: Path) -> tuple[dict[str, bytes], Path]:
    files = toy_model(tmp_path / "origin")
    return files, seed_copy(tmp_path / "seed", files)


def stage(
    target: Path, peer: str, progress: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, list[str], dict[str, Any]]:
    """The command as a node's Job runs it: exit code, stderr lines, the last record."""
    code = main(
        ["stage-model", "--target", str(target), "--peer", peer, "--expected-shards", "3",
         "--progress-file", str(progress)]
    )  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    return code, err, json.loads(progress.read_text())


def test_a_disk_too_small_is_disk_full_before_any_byte_then_staged_once_it_grows(
    tmp_path: Path, origin: tuple[dict[str, bytes], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files, seed = origin
    total = sum(map(len, files.values()))
    with tmpfs(tmp_path / "disk", size=32 * PAGE) as disk, peer_server(seed) as peer:
        target = disk / "models" / "toy"
        free = shutil.disk_usage(disk).free
        assert free < total

        code, err, last = stage(target, peer, tmp_path / "progress.json", capsys)

        assert code == 1
        assert err == [
            f"stage-model: failed: DiskFull: {total} more bytes needed at {disk / 'models'}, "
            f"{free} free (model {total} bytes, 0 already staged)"
        ]
        assert (last["event"], last["stage"], last["reason"]) == ("failed", "Failed", "DiskFull")
        assert list(staging_path(target).iterdir()) == []  # not a byte fetched
        assert not target.exists()

        grow(disk, size=1024 * 1024)  # space freed
        code, err, last = stage(target, peer, tmp_path / "progress.json", capsys)

        assert (code, err, last["event"]) == (0, [], "done")
        assert {p: (target / p).read_bytes() for p in files} == files


def test_a_disk_another_writer_fills_mid_download_is_disk_full_and_the_rerun_resumes(
    tmp_path: Path, origin: tuple[dict[str, bytes], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files, seed = origin
    total = sum(map(len, files.values()))
    with tmpfs(tmp_path / "disk", size=1024 * 1024) as disk, peer_server(seed) as peer:
        target = disk / "models" / "toy"
        assert shutil.disk_usage(disk).free > 2 * total  # the check up front passes
        filled: list[Path] = []
        port = int(peer.rsplit(":", 1)[1])
        proxy = FaultProxy(
            port, mode="pass", path=f"/files/{SHARD}", before=lambda: filled.append(fill(disk))
        )
        try:
            code, err, last = stage(
                target, f"http://127.0.0.1:{proxy.port}", tmp_path / "p", capsys
            )
            assert filled, "the other writer never ran"
            assert code == 1
            assert err == [
                f"stage-model: failed: DiskFull: writing {SHARD}: no space left on the device"
            ]
            assert (last["stage"], last["reason"]) == ("Failed", "DiskFull")
            staged = staging_path(target)
            first = "model-00001-of-00003.safetensors"
            assert (staged / first).read_bytes() == files[first]  # kept for the rerun
            assert not target.exists()

            filled[0].unlink()  # the other writer's file goes: space again
            before = len(proxy.requests)
            code, err, last = stage(
                target, f"http://127.0.0.1:{proxy.port}", tmp_path / "p", capsys
            )
            rerun = b"".join(proxy.requests[before:]).decode(errors="replace").lower()
        finally:
            proxy.close()
        assert (code, err, last["event"], last["bytesDone"]) == (0, [], "done", total)
        assert {p: (target / p).read_bytes() for p in files} == files
        # the shard written before the disk filled was resumed at its end, not fetched again
        assert f"range: bytes={len(files[first])}-" in rerun
        assert not staged.exists()
