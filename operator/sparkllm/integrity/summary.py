"""The per-rank verification summary, and the comparison of ranks with each other.

Why a summary at all: each rank verifies its own node's copy of the model in an init
container, but "hashes identical on all three nodes" (the documents' acceptance item 2)
is a statement about several nodes, which only the operator sees. The init container
therefore writes a compact JSON summary to its termination message
(``/dev/termination-log``); the operator reads it from the pod status of every rank and
calls :func:`compare_rank_summaries`.

Why compact: Kubernetes keeps at most 4096 bytes of a container's termination message.
The summary always carries the totals and one digest over every file's (relative path,
size, fingerprint) — identical on nodes whose files are identical, and free of
modification times, which differ between nodes. To name the file that differs it also
carries a short per-file fingerprint table when it fits: 8 hex digits per file, then 6,
then 4; when even that does not fit (hundreds of shards), the table is dropped and a
mismatch can only be reported as "the directories differ" (a manifest then names files
on each rank).

Message schema (version 1)::

    {"v": 1, "ok": true, "mode": "sha256|sampled|mixed", "files": 52, "bytes": 168270000000,
     "shards": 46, "digest": "<64 hex>", "fp": {"config.json": "1a2b3c4d", ...}}
    {"v": 1, "ok": false, "error": "shard model-00007-of-00046.safetensors is missing"}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sparkllm.errors import SparkllmError

SCHEMA_VERSION: Final = 1
TERMINATION_MESSAGE_LIMIT: Final = 4096
FINGERPRINT_LENGTHS: Final = (8, 6, 4)


class SummaryError(SparkllmError):
    """A termination message is not a verification summary of a known version."""


@dataclass(frozen=True, slots=True)
class ModelSummary:
    """One rank's verification result, as carried in its termination message."""

    ok: bool
    error: str | None = None
    mode: str = ""
    files: int = 0
    total_bytes: int = 0
    shards: int = 0
    digest: str = ""
    fingerprints: Mapping[str, str] | None = field(default=None)
    """Short per-file fingerprints (hex prefixes), or None when they did not fit."""

    def to_message(self, *, limit: int = TERMINATION_MESSAGE_LIMIT) -> str:
        """The JSON termination message, at most ``limit`` bytes of UTF-8."""
        if not self.ok:
            error = self.error or "verification failed"
            text = _compact({"v": SCHEMA_VERSION, "ok": False, "error": error})
            while len(text.encode()) > limit and error:
                excess = len(text.encode()) - limit
                error = error[: max(0, len(error) - excess - 3)]
                text = _compact({"v": SCHEMA_VERSION, "ok": False, "error": error + "..."})
            return text
        base: dict[str, Any] = {
            "v": SCHEMA_VERSION,
            "ok": True,
            "mode": self.mode,
            "files": self.files,
            "bytes": self.total_bytes,
            "shards": self.shards,
            "digest": self.digest,
        }
        fingerprints = sorted((self.fingerprints or {}).items())
        for length in FINGERPRINT_LENGTHS if fingerprints else ():
            table = {name: fp[:length] for name, fp in fingerprints}
            text = _compact({**base, "fp": table})
            if len(text.encode()) <= limit:
                return text
        return _compact(base)

    @classmethod
    def from_message(cls, text: str) -> ModelSummary:
        """Parse a termination message; SummaryError when it is not one of ours."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SummaryError(f"not a verification summary (not JSON): {exc}") from exc
        if not isinstance(data, dict) or data.get("v") != SCHEMA_VERSION:
            raise SummaryError("not a verification summary of version 1")
        if not data.get("ok"):
            return cls(ok=False, error=str(data.get("error") or "verification failed"))
        fp = data.get("fp")
        try:
            return cls(
                ok=True,
                mode=str(data["mode"]),
                files=int(data["files"]),
                total_bytes=int(data["bytes"]),
                shards=int(data["shards"]),
                digest=str(data["digest"]),
                fingerprints={str(k): str(v) for k, v in fp.items()}
                if isinstance(fp, dict)
                else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SummaryError(f"verification summary lacks a field: {exc}") from exc


def _compact(payload: Mapping[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def directory_digest(entries: Mapping[str, tuple[int, str]]) -> str:
    """sha256 over sorted (relative path, size, fingerprint) lines; pure."""
    digest = hashlib.sha256()
    for name, (size, fingerprint) in sorted(entries.items()):
        digest.update(f"{name}\0{size}\0{fingerprint}\n".encode())
    return digest.hexdigest()


def build_summary(*, entries: Mapping[str, tuple[int, str]], shards: int) -> ModelSummary:
    """The summary of a verified directory: ``entries`` maps path -> (size, fingerprint).

    Fingerprints are ``sha256:<hex>`` or ``sampled:<hex>`` (see ``checksums``).
    """
    kinds = {fingerprint.split(":", 1)[0] for _, fingerprint in entries.values()}
    mode = kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "sampled")
    return ModelSummary(
        ok=True,
        mode=mode,
        files=len(entries),
        total_bytes=sum(size for size, _ in entries.values()),
        shards=shards,
        digest=directory_digest(entries),
        fingerprints={name: fp.split(":", 1)[1] for name, (_, fp) in entries.items()},
    )


def _nodes(names: list[str]) -> str:
    return ", ".join(sorted(names))


def _grouped(values: Mapping[str, str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for node, value in values.items():
        groups.setdefault(value, []).append(node)
    return groups


def _describe_groups(groups: Mapping[str, list[str]]) -> str:
    return "; ".join(f"{value} on {_nodes(nodes)}" for value, nodes in sorted(groups.items()))


def _file_differences(summaries: Mapping[str, ModelSummary]) -> list[str] | None:
    tables = {node: s.fingerprints for node, s in summaries.items()}
    if any(table is None for table in tables.values()):
        return None
    length = min(
        (len(fp) for table in tables.values() if table for fp in table.values()),
        default=FINGERPRINT_LENGTHS[0],
    )
    names = sorted({name for table in tables.values() if table for name in table})
    problems = []
    for name in names:
        values = {
            node: (table or {}).get(name, "missing")[:length] for node, table in tables.items()
        }
        groups = _grouped(values)
        if len(groups) > 1:
            problems.append(f"{name} differs between nodes: {_describe_groups(groups)}")
    return problems or None


def compare_rank_summaries(summaries: Mapping[str, ModelSummary]) -> list[str]:
    """Problems across ranks (node name -> summary); empty when all agree; pure.

    Each problem names the node(s) and, when the summaries carry per-file
    fingerprints, the file that differs.
    """
    problems = [
        f"node {node}: model verification failed: {summary.error}"
        for node, summary in sorted(summaries.items())
        if not summary.ok
    ]
    verified = {node: s for node, s in summaries.items() if s.ok}
    if len(_grouped({node: s.digest for node, s in verified.items()})) <= 1:
        return problems
    modes = _grouped({node: s.mode for node, s in verified.items()})
    if len(modes) > 1:
        problems.append(
            "ranks fingerprinted their files differently, so they cannot be compared ("
            + _describe_groups(modes)
            + "): every rank must run verify-model with the same options"
        )
        return problems
    per_file = _file_differences(verified)
    if per_file is not None:
        return problems + per_file
    digests = _grouped({node: s.digest[:12] for node, s in verified.items()})
    problems.append(
        "model directories differ between nodes (digest "
        + _describe_groups(digests)
        + "); the per-file table did not fit the termination message: use a checksum "
        "manifest (spec.model.checksums) to name the file"
    )
    return problems
