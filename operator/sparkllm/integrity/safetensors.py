"""The safetensors file format, read with the standard library: header, tensors, sizes.

Why our own reader: the integrity check and the capacity planner need only the header
(which tensors, how many bytes each), never the data, and the ``safetensors`` package
would pull in numpy/torch for that. The format (https://github.com/huggingface/safetensors)
is small: 8 bytes little-endian unsigned header length N, then N bytes of UTF-8 JSON
(possibly padded with spaces), then the data buffer. The JSON maps each tensor name to
``{"dtype", "shape", "data_offsets": [begin, end]}`` with offsets relative to the start
of the buffer; the optional key ``__metadata__`` maps strings to strings.

What "valid" means here, as in the reference implementation's checks: the header parses;
every tensor's offsets are ordered and inside the buffer; and the file is exactly as long
as its header says (8 + N + the largest end offset). The last rule is what catches a
truncated download, the commonest way a 3.6 GB shard goes wrong.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

from sparkllm.errors import SparkllmError

HEADER_LENGTH_BYTES: Final = 8
# The reference implementation refuses headers above 100 MB; so do we.
MAX_HEADER_BYTES: Final = 100_000_000
METADATA_KEY: Final = "__metadata__"


class SafetensorsError(SparkllmError):
    """A safetensors file cannot be read or is inconsistent; the message names the file."""


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """One tensor of a safetensors header."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True, slots=True)
class SafetensorsHeader:
    """What a safetensors file declares, and how long it must be."""

    tensors: Mapping[str, TensorEntry]
    metadata: Mapping[str, str]
    header_bytes: int
    """N: the length of the JSON header, padding included."""

    @property
    def data_bytes(self) -> int:
        """Length of the data buffer the tensors need (the largest end offset)."""
        return max((tensor.end for tensor in self.tensors.values()), default=0)

    @property
    def expected_file_size(self) -> int:
        return HEADER_LENGTH_BYTES + self.header_bytes + self.data_bytes


def _tensor_entry(name: str, raw: Any, *, where: str) -> TensorEntry:
    if not isinstance(raw, Mapping):
        raise SafetensorsError(f"{where}: tensor {name!r} is not an object")
    dtype, shape, offsets = raw.get("dtype"), raw.get("shape"), raw.get("data_offsets")
    if not isinstance(dtype, str):
        raise SafetensorsError(f"{where}: tensor {name!r} has no dtype")
    if not isinstance(shape, list) or not all(
        isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0 for dim in shape
    ):
        raise SafetensorsError(f"{where}: tensor {name!r} has an invalid shape {shape!r}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise SafetensorsError(f"{where}: tensor {name!r} has invalid data_offsets {offsets!r}")
    return TensorEntry(name=name, dtype=dtype, shape=tuple(shape), begin=offsets[0], end=offsets[1])


def parse_header(raw_header: bytes, *, where: str = "<header>") -> SafetensorsHeader:
    """Parse the JSON header bytes (without the 8-byte length); pure."""
    try:
        document = json.loads(raw_header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SafetensorsError(f"{where}: header is not UTF-8 JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise SafetensorsError(f"{where}: header is not a JSON object")
    metadata = document.pop(METADATA_KEY, None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise SafetensorsError(f"{where}: {METADATA_KEY} must map strings to strings")
    tensors = {name: _tensor_entry(name, raw, where=where) for name, raw in document.items()}
    return SafetensorsHeader(tensors=tensors, metadata=metadata, header_bytes=len(raw_header))


def _read_exactly(stream: BinaryIO, count: int, *, where: str) -> bytes:
    data = stream.read(count)
    if len(data) != count:
        raise SafetensorsError(
            f"{where}: truncated: expected {count} header bytes, found {len(data)}"
        )
    return data


def read_header(path: Path, *, label: str | None = None) -> SafetensorsHeader:
    """Read and check the header of the safetensors file at ``path``.

    Raises SafetensorsError naming the file (as ``label``, default the path) when it is
    unreadable, malformed, or not exactly as long as its header requires (truncated, or
    with trailing bytes).
    """
    where = label or str(path)
    try:
        with path.open("rb") as stream:
            (length,) = struct.unpack("<Q", _read_exactly(stream, HEADER_LENGTH_BYTES, where=where))
            if length > MAX_HEADER_BYTES:
                raise SafetensorsError(f"{where}: header length {length} exceeds 100 MB")
            header = parse_header(_read_exactly(stream, length, where=where), where=where)
        size = path.stat().st_size
    except OSError as exc:
        raise SafetensorsError(f"{where}: cannot read: {exc.strerror or exc}") from exc
    if size != header.expected_file_size:
        state = "truncated" if size < header.expected_file_size else "has trailing bytes"
        raise SafetensorsError(
            f"{where}: {state}: {size} bytes on disk, the header requires "
            f"{header.expected_file_size}"
        )
    return header
