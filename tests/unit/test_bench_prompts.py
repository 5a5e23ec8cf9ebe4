"""Prompts of N tokens, cold and seeded; the needle; the scenario matrix."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from sparkllm.bench import DOCUMENTED_MATRIX, select_scenarios
from sparkllm.bench.prompts import FILLER_WORDS, NIAH_QUESTION, PromptBuilder, needle_found
from sparkllm.errors import SpecError
from tests.unit.gateway_fixtures import train_tokenizer, write_model_dir


@pytest.fixture
def bpe_dir(tmp_path: Path) -> Path:
    """A tiny BPE tokenizer with a small vocabulary: most words are several tokens."""
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=80, special_tokens=["[UNK]"])
    tokenizer.train_from_iterator([" ".join(FILLER_WORDS)] * 4, trainer)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    return tmp_path


@pytest.mark.parametrize("tokens", [1, 17, 256])
def test_approximate_prompts_have_exactly_n_words(tokens: int) -> None:
    builder = PromptBuilder()
    prompt = builder.load_prompt(tokens=tokens, nonce="run1-x-0", seed=7)
    assert prompt.tokens == tokens == len(prompt.text.split())
    assert prompt.text.startswith("[run1-x-0]")
    assert not builder.exact
    assert builder.counting.startswith("approximate")


def test_prompts_are_seeded_and_cold() -> None:
    builder = PromptBuilder()
    first = builder.load_prompt(tokens=64, nonce="a", seed=1)
    assert first == builder.load_prompt(tokens=64, nonce="a", seed=1)
    other_nonce = builder.load_prompt(tokens=64, nonce="b", seed=1)
    assert other_nonce.text.split()[1:] == first.text.split()[1:]
    assert other_nonce.text.split()[0] != first.text.split()[0]  # no shared prefix at all
    assert builder.load_prompt(tokens=64, nonce="a", seed=2).text != first.text


@pytest.mark.parametrize("tokens", [10, 100, 400])
def test_tokenizer_prompts_fit_the_token_count(bpe_dir: Path, tokens: int) -> None:
    builder = PromptBuilder.from_dir(bpe_dir)
    assert builder.exact
    prompt = builder.load_prompt(tokens=tokens, nonce="n", seed=3)
    independent = Tokenizer.from_file(str(bpe_dir / "tokenizer.json"))
    counted = len(independent.encode(prompt.text, add_special_tokens=False).ids)
    assert counted == prompt.tokens
    longest_word = max(
        len(independent.encode(word, add_special_tokens=False).ids) for word in FILLER_WORDS
    )
    assert tokens - longest_word < prompt.tokens <= tokens


def test_a_missing_tokenizer_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot load tokenizer"):
        PromptBuilder.from_dir(tmp_path)


@pytest.mark.parametrize(("depth", "region"), [(0.0, "start"), (0.5, "middle"), (1.0, "end")])
def test_the_needle_sits_at_its_depth(depth: float, region: str) -> None:
    prompt = PromptBuilder().needle_prompt(tokens=400, depth=depth, nonce="n", seed=5)
    assert prompt.needle is not None
    assert prompt.tokens == 400
    position = prompt.text.index(f"The secret passphrase is {prompt.needle}.")
    share = position / len(prompt.text)
    expected = {"start": (0.0, 0.1), "middle": (0.4, 0.6), "end": (0.85, 1.0)}[region]
    assert expected[0] <= share <= expected[1]
    assert prompt.text.endswith("Answer with the passphrase only.")


def test_needle_depth_out_of_range() -> None:
    with pytest.raises(SpecError):
        PromptBuilder().needle_prompt(tokens=100, depth=1.5, nonce="n", seed=1)


@pytest.mark.parametrize(
    ("answer", "found"),
    [("The passphrase is Amber-4821.", True), ("amber-4821", True), ("amber 4821", False)],
)
def test_needle_found(answer: str, found: bool) -> None:
    assert needle_found(answer, "amber-4821") is found


def test_the_documented_matrix() -> None:
    shapes = {(s.name, s.input_tokens, s.output_tokens, s.concurrency) for s in DOCUMENTED_MATRIX}
    assert {
        ("short-c1", 256, 128, 1),
        ("short-c4", 256, 128, 4),
        ("short-c8", 256, 128, 8),
        ("cold-4k", 4000, 128, 1),
        ("cold-8k", 8000, 128, 1),
    } <= shapes
    short_c8 = next(s for s in DOCUMENTED_MATRIX if s.name == "short-c8")
    assert short_c8.requests == 120  # the documents' Scale8 120/120
    assert short_c8.basis()["cache"].startswith("cold")


def test_scenario_selection() -> None:
    chosen = select_scenarios(["niah", "short-c8"], requests=2)
    assert [s.name for s in chosen] == ["short-c8", "niah"]  # matrix order
    assert [s.requests for s in chosen] == [8, 2]  # never fewer than the concurrency
    assert len(select_scenarios(None)) == len(DOCUMENTED_MATRIX)
    with pytest.raises(SpecError, match="unknown scenario"):
        select_scenarios(["short-c16"])
    with pytest.raises(SpecError):
        select_scenarios(None, requests=0)


@pytest.fixture(scope="module")
def model_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The gateway tests' byte-level BPE, saved as a model directory."""
    directory = tmp_path_factory.mktemp("model")
    return write_model_dir(directory, train_tokenizer())


@pytest.mark.parametrize("tokens", [64, 128, 256, 4000])
def test_load_prompts_are_exactly_n_model_tokens(model_tokenizer_dir: Path, tokens: int) -> None:
    """Issue 19: the documents' 256 -> 128 is tokens; a 256-token prompt is 256 tokens."""
    builder = PromptBuilder.from_dir(model_tokenizer_dir)
    independent = Tokenizer.from_file(str(model_tokenizer_dir / "tokenizer.json"))
    for seed in range(6):
        nonce = f"0a1b2c3d-scale8-{seed}"
        prompt = builder.load_prompt(tokens=tokens, nonce=nonce, seed=seed)
        assert len(independent.encode(prompt.text, add_special_tokens=False).ids) == tokens
        assert prompt.tokens == tokens
        assert prompt.text.startswith(f"[{nonce}]")  # still cold: the nonce comes first
    assert builder.counting.startswith("tokenizer (")


def test_needle_prompts_are_exactly_n_model_tokens(model_tokenizer_dir: Path) -> None:
    builder = PromptBuilder.from_dir(model_tokenizer_dir)
    independent = Tokenizer.from_file(str(model_tokenizer_dir / "tokenizer.json"))
    prompt = builder.needle_prompt(tokens=400, depth=0.5, nonce="n", seed=5)
    assert len(independent.encode(prompt.text, add_special_tokens=False).ids) == 400
    assert prompt.text.endswith(NIAH_QUESTION)  # the top-up goes before the question
    assert f"The secret passphrase is {prompt.needle}." in prompt.text
