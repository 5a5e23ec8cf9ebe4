"""Small model directories with REAL safetensors files, written with struct + json.

The writer is deliberately independent of ``sparkllm.integrity.safetensors`` (it follows
the published format, not our reader), so reader and writer cannot share a mistake. Other
test modules import the helpers; the tests here pin the writer to the format's bytes.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path

from sparkllm.integrity import read_header

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1, "I8": 1}
TensorSpec = tuple[str, tuple[int, ...]]


def tensor_bytes(dtype: str, shape: Sequence[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count * DTYPE_BYTES[dtype]


def safetensors_bytes(
    tensors: Mapping[str, TensorSpec], *, metadata: Mapping[str, str] | None = None
) -> bytes:
    """A complete safetensors file: 8-byte LE length, JSON header (space-padded to 8), zeros."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = tensor_bytes(dtype, shape)
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + bytes(offset)


def write_safetensors(path: Path, tensors: Mapping[str, TensorSpec]) -> int:
    data = safetensors_bytes(tensors)
    path.write_bytes(data)
    return len(data)


def model_tensors(*, layers: int, hidden: int = 16, vocab: int = 64) -> dict[str, TensorSpec]:
    """A llama-shaped model: embeddings, ``layers`` decoder layers, final norm, head."""
    tensors: dict[str, TensorSpec] = {"model.embed_tokens.weight": ("BF16", (vocab, hidden))}
    for i in range(layers):
        prefix = f"model.layers.{i}."
        tensors[prefix + "self_attn.q_proj.weight"] = ("BF16", (hidden, hidden))
        tensors[prefix + "mlp.down_proj.weight"] = ("BF16", (hidden, 4 * hidden))
        tensors[prefix + "input_layernorm.weight"] = ("BF16", (hidden,))
    tensors["model.norm.weight"] = ("BF16", (hidden,))
    tensors["lm_head.weight"] = ("BF16", (vocab, hidden))
    return tensors


def shard_name(index: int, count: int) -> str:
    return f"model-{index + 1:05d}-of-{count:05d}.safetensors"


def make_model_dir(
    root: Path,
    *,
    layers: int = 6,
    shards: int = 3,
    hidden: int = 16,
    vocab: int = 64,
    tensors: Mapping[str, TensorSpec] | None = None,
) -> Path:
    """A complete model directory: config, tokenizer files, index and ``shards`` shards."""
    root.mkdir(parents=True, exist_ok=True)
    all_tensors = dict(tensors or model_tensors(layers=layers, hidden=hidden, vocab=vocab))
    names = list(all_tensors)
    per_shard = -(-len(names) // shards)
    weight_map: dict[str, str] = {}
    total = 0
    for index in range(shards):
        chunk = names[index * per_shard : (index + 1) * per_shard]
        shard = shard_name(index, shards)
        write_safetensors(root / shard, {name: all_tensors[name] for name in chunk})
        weight_map |= dict.fromkeys(chunk, shard)
        total += sum(tensor_bytes(*all_tensors[name]) for name in chunk)
    index_doc = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (root / "model.safetensors.index.json").write_text(json.dumps(index_doc))
    config = {"num_hidden_layers": layers, "hidden_size": hidden, "vocab_size": vocab}
    (root / "config.json").write_text(json.dumps(config))
    (root / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "WordLevel"}}')
    (root / "tokenizer_config.json").write_text('{"model_max_length": 12288}')
    return root


def test_writer_produces_the_published_byte_layout(tmp_path: Path) -> None:
    data = safetensors_bytes({"a": ("F32", (2,)), "b": ("BF16", (1, 3))}, metadata={"k": "v"})
    (length,) = struct.unpack("<Q", data[:8])
    assert length % 8 == 0
    header = json.loads(data[8 : 8 + length])
    assert header["a"] == {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    assert header["b"]["data_offsets"] == [8, 14]
    assert len(data) == 8 + length + 14


def test_reader_agrees_with_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    size = write_safetensors(path, {"w": ("BF16", (4, 4)), "n": ("F32", (4,))})
    header = read_header(path)
    assert {name: t.nbytes for name, t in header.tensors.items()} == {"w": 32, "n": 16}
    assert header.expected_file_size == size


def test_model_dir_has_every_file_the_verifier_expects(tmp_path: Path) -> None:
    root = make_model_dir(tmp_path / "m", layers=6, shards=3)
    names = sorted(p.name for p in root.iterdir())
    assert names == [
        "config.json",
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
