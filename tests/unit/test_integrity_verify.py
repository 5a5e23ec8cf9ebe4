"""verify-model on generated model directories with real safetensors files."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkllm.integrity import (
    ModelSummary,
    SafetensorsError,
    VerifyRequest,
    compare_rank_summaries,
    read_header,
    verify_main,
    verify_model,
)
from sparkllm.integrity.checksums import ChecksumError, parse_manifest
from sparkllm.integrity.verify import write_termination_message
from tests.unit.test_integrity_fixtures import make_model_dir, shard_name, write_safetensors

SHARD_2 = shard_name(1, 3)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return make_model_dir(tmp_path / "model", layers=6, shards=3)


def verify(model: Path, **kwargs: object) -> ModelSummary:
    request = VerifyRequest(model_dir=model, expected_shards=3, **kwargs)  # type: ignore[arg-type]
    return verify_model(request, out=io.StringIO())


def sha256sum_manifest(model: Path) -> str:
    lines = []
    for path in sorted(model.iterdir()):
        lines.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}")
    return "\n".join(lines) + "\n"


def test_a_complete_directory_verifies(model: Path) -> None:
    summary = verify(model, expected_layers=6)
    assert summary.ok, summary.error
    assert (summary.files, summary.shards, summary.mode) == (7, 3, "sha256")
    assert summary.total_bytes == sum(p.stat().st_size for p in model.iterdir())
    assert summary.fingerprints is not None
    assert set(summary.fingerprints) == {p.name for p in model.iterdir()}


def _remove_shard(m: Path) -> None:
    (m / SHARD_2).unlink()


def _truncate_shard(m: Path) -> None:
    data = (m / SHARD_2).read_bytes()
    (m / SHARD_2).write_bytes(data[:-10])


def _append_to_shard(m: Path) -> None:
    with (m / SHARD_2).open("ab") as stream:
        stream.write(b"\0" * 4)


def _drop_tensor_from_shard(m: Path) -> None:
    write_safetensors(m / SHARD_2, {"unrelated.weight": ("BF16", (2,))})


def _index_names_extra_shard(m: Path) -> None:
    index = json.loads((m / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.extra.weight"] = "model-00009-of-00003.safetensors"
    (m / "model.safetensors.index.json").write_text(json.dumps(index))


def _index_total_size_wrong(m: Path) -> None:
    index = json.loads((m / "model.safetensors.index.json").read_text())
    index["metadata"]["total_size"] += 2
    (m / "model.safetensors.index.json").write_text(json.dumps(index))


def _tokenizers_missing(m: Path) -> None:
    (m / "tokenizer.json").unlink()


def _tokenizer_config_missing(m: Path) -> None:
    (m / "tokenizer_config.json").unlink()


def _config_not_json(m: Path) -> None:
    (m / "config.json").write_text("{not json")


def _index_missing(m: Path) -> None:
    (m / "model.safetensors.index.json").unlink()


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (_remove_shard, f"shard {SHARD_2} named by model.safetensors.index.json is missing"),
        (_truncate_shard, f"shard {SHARD_2}: truncated"),
        (_append_to_shard, f"shard {SHARD_2}: has trailing bytes"),
        (_drop_tensor_from_shard, f"shard {SHARD_2} lacks"),
        (_index_names_extra_shard, "model-00009-of-00003.safetensors named by"),
        (_index_names_extra_shard, "names 4 shard(s), expected 3"),
        (_index_total_size_wrong, "metadata.total_size"),
        (_tokenizers_missing, "no tokenizer: neither tokenizer.json nor tokenizer.model"),
        (_tokenizer_config_missing, "tokenizer_config.json is missing"),
        (_config_not_json, "config.json is unreadable or not JSON"),
        (_index_missing, "model.safetensors.index.json is missing"),
    ],
)
def test_each_damage_is_named(model: Path, damage: Callable[[Path], None], expected: str) -> None:
    damage(model)
    summary = verify(model)
    assert not summary.ok
    assert expected in (summary.error or "")


def test_shard_count_must_match_the_spec(model: Path) -> None:
    summary = verify_model(VerifyRequest(model_dir=model, expected_shards=46), out=io.StringIO())
    assert "names 3 shard(s), expected 46 (spec.model.expectedShards)" in (summary.error or "")


def test_layer_count_must_match_the_spec(model: Path) -> None:
    summary = verify(model, expected_layers=43)
    assert "num_hidden_layers is 6, the spec says 43" in (summary.error or "")


def test_one_shard_model_without_index(tmp_path: Path) -> None:
    root = make_model_dir(tmp_path / "m", layers=2, shards=1)
    (root / "model.safetensors.index.json").unlink()
    (root / shard_name(0, 1)).rename(root / "model.safetensors")
    summary = verify_model(VerifyRequest(model_dir=root, expected_shards=1), out=io.StringIO())
    assert summary.ok, summary.error
    assert summary.shards == 1


def test_stray_safetensors_file_is_a_note_not_a_problem(model: Path) -> None:
    write_safetensors(model / "leftover.safetensors", {"x": ("U8", (1,))})
    out = io.StringIO()
    summary = verify_model(VerifyRequest(model_dir=model, expected_shards=3), out=out)
    assert summary.ok
    assert "not in the index (not loaded): ['leftover.safetensors']" in out.getvalue()


def test_manifest_match_and_mismatch(model: Path) -> None:
    manifest = parse_manifest(sha256sum_manifest(model))
    assert verify(model, manifest=manifest).ok
    data = bytearray((model / SHARD_2).read_bytes())
    data[-1] ^= 0xFF  # same size, different content: only a hash can tell
    (model / SHARD_2).write_bytes(bytes(data))
    summary = verify(model, manifest=manifest)
    assert not summary.ok
    assert f"{SHARD_2}: sha256" in (summary.error or "")
    assert "does not match the manifest" in (summary.error or "")


def test_manifest_naming_a_missing_file(model: Path) -> None:
    manifest = parse_manifest(sha256sum_manifest(model) + f"{'0' * 64}  extra/file.bin\n")
    summary = verify(model, manifest=manifest)
    assert "extra/file.bin is listed in the checksum manifest but missing" in (summary.error or "")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"{'A' * 64}  a.bin\n", {"a.bin": "a" * 64}),
        (f"# comment\n\n{'b' * 64} *./sub/b.bin\n", {"sub/b.bin": "b" * 64}),
    ],
)
def test_manifest_parsing(text: str, expected: dict[str, str]) -> None:
    assert parse_manifest(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("abc  a.bin\n", "line 1: expected '<sha256>  <path>'"),
        (f"{'a' * 64}  ../escape\n", "outside the model directory"),
        (f"{'a' * 64}  /etc/passwd\n", "outside the model directory"),
        (f"{'a' * 64}  x\n{'b' * 64}  x\n", "listed twice"),
        ("# nothing\n", "lists no files"),
    ],
)
def test_manifest_refusals(text: str, message: str) -> None:
    with pytest.raises(ChecksumError, match=message):
        parse_manifest(text)


def test_identical_copies_agree_whatever_their_mtimes(model: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(model, copy)
    for path in copy.iterdir():
        os.utime(path, (1_000_000, 1_000_000))
    first, second = verify(model), verify(copy)
    assert first.digest == second.digest
    assert compare_rank_summaries({"spark-a0": first, "spark-a1": second}) == []


def test_sampled_mode_compares_large_files_by_samples(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sparkllm.integrity.verify.FULL_HASH_BELOW_BYTES", 0)
    copy = tmp_path / "copy"
    shutil.copytree(model, copy)
    data = bytearray((copy / SHARD_2).read_bytes())
    data[-1] ^= 0xFF  # inside the last MiB: a sample sees it
    (copy / SHARD_2).write_bytes(bytes(data))
    first, second = verify(model), verify(copy)
    assert (first.mode, second.mode) == ("sampled", "sampled")
    problems = compare_rank_summaries({"spark-a0": first, "spark-a1": first, "spark-a2": second})
    assert len(problems) == 1
    assert problems[0].startswith(f"{SHARD_2} differs between nodes: ")
    assert "on spark-a0, spark-a1" in problems[0]
    assert "on spark-a2" in problems[0]


def test_full_hash_mode_on_request(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sparkllm.integrity.verify.FULL_HASH_BELOW_BYTES", 0)
    out = io.StringIO()
    request = VerifyRequest(model_dir=model, expected_shards=3, hash_mode="full", threads=2)
    summary = verify_model(request, out=out)
    assert summary.mode == "sha256"
    assert "[verify-model] hashed 7/7 files" in out.getvalue()
    assert "MB/s" in out.getvalue()


def test_hidden_files_are_not_fingerprinted(model: Path) -> None:
    (model / ".cache").mkdir()
    (model / ".cache" / "lock").write_text("node-local")
    summary = verify(model)
    assert summary.fingerprints is not None
    assert not any(name.startswith(".") for name in summary.fingerprints)


def test_cli_writes_the_termination_message(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "termination-log"
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text(sha256sum_manifest(model))
    argv = ["--model-dir", str(model), "--expected-shards", "3", "--checksums", str(manifest)]
    code = verify_main([*argv, "--jobs", "2", "--termination-log", str(log)])
    assert code == 0
    message = log.read_text()
    assert len(message.encode()) <= 4096
    summary = ModelSummary.from_message(message)
    assert (summary.ok, summary.mode, summary.shards) == (True, "sha256", 3)
    assert "[verify-model] verified" in capsys.readouterr().out


def test_cli_fails_naming_the_missing_shard(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (model / SHARD_2).unlink()
    log = tmp_path / "termination-log"
    argv = ["--model-dir", str(model), "--expected-shards", "3", "--termination-log", str(log)]
    assert verify_main(argv) == 1
    assert SHARD_2 in capsys.readouterr().err
    failed = ModelSummary.from_message(log.read_text())
    assert not failed.ok
    assert SHARD_2 in (failed.error or "")


def test_cli_with_a_malformed_manifest(model: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text("not a manifest\n")
    log = tmp_path / "termination-log"
    argv = ["--model-dir", str(model), "--expected-shards", "3", "--checksums", str(manifest)]
    assert verify_main([*argv, "--termination-log", str(log)]) == 1
    assert "checksum manifest" in (ModelSummary.from_message(log.read_text()).error or "")


def test_reader_refuses_a_header_longer_than_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes((1000).to_bytes(8, "little") + b"{}")
    with pytest.raises(SafetensorsError, match="truncated"):
        read_header(path)


def test_the_default_termination_log_is_never_created(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    absent = tmp_path / "termination-log"
    monkeypatch.setattr("sparkllm.integrity.verify.DEFAULT_TERMINATION_LOG", str(absent))
    write_termination_message(str(absent), "{}")
    assert not absent.exists()
    assert "absent (not in a pod)" in capsys.readouterr().out
