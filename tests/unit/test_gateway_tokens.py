"""Token counting and the chat template: exact counts, the byte bound, HF-style rendering."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from sparkllm.errors import GatewayError
from sparkllm.gateway.chat_messages import prepare_messages
from sparkllm.gateway.chat_template import (
    ChatTemplate,
    ChatTemplateError,
    ContentFormat,
    detect_content_format,
)
from sparkllm.gateway.tokens import TokenCounter, is_byte_level_bpe
from tests.unit.gateway_fixtures import (
    BOS,
    SPECIAL_TOKENS,
    train_tokenizer,
    training_corpus,
    write_model_dir,
)

TOKENIZER = train_tokenizer()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("model"), TOKENIZER)


@pytest.fixture(scope="module")
def counter(model_dir: Path) -> TokenCounter:
    return TokenCounter.from_dir(model_dir)


@pytest.fixture(scope="module")
def template(model_dir: Path) -> ChatTemplate:
    return ChatTemplate.load(tokenizer_dir=model_dir)


# --- exact counting ------------------------------------------------------------------


def test_rendered_chat_is_exactly_the_chatml_prompt(template: ChatTemplate) -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hello 你好"},
    ]
    rendered = template.render(messages, tools=None, template_kwargs={})
    assert rendered == (
        f"{BOS}<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nHello 你好<|im_end|>\n<|im_start|>assistant\n"
    )


def test_count_equals_the_tokenizers_own_encoding(
    counter: TokenCounter, template: ChatTemplate
) -> None:
    messages = [{"role": "user", "content": "the quick brown fox 🙂 " * 20}]
    rendered = template.render(messages, tools=None, template_kwargs={})
    expected = TOKENIZER.encode(rendered, add_special_tokens=False).ids
    assert counter.count(rendered, add_special_tokens=False) == len(expected)
    # Special tokens in the text are single tokens, counted once.
    for special in SPECIAL_TOKENS:
        special_id = TOKENIZER.token_to_id(special)
        assert special_id is not None
        assert expected.count(special_id) == rendered.count(special)


def test_measure_is_exact_above_the_threshold_and_a_bound_below(counter: TokenCounter) -> None:
    text = "the gateway counts tokens " * 10
    exact = counter.count(text, add_special_tokens=False)
    size_bytes = len(text.encode())
    assert exact < size_bytes
    below = counter.measure(text, add_special_tokens=False, exact_above=size_bytes)
    assert (below.tokens, below.exact) == (size_bytes, False)
    above = counter.measure(text, add_special_tokens=False, exact_above=size_bytes - 1)
    assert (above.tokens, above.exact) == (exact, True)
    always = counter.measure(text, add_special_tokens=False, exact_above=-1)
    assert (always.tokens, always.exact) == (exact, True)


def test_unpaired_surrogates_are_a_value_error(counter: TokenCounter) -> None:
    for exact_above in (-1, 10**6):
        with pytest.raises(ValueError, match=r"surrogate|utf-8"):
            counter.measure("a\ud800b", add_special_tokens=False, exact_above=exact_above)


def test_unusable_tokenizer_directory_is_a_gateway_error(tmp_path: Path) -> None:
    with pytest.raises(GatewayError, match=r"cannot load tokenizer .*tokenizer\.json"):
        TokenCounter.from_dir(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(GatewayError, match="cannot load tokenizer"):
        TokenCounter.from_dir(tmp_path)
    # Loads, but cannot encode (its unknown token is missing): caught at load, not per request.
    Tokenizer(models.BPE(unk_token="[UNK]")).save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(GatewayError, match=r"Unk token .*not found"):
        TokenCounter.from_dir(tmp_path)


# --- the byte bound ---------------------------------------------------------------------

_SPECIAL_OR_TEXT = st.one_of(st.text(max_size=200), st.sampled_from(SPECIAL_TOKENS))


@settings(suppress_health_check=[HealthCheck.too_slow])  # examples: the profile's
@given(pieces=st.lists(_SPECIAL_OR_TEXT, max_size=8))
def test_byte_level_bpe_never_has_more_tokens_than_utf8_bytes(pieces: list[str]) -> None:
    text = "".join(pieces)
    bytes_ = len(text.encode("utf-8"))
    assert len(TOKENIZER.encode(text, add_special_tokens=False).ids) <= bytes_
    added = TOKENIZER.num_special_tokens_to_add(False)
    assert len(TOKENIZER.encode(text, add_special_tokens=True).ids) <= bytes_ + added


def _tokenizer_json(tokenizer: Tokenizer) -> dict[str, Any]:
    return dict(json.loads(tokenizer.to_str()))


def _variants() -> Iterator[tuple[str, dict[str, Any], bool]]:
    base = _tokenizer_json(TOKENIZER)
    yield "trained byte-level BPE", base, True
    yield (
        "empty normaliser sequence",
        {**base, "normalizer": {"type": "Sequence", "normalizers": []}},
        True,
    )
    yield "NFKC can grow the text", {**base, "normalizer": {"type": "NFKC"}}, False
    split = {"type": "Split", "pattern": {"Regex": "\\d"}, "behavior": "Isolated", "invert": False}
    byte_level = base["pre_tokenizer"]
    yield (
        "split then byte-level (DeepSeek style)",
        {**base, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split, byte_level]}},
        True,
    )
    yield (
        "prefix space adds a byte",
        {**base, "pre_tokenizer": {**byte_level, "add_prefix_space": True}},
        False,
    )
    yield "metaspace is not byte-level", {**base, "pre_tokenizer": {"type": "Metaspace"}}, False
    yield "wordpiece model", {**base, "model": {"type": "WordPiece"}}, False
    yield (
        "no byte-level step",
        {**base, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split]}},
        False,
    )


@pytest.mark.parametrize(
    ("tokenizer_json", "expected"), [v[1:] for v in _variants()], ids=[v[0] for v in _variants()]
)
def test_byte_level_detection(tokenizer_json: dict[str, Any], expected: bool) -> None:
    assert is_byte_level_bpe(tokenizer_json) is expected


def test_a_non_byte_level_tokenizer_never_takes_the_shortcut(tmp_path: Path) -> None:
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"], show_progress=False)
    tokenizer.train_from_iterator(training_corpus(lines=50), trainer=trainer)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    counter = TokenCounter.from_dir(tmp_path)
    assert counter.byte_level is False
    # U+FDFA is 3 bytes but NFKC expands it to 18 characters: a bound would be wrong.
    size = counter.measure("\ufdfa", add_special_tokens=False, exact_above=10**6)
    assert size.exact is True


# --- the chat template -------------------------------------------------------------------


def test_tools_are_rendered_with_tojson_unescaped(template: ChatTemplate) -> None:
    tools = [{"type": "function", "function": {"name": "weather", "description": "<city> & co"}}]
    rendered = template.render([{"role": "user", "content": "hi"}], tools=tools, template_kwargs={})
    assert json.dumps(tools[0], ensure_ascii=False) in rendered
    assert "&amp;" not in rendered


def test_raise_exception_surfaces_as_chat_template_error(template: ChatTemplate) -> None:
    with pytest.raises(ChatTemplateError, match="Unsupported role: wizard"):
        template.render([{"role": "wizard", "content": "x"}], tools=None, template_kwargs={})


def test_type_errors_in_rendering_are_chat_template_errors(template: ChatTemplate) -> None:
    with pytest.raises(ChatTemplateError, match="TypeError"):
        template.render([{"role": "user", "content": 5}], tools=None, template_kwargs={})


def test_named_templates_pick_tool_use_when_tools_are_given(tmp_path: Path) -> None:
    variants = [{"name": "default", "template": "plain"}, {"name": "tool_use", "template": "tools"}]
    write_model_dir(tmp_path, TOKENIZER)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["chat_template"] = variants
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    template = ChatTemplate.load(tokenizer_dir=tmp_path)
    assert template.render([], tools=None, template_kwargs={}) == "plain"
    assert template.render([], tools=[{"function": {}}], template_kwargs={}) == "tools"


def test_template_file_overrides_and_generation_block(tmp_path: Path) -> None:
    write_model_dir(tmp_path / "model", TOKENIZER)
    override = tmp_path / "override.jinja"
    override.write_text(
        "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}"
        "{% if loop.index > 1 %}{% break %}{% endif %}{% endfor %}{{ strftime_now('%Y')[:0] }}"
        "{{ reasoning_effort | default('') }}"
    )
    template = ChatTemplate.load(tokenizer_dir=tmp_path / "model", override_path=override)
    messages = [{"content": "a"}, {"content": "b"}, {"content": "c"}]
    assert template.render(messages, tools=None, template_kwargs={"reasoning_effort": "high"}) == (
        "[a][b]high"
    )


def test_missing_or_broken_template_is_a_gateway_error(tmp_path: Path) -> None:
    write_model_dir(tmp_path, TOKENIZER, template="{% for %}")
    with pytest.raises(GatewayError, match="does not compile"):
        ChatTemplate.load(tokenizer_dir=tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(GatewayError, match="no chat template"):
        ChatTemplate.load(tokenizer_dir=tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("[]")
    with pytest.raises(GatewayError, match="is not a JSON object"):
        ChatTemplate.load(tokenizer_dir=tmp_path)
    (tmp_path / "tokenizer_config.json").unlink()
    with pytest.raises(GatewayError, match="cannot read the chat template"):
        ChatTemplate.load(tokenizer_dir=tmp_path)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{{ messages[0].content }}", ContentFormat.STRING),
        ("{% for part in message['content'] %}{{ part.text }}{% endfor %}", ContentFormat.OPENAI),
        ("{% for part in message.content | list %}{{ part }}{% endfor %}", ContentFormat.OPENAI),
        ("{% for m in messages %}{{ m.content }}{% endfor %}", ContentFormat.STRING),
        ("{{ 'image' }}", ContentFormat.OPENAI),
    ],
)
def test_content_format_detection(source: str, expected: ContentFormat) -> None:
    assert detect_content_format(source) is expected


def test_prepare_messages_follows_sglang() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": None, "name": None},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "a"},
                {"type": "thinking", "thinking": "hidden"},
                {"type": "text", "text": "b"},
            ],
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "f", "arguments": '{"x": 1}'}}],
        },
        {"role": "tool", "content": [{"type": "text", "text": "out"}]},
        {"role": "assistant", "content": "partial"},
    ]
    prepared, prefix = prepare_messages(
        messages, content_format=ContentFormat.STRING, continue_final_message=False
    )
    assert prepared == [
        {"role": "system", "content": ""},
        {"role": "user", "content": "a b"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}],
        },
        {"role": "tool", "content": "out"},
        {"role": "user", "content": "partial"},  # a trailing assistant turn becomes a user turn
    ]
    assert prefix == ""
    continued, prefix = prepare_messages(
        messages, content_format=ContentFormat.OPENAI, continue_final_message=True
    )
    assert prefix == "partial"
    assert continued[1]["content"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert continued[3]["content"] == "out"  # tool text parts are always flattened
    assert len(continued) == 4


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]"])
def test_bad_tool_call_arguments_are_rejected(arguments: str) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": arguments}}]}
    ]
    with pytest.raises(ChatTemplateError, match="arguments must be"):
        prepare_messages(messages, content_format=ContentFormat.STRING, continue_final_message=True)


def test_a_separate_chat_template_file_wins_over_the_config(tmp_path: Path) -> None:
    write_model_dir(tmp_path, TOKENIZER)
    (tmp_path / "chat_template.jinja").write_text("{{ bos_token }}{{ messages | length }}")
    template = ChatTemplate.load(tokenizer_dir=tmp_path)
    assert template.render([{"role": "user"}] * 3, tools=None, template_kwargs={}) == f"{BOS}3"
