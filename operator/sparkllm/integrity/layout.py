"""Is the model directory complete? Index, shards, config and tokenizer files.

Why these checks, in the documents' words ("model complete: all 46 shards, the index and
tokenizer files present"): SGLang loads whatever it finds and fails late, after minutes
of loading on every rank, or worse serves a model that is silently wrong. A missing
shard, a truncated one, an index that names a file that is not there, or a tokenizer
without its config are each caught here in seconds, before SGLang starts, with a message
that names the file.

The rules:

- ``config.json`` exists and is a JSON object.
- A tokenizer: ``tokenizer.json`` or ``tokenizer.model``, plus ``tokenizer_config.json``.
- ``model.safetensors.index.json`` exists (or, for a one-shard model, ``model.safetensors``)
  and its ``weight_map`` names relative shard files that all exist; the number of
  distinct shards equals the expected count.
- Every shard's header parses and the file is exactly as long as the header says; every
  tensor the index maps to a shard is in that shard's header; the tensors' bytes add up
  to the index's ``metadata.total_size`` when it is given.

Stray ``*.safetensors`` files that the index does not name are reported as notes, not
problems: SGLang filters shards through the index, so they are never loaded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final

from sparkllm.integrity.safetensors import SafetensorsError, SafetensorsHeader, read_header

CONFIG_FILE: Final = "config.json"
INDEX_FILE: Final = "model.safetensors.index.json"
SINGLE_SHARD_FILE: Final = "model.safetensors"
TOKENIZER_FILES: Final = ("tokenizer.json", "tokenizer.model")
TOKENIZER_CONFIG_FILE: Final = "tokenizer_config.json"


@dataclass(frozen=True, slots=True)
class LayoutReport:
    """What the directory holds and what is wrong with it (empty ``problems`` = complete)."""

    shards: tuple[str, ...]
    """Shard files, relative to the model directory, sorted."""
    headers: Mapping[str, SafetensorsHeader]
    """Header of every shard that could be read, by relative path."""
    config: Mapping[str, Any]
    problems: tuple[str, ...]
    notes: tuple[str, ...] = ()
    index_total_size: int | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(slots=True)
class _Findings:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _read_json_object(path: Path, findings: _Findings) -> dict[str, Any] | None:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        findings.problems.append(f"{path.name} is missing")
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        findings.problems.append(f"{path.name} is unreadable or not JSON: {exc}")
        return None
    if not isinstance(document, dict):
        findings.problems.append(f"{path.name} is not a JSON object")
        return None
    return document


def _check_tokenizer(model_dir: Path, findings: _Findings) -> None:
    if not any((model_dir / name).is_file() for name in TOKENIZER_FILES):
        findings.problems.append(
            f"no tokenizer: neither {' nor '.join(TOKENIZER_FILES)} is present"
        )
    if not (model_dir / TOKENIZER_CONFIG_FILE).is_file():
        findings.problems.append(f"{TOKENIZER_CONFIG_FILE} is missing")


def _is_safe_relative(name: str) -> bool:
    path = PurePosixPath(name)
    return bool(name) and not path.is_absolute() and ".." not in path.parts


def _weight_map(index: Mapping[str, Any], findings: _Findings) -> dict[str, str]:
    raw = index.get("weight_map")
    if not isinstance(raw, dict) or not raw:
        findings.problems.append(f"{INDEX_FILE} has no weight_map")
        return {}
    weight_map = {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}
    if len(weight_map) != len(raw):
        findings.problems.append(f"{INDEX_FILE}: weight_map must map tensor names to file names")
    unsafe = sorted({v for v in weight_map.values() if not _is_safe_relative(v)})
    if unsafe:
        findings.problems.append(f"{INDEX_FILE} names shards outside the directory: {unsafe}")
    return {k: v for k, v in weight_map.items() if _is_safe_relative(v)}


def _index_total_size(index: Mapping[str, Any]) -> int | None:
    metadata = index.get("metadata")
    total = metadata.get("total_size") if isinstance(metadata, Mapping) else None
    return int(total) if isinstance(total, int | float) and not isinstance(total, bool) else None


def _check_shards(
    model_dir: Path,
    *,
    weight_map: Mapping[str, str],
    total_size: int | None,
    findings: _Findings,
) -> dict[str, SafetensorsHeader]:
    headers: dict[str, SafetensorsHeader] = {}
    for shard in sorted(set(weight_map.values())):
        if not (model_dir / shard).is_file():
            findings.problems.append(f"shard {shard} named by {INDEX_FILE} is missing")
            continue
        try:
            headers[shard] = read_header(model_dir / shard, label=f"shard {shard}")
        except SafetensorsError as exc:
            findings.problems.append(str(exc))
    by_shard: dict[str, list[str]] = {}
    for tensor, shard in weight_map.items():
        if shard in headers and tensor not in headers[shard].tensors:
            by_shard.setdefault(shard, []).append(tensor)
    for shard, tensors in sorted(by_shard.items()):
        sample = ", ".join(sorted(tensors)[:3])
        findings.problems.append(
            f"shard {shard} lacks {len(tensors)} tensor(s) the index maps to it (e.g. {sample})"
        )
    if total_size is not None and len(headers) == len(set(weight_map.values())):
        declared = sum(t.nbytes for h in headers.values() for t in h.tensors.values())
        if declared != total_size:
            findings.problems.append(
                f"{INDEX_FILE} metadata.total_size is {total_size} bytes but the shards "
                f"hold {declared} bytes of tensors"
            )
    return headers


def check_layout(model_dir: Path, *, expected_shards: int) -> LayoutReport:
    """Check the directory's structure; every problem names the file concerned."""
    findings = _Findings()
    if not model_dir.is_dir():
        return LayoutReport(
            shards=(), headers={}, config={}, problems=(f"{model_dir} is not a directory",)
        )
    config = _read_json_object(model_dir / CONFIG_FILE, findings) or {}
    _check_tokenizer(model_dir, findings)
    total_size: int | None = None
    if (model_dir / INDEX_FILE).exists() or expected_shards != 1:
        index = _read_json_object(model_dir / INDEX_FILE, findings) or {}
        weight_map = _weight_map(index, findings) if index else {}
        total_size = _index_total_size(index)
    elif not (model_dir / SINGLE_SHARD_FILE).is_file():
        weight_map = {}
        findings.problems.append(f"neither {INDEX_FILE} nor {SINGLE_SHARD_FILE} is present")
    else:  # one shard without an index, as small models ship
        weight_map = {}
        try:
            single = read_header(model_dir / SINGLE_SHARD_FILE, label=SINGLE_SHARD_FILE)
            weight_map = {name: SINGLE_SHARD_FILE for name in single.tensors}
        except SafetensorsError as exc:
            findings.problems.append(str(exc))
    headers = _check_shards(
        model_dir, weight_map=weight_map, total_size=total_size, findings=findings
    )
    shards = tuple(sorted(set(weight_map.values())))
    if weight_map and len(shards) != expected_shards:
        findings.problems.append(
            f"{INDEX_FILE} names {len(shards)} shard(s), expected {expected_shards} "
            "(spec.model.expectedShards)"
        )
    strays = sorted(str(p.relative_to(model_dir)) for p in model_dir.glob("*.safetensors"))
    unused = [name for name in strays if name not in shards]
    if unused:
        findings.notes.append(f"safetensors files not in the index (not loaded): {unused}")
    return LayoutReport(
        shards=shards,
        headers=headers,
        config=config,
        problems=tuple(findings.problems),
        notes=tuple(findings.notes),
        index_total_size=total_size,
    )
