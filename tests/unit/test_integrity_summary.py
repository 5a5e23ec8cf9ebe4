"""The termination-message summary and the cross-rank comparison (pure)."""

from __future__ import annotations

import pytest

from sparkllm.integrity import ModelSummary, SummaryError, compare_rank_summaries
from sparkllm.integrity.summary import build_summary

SHARDS = 46


def documents_like_entries(fingerprint: str = "a" * 64) -> dict[str, tuple[int, str]]:
    """The documents' layout: 46 shards (168.27 GB) plus index, config and tokenizer."""
    entries = {
        f"model-{i:05d}-of-{SHARDS:05d}.safetensors": (3_658_000_000, f"sampled:{fingerprint}")
        for i in range(1, SHARDS + 1)
    }
    for name in (
        "model.safetensors.index.json",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ):
        entries[name] = (12_345, f"sha256:{'b' * 64}")
    return entries


def test_the_documents_model_fits_with_a_per_file_table() -> None:
    summary = build_summary(entries=documents_like_entries(), shards=SHARDS)
    message = summary.to_message()
    assert len(message.encode()) <= 4096
    parsed = ModelSummary.from_message(message)
    assert parsed.fingerprints is not None
    assert len(parsed.fingerprints) == SHARDS + 5
    assert all(len(fp) == 8 for fp in parsed.fingerprints.values())
    assert (parsed.mode, parsed.files, parsed.digest) == ("mixed", 51, summary.digest)


def test_a_huge_directory_drops_the_table_but_keeps_the_digest() -> None:
    entries = {f"shard-{i:06d}.safetensors": (1, f"sampled:{'c' * 64}") for i in range(1000)}
    summary = build_summary(entries=entries, shards=1000)
    message = summary.to_message()
    assert len(message.encode()) <= 4096
    parsed = ModelSummary.from_message(message)
    assert parsed.fingerprints is None
    assert parsed.digest == summary.digest


def test_a_long_failure_is_truncated_under_the_limit() -> None:
    failed = ModelSummary(ok=False, error="shard x is missing; " * 500)
    message = failed.to_message()
    assert len(message.encode()) <= 4096
    parsed = ModelSummary.from_message(message)
    assert not parsed.ok
    assert (parsed.error or "").startswith("shard x is missing")
    assert (parsed.error or "").endswith("...")


@pytest.mark.parametrize(
    "text", ["", "not json", "[]", '{"v": 2, "ok": true}', '{"v":1,"ok":true}']
)
def test_foreign_messages_are_refused(text: str) -> None:
    with pytest.raises(SummaryError):
        ModelSummary.from_message(text)


def test_digest_depends_on_path_size_and_fingerprint() -> None:
    base = documents_like_entries()
    digest = build_summary(entries=base, shards=SHARDS).digest
    resized = {**base, "config.json": (12_346, base["config.json"][1])}
    renamed = {("x-" + k if k == "config.json" else k): v for k, v in base.items()}
    rehashed = documents_like_entries("d" * 64)
    for variant in (resized, renamed, rehashed):
        assert build_summary(entries=variant, shards=SHARDS).digest != digest


def test_comparison_names_the_file_and_the_nodes() -> None:
    good = build_summary(entries=documents_like_entries(), shards=SHARDS)
    entries = documents_like_entries()
    entries["model-00007-of-00046.safetensors"] = (3_658_000_000, f"sampled:{'e' * 64}")
    bad = build_summary(entries=entries, shards=SHARDS)
    summaries = {
        name: ModelSummary.from_message(s.to_message())
        for name, s in {"spark-a0": good, "spark-a1": bad, "spark-a2": good}.items()
    }
    assert compare_rank_summaries(summaries) == [
        "model-00007-of-00046.safetensors differs between nodes: "
        "aaaaaaaa on spark-a0, spark-a2; eeeeeeee on spark-a1"
    ]


def test_comparison_names_a_file_missing_on_one_node() -> None:
    full = documents_like_entries()
    partial = {k: v for k, v in full.items() if k != "tokenizer.json"}
    summaries = {
        "spark-a0": build_summary(entries=full, shards=SHARDS),
        "spark-a1": build_summary(entries=partial, shards=SHARDS),
    }
    problems = compare_rank_summaries(summaries)
    assert problems == [
        f"tokenizer.json differs between nodes: {'b' * 64} on spark-a0; missing on spark-a1"
    ]


def test_comparison_without_tables_reports_the_digests() -> None:
    first = ModelSummary(ok=True, mode="sampled", files=1, digest="1" * 64)
    second = ModelSummary(ok=True, mode="sampled", files=1, digest="2" * 64)
    (problem,) = compare_rank_summaries({"spark-b0": first, "spark-b1": second})
    assert "digest 111111111111 on spark-b0; 222222222222 on spark-b1" in problem
    assert "spec.model.checksums" in problem


def test_comparison_reports_failed_ranks_and_differing_modes() -> None:
    sampled = ModelSummary(ok=True, mode="sampled", digest="1" * 64, fingerprints={})
    hashed = ModelSummary(ok=True, mode="sha256", digest="2" * 64, fingerprints={})
    failed = ModelSummary(ok=False, error="config.json is missing")
    problems = compare_rank_summaries({"n0": sampled, "n1": hashed, "n2": failed})
    assert problems[0] == "node n2: model verification failed: config.json is missing"
    assert "sampled on n0; sha256 on n1" in problems[1]


def test_agreeing_ranks_have_no_problems() -> None:
    summary = build_summary(entries=documents_like_entries(), shards=SHARDS)
    assert compare_rank_summaries({"a": summary, "b": summary, "c": summary}) == []
    assert compare_rank_summaries({}) == []


def test_empty_tables_with_different_digests_fall_back_to_the_digests() -> None:
    first = ModelSummary(ok=True, mode="sampled", digest="1" * 64, fingerprints={})
    second = ModelSummary(ok=True, mode="sampled", digest="2" * 64, fingerprints={})
    (problem,) = compare_rank_summaries({"a": first, "b": second})
    assert problem.startswith("model directories differ between nodes (digest 111111111111 on a")
