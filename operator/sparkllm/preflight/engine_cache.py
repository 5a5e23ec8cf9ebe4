"""``sparkllm engine-cache``: the rank's first init container keeps the node's engine cache
within its cap (render/engine_cache.py says what the cache holds and why).

In the namespace's cache directory (``--root``): create the current image's directory
(``--keep``) and hand it to the engine's user (``--owner``, when the spec names one); then,
while everything there together exceeds ``--max-gib``, remove the other images' directories,
least recently used first (a start touches its own); if the current one alone still exceeds
the cap, empty it (that start is cold, the next ones warm again). It prints one line per
removal and a summary, and never fails the pod over the cache: an error is reported and
the start goes on (exit 0) — a cache is an optimisation.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import time
from pathlib import Path

GIB = 1024**3
_KEY = re.compile(r"^(sha256-[0-9a-f]{64}|ref-[0-9a-f]{16})$")


def size_of(path: Path) -> int:
    """Bytes under ``path`` (files only; links not followed)."""
    total = 0
    for root, _, files in os.walk(path, followlinks=False):
        for name in files:
            try:
                total += (Path(root) / name).lstat().st_size
            except OSError:
                continue
    return total


def prune(root: Path, *, keep: str, max_bytes: int, owner: tuple[int, int] | None) -> list[str]:
    """Bring ``root`` under ``max_bytes``; the lines to print."""
    if not _KEY.match(keep):
        raise ValueError(f"--keep {keep!r} is not a cache key (sha256-<64 hex> or ref-<16 hex>)")
    current = root / keep
    current.mkdir(parents=True, exist_ok=True)
    now = time.time()
    os.utime(current, (now, now))  # used now: the least recently used go first
    if owner is not None:
        for path in (current, *current.rglob("*")):
            os.chown(path, *owner, follow_symlinks=False)
    lines = []
    entries = {p: size_of(p) for p in root.iterdir() if p.is_dir() and not p.is_symlink()}
    total = sum(entries.values())
    others = sorted((p for p in entries if p != current), key=lambda p: p.stat().st_mtime)
    for path in others:
        if total <= max_bytes:
            break
        shutil.rmtree(path)
        total -= entries[path]
        lines.append(f"removed {path.name} ({entries[path] / GIB:.2f} GiB): over the cap")
    if total > max_bytes:
        for child in current.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        lines.append(
            f"emptied {keep} ({entries.get(current, 0) / GIB:.2f} GiB): alone over the cap"
        )
        total -= entries.get(current, 0)
    lines.append(f"engine cache {keep}: {total / GIB:.2f} GiB of {max_bytes / GIB:.0f} GiB in use")
    return lines


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", required=True, help="the namespace's cache directory")
    parser.add_argument("--keep", required=True, help="the current image's cache key")
    parser.add_argument("--max-gib", type=int, required=True, help="cap of the whole root")
    parser.add_argument("--owner", help="UID:GID to hand the current directory to")
    parser.add_argument(
        "--termination-log",
        type=Path,
        default=Path("/dev/termination-log"),
        help="where the summary line goes as the container's termination message",
    )


def run(args: argparse.Namespace) -> int:
    owner = None
    if args.owner:
        uid, _, gid = str(args.owner).partition(":")
        owner = (int(uid), int(gid or uid))
    try:
        lines = prune(Path(args.root), keep=args.keep, max_bytes=args.max_gib * GIB, owner=owner)
    except (OSError, ValueError) as exc:
        lines = [f"engine cache not pruned (the start goes on): {exc}"]
    for line in lines:
        print(line, flush=True)
    with contextlib.suppress(OSError):  # no termination log (run by hand): the output has it
        args.termination_log.write_text(lines[-1] + "\n", encoding="utf-8")
    return 0
