"""``sparkllm stage-model --clean``: the cleaning rule for a model's old copies on one node.

Why a rule in the command and not in the operator: the operator keeps each revision's copy
at ``<parent>/.sparkllm-models/<name>/<digest>`` (a directory per source digest, each
finished copy holding the stage's manifest), stages a new revision beside the old one and
rolls replicas over to it. Once every replica runs the current copy, the old ones are disk
space only, and only a process on the node can see and remove them: the operator runs this
command there, ``--clean --target <the current copy> --keep-previous N``.

The rule, beside ``--target`` (in its parent directory, nothing outside it):

- the target is kept; it must be a finished copy (its manifest), else nothing is touched
  (InvalidSource);
- of the other finished copies, the newest ``keep_previous`` are kept (a way back), newest
  by the manifest's ``stagedAt``, or the manifest file's mtime for a copy staged before
  manifests carried it; the rest are removed;
- every unfinished entry under ``.staging/`` (another digest's partial download, the Hub
  client's cache) is removed, except the target's own;
- anything without our manifest (a directory someone else put there, a file, a symlink)
  is skipped and named in the output: it is not ours to remove.

Why rename into ``.trash`` first, then delete: a process killed half-way through an
``rmtree`` leaves a half-deleted copy that still looks like a copy by its name. A rename is
atomic, so an entry is either in place, whole, or in ``.trash``; a rerun empties ``.trash``
first and so finishes the job. The decision (:func:`plan_clean`) is pure; the walk, the
sizes and the removal are the thin shell around it (:func:`clean_copies`).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from sparkllm.staging.args import COPIES_DIR
from sparkllm.staging.errors import StageError, from_os_error
from sparkllm.staging.plan import StageReason
from sparkllm.staging.serve import MANIFEST_FILE
from sparkllm.staging.stage import STAGING_DIR

TRASH_DIR: Final = ".trash"
NOT_OURS: Final = f"no {MANIFEST_FILE}: not a staged copy, left alone"


class Kind(StrEnum):
    """What an entry beside the target is."""

    FINISHED = "finished"  # a directory holding our manifest
    UNFINISHED = "unfinished"  # an entry under .staging/
    TRASH = "trash"  # an entry an earlier --clean renamed into .trash/ and did not delete
    FOREIGN = "foreign"  # anything else: not ours


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry beside the target: its path relative to the target's parent."""

    name: str
    kind: Kind
    staged_at: float = 0.0  # FINISHED only


@dataclass(frozen=True, slots=True)
class CleanPlan:
    """What the rule decided: entries to remove, to keep (target first), to skip."""

    remove: tuple[Entry, ...]
    keep: tuple[Entry, ...]
    skip: tuple[Entry, ...]


def plan_clean(*, target: str, entries: Iterable[Entry], keep_previous: int) -> CleanPlan:
    """The rule above, on names: ``target`` is the target's name, ``entries`` the rest."""
    if keep_previous < 0:
        raise ValueError(f"keep_previous must be 0 or more, got {keep_previous}")
    own_staging = f"{STAGING_DIR}/{target}"  # kept: the target's digest (a rerun of it)
    entries = list(entries)
    listed = [e for e in entries if e.name not in {target, own_staging}]
    own = [e for e in entries if e.name == own_staging]
    finished = sorted(
        (e for e in listed if e.kind is Kind.FINISHED),
        key=lambda e: (e.staged_at, e.name),
        reverse=True,
    )
    kept = finished[:keep_previous]
    gone = [e for e in listed if e.kind in {Kind.TRASH, Kind.UNFINISHED}]
    return CleanPlan(
        remove=tuple(sorted([*finished[keep_previous:], *gone], key=lambda e: e.name)),
        keep=(Entry(name=target, kind=Kind.FINISHED), *kept, *own),
        skip=tuple(sorted((e for e in listed if e.kind is Kind.FOREIGN), key=lambda e: e.name)),
    )


@dataclass(frozen=True, slots=True)
class CleanReport:
    """What was done, as the ``cleaned`` record's fields (paths absolute)."""

    removed: tuple[dict[str, Any], ...]
    kept: tuple[dict[str, Any], ...]
    skipped: tuple[dict[str, Any], ...]

    @property
    def bytes_freed(self) -> int:
        return sum(int(e["bytes"]) for e in self.removed)

    def record(self) -> dict[str, Any]:
        return {
            "removed": list(self.removed),
            "kept": list(self.kept),
            "skipped": list(self.skipped),
            "bytesFreed": self.bytes_freed,
        }


def clean_copies(target: Path, *, keep_previous: int) -> CleanReport:
    """Apply the rule beside ``target``; raises StageError (InvalidSource) and touches
    nothing when ``target`` is not a finished copy where the operator keeps copies."""
    target = Path(os.path.abspath(target))  # a relative --target names its parent too
    parent = target.parent
    _check_target(target)
    try:
        entries = list(_scan(parent, target=target.name))
        plan = plan_clean(target=target.name, entries=entries, keep_previous=keep_previous)
        freed = _freed_bytes([parent / e.name for e in plan.remove])
        trash = parent / TRASH_DIR
        moved = [_to_trash(parent / e.name, trash) for e in plan.remove]
        for path in moved:
            _remove(path)
        if trash.is_dir():
            trash.rmdir()
    except OSError as exc:
        raise from_os_error(exc, what=f"cleaning {parent}") from exc
    return CleanReport(
        removed=tuple(
            {"path": str(parent / e.name), "bytes": b}
            for e, b in zip(plan.remove, freed, strict=True)
        ),
        kept=tuple(
            {"path": str(parent / e.name), "bytes": _tree_bytes(parent / e.name)} for e in plan.keep
        ),
        skipped=tuple({"path": str(parent / e.name), "why": NOT_OURS} for e in plan.skip),
    )


def _check_target(target: Path) -> None:
    where = target.parent.parent
    if where.name != COPIES_DIR:
        raise StageError(
            StageReason.INVALID_SOURCE,
            f"--clean: {target} is not a copy under {COPIES_DIR}/<name>/ (where the operator "
            "keeps a model's copies): refusing to clean beside it",
        )
    if target.is_symlink() or not (target / MANIFEST_FILE).is_file():
        raise StageError(
            StageReason.INVALID_SOURCE,
            f"--clean: {target} is not a finished copy (no {MANIFEST_FILE}): nothing removed",
        )


def _scan(parent: Path, *, target: str) -> Iterable[Entry]:
    """Every entry beside the target, classified (symlinks are never followed)."""
    for path in sorted(parent.iterdir()):
        if path.name == target:
            continue
        if path.name in {STAGING_DIR, TRASH_DIR} and _is_real_dir(path):
            kind = Kind.UNFINISHED if path.name == STAGING_DIR else Kind.TRASH
            for inner in sorted(path.iterdir()):
                yield Entry(name=f"{path.name}/{inner.name}", kind=kind)
        elif _is_real_dir(path) and (path / MANIFEST_FILE).is_file():
            yield Entry(name=path.name, kind=Kind.FINISHED, staged_at=_staged_at(path))
        else:
            yield Entry(name=path.name, kind=Kind.FOREIGN)


def _is_real_dir(path: Path) -> bool:
    return stat.S_ISDIR(path.lstat().st_mode)


def _staged_at(copy: Path) -> float:
    """The manifest's ``stagedAt``; its mtime for a manifest written before it had one."""
    manifest = copy / MANIFEST_FILE
    try:
        recorded = json.loads(manifest.read_text(encoding="utf-8"))
        return float(recorded["stagedAt"])
    except (ValueError, KeyError, TypeError):
        return manifest.stat().st_mtime


def _to_trash(path: Path, trash: Path) -> Path:
    """``path`` renamed into ``trash`` (same file system: atomic); an entry already in the
    trash stays where it is."""
    if path.parent == trash:
        return path
    trash.mkdir(exist_ok=True)
    unfinished = path.parent.name == STAGING_DIR
    dest = trash / (f"{STAGING_DIR}-{path.name}" if unfinished else path.name)
    if _exists(dest):  # renamed there by an earlier run whose removal did not finish
        _remove(dest)
    path.rename(dest)
    return dest


def _remove(path: Path) -> None:
    """rmtree for a directory (it follows no symlink inside), unlink for anything else."""
    if _is_real_dir(path):
        shutil.rmtree(path)
    else:
        path.unlink()


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def _walk(root: Path) -> Iterable[os.stat_result]:
    """lstat of ``root`` and everything under it, no symlink followed."""
    top = root.lstat()
    yield top
    if not stat.S_ISDIR(top.st_mode):
        return
    for base, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            yield Path(base, name).lstat()


def _tree_bytes(root: Path) -> int:
    """The size of ``root``'s files, each inode once (the Hub's hard links)."""
    seen: dict[tuple[int, int], int] = {}
    for st in _walk(root):
        if stat.S_ISREG(st.st_mode):
            seen[st.st_dev, st.st_ino] = st.st_size
    return sum(seen.values())


def _freed_bytes(roots: Sequence[Path]) -> list[int]:
    """The bytes each removal frees: a file's size counts once, for the first root that
    holds it, and only when every hard link to it is under the removed roots (a copy
    hard-linked from the Hub cache frees nothing while the cache stays, and vice versa)."""
    links: dict[tuple[int, int], list[int]] = {}  # inode -> [size, nlink, links seen, root]
    for index, root in enumerate(roots):
        for st in _walk(root):
            if not stat.S_ISREG(st.st_mode):
                continue
            entry = links.setdefault((st.st_dev, st.st_ino), [st.st_size, st.st_nlink, 0, index])
            entry[2] += 1
    freed = [0] * len(roots)
    for size, nlink, seen, index in links.values():
        if seen >= nlink:
            freed[index] += size
    return freed
