"""DeepSeek V4 prompts are counted as SGLang 0.5.23 counts them: with DeepSeek's encoder.

The reference is SGLang's own renderer (``sglang/srt/parser/deepseek_recipe_renderer.py``
from the pinned sglang wheel, installed without its dependencies: the file needs only
``deepseek-recipe``), loaded from its file so the engine's package is never imported.
For every request the gateway's count must equal the length of the ids that renderer
produces from the same request body, tasks included; and the byte bound the gateway
uses for short prompts must never be below that count. The request mapping SGLang does
before the renderer (serving_deepseek_recipe.py) is pinned by the behaviours below.
"""

from __future__ import annotations

import importlib.util
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkllm.errors import GatewayError
from sparkllm.gateway import deepseek_prompt
from sparkllm.gateway.admission import Admission, Admitted, Route
from sparkllm.gateway.chat_template import ChatTemplateError
from sparkllm.gateway.deepseek_prompt import DeepSeekV4Prompt, chat_encoding
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.tokens import TokenCounter
from sparkllm_dev.devcluster.toymodel import ARCHITECTURE, train_tokenizer
from tests.unit.gateway_fixtures import clamp_policy

TOKENIZER = train_tokenizer()
PROMPT = DeepSeekV4Prompt(TOKENIZER.to_str())
MODEL = "deepseek-v4-flash"


def _sglang_renderer() -> ModuleType:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None
    assert spec.submodule_search_locations is not None
    path = Path(spec.submodule_search_locations[0], "srt/parser/deepseek_recipe_renderer.py")
    module_spec = importlib.util.spec_from_file_location("sglang_deepseek_renderer", path)
    assert module_spec is not None
    assert module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


REFERENCE = _sglang_renderer().DeepSeekRecipe("dsv4", TOKENIZER)


def _reference_count(payload: dict[str, Any]) -> int:
    """SGLang's count: its renderer on the body its adapter builds (the gateway's copy)."""
    body, task, prefix = PROMPT._request_body(payload)
    ids = REFERENCE.encode(body, task=task)
    return len(ids) + (len(REFERENCE.encode_text(prefix)) if prefix else 0)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CLOCK = {"type": "function", "function": {"name": "clock", "parameters": {"type": "object"}}}

_SAMPLES = ["the pipeline spark", "你好 模型", "café naïve", "<think>", "\uff5cDSML\uff5c"]
_TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60
) | st.sampled_from(_SAMPLES)
_ASSISTANT = st.fixed_dictionaries(
    {"role": st.just("assistant"), "content": _TEXT | st.none()},
    optional={
        "reasoning_content": _TEXT,
        "tool_calls": st.just(
            [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ]
        ),
    },
)
_TURN = st.one_of(
    st.builds(_user, _TEXT),
    st.builds(lambda text: {"role": "system", "content": text}, _TEXT),
    st.builds(lambda text: {"role": "developer", "content": text}, _TEXT),
    _ASSISTANT,
)
_PAYLOADS = st.fixed_dictionaries(
    {"messages": st.lists(_TURN, min_size=1, max_size=5)},
    optional={
        "tools": st.just([WEATHER, CLOCK]),
        "tool_choice": st.sampled_from(
            ["auto", "none", "required", {"type": "function", "function": {"name": "clock"}}]
        ),
        "reasoning_effort": st.sampled_from(["high", "max", "none"]),
        "chat_template_kwargs": st.fixed_dictionaries({"thinking": st.booleans()}),
        "continue_final_message": st.booleans(),
        "response_format": st.just({"type": "json_object"}),
    },
)


# 150 in every profile: a differential against SGLang's own V4 encoder over payload shapes
# (tools, tool_choice, reasoning, continuation); the refusal paths are rare.
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=_PAYLOADS)
def test_the_count_is_sglangs_and_the_bound_never_undercounts(payload: dict[str, Any]) -> None:
    refusal: str | None = None
    try:
        expected = _reference_count(payload)
    except (RuntimeError, ValueError) as refused:  # SGLang answers 400: so must we
        refusal = str(refused)
    if refusal is not None:
        with pytest.raises(ChatTemplateError) as ours:
            PROMPT.count(payload)
        assert str(ours.value) == refusal
        return
    assert PROMPT.count(payload) == expected
    size = PROMPT.measure(payload, exact_above=10**6, byte_level=True)
    assert not size.exact
    assert size.tokens >= expected


@pytest.mark.parametrize("task", sorted(deepseek_prompt.TASK_TOKENS))
@pytest.mark.parametrize("thinking", [False, True])
def test_a_task_counts_as_sglang_attaches_it(task: str, thinking: bool) -> None:
    payload = {
        "messages": [_user("the pipeline spark node")],
        "task": task,
        "chat_template_kwargs": {"thinking": thinking},
    }
    plain = PROMPT.count({**payload, "task": None})
    assert PROMPT.count(payload) == _reference_count(payload)
    assert PROMPT.count(payload) == plain + (1 if task == "action" else -1)
    continued = {
        **payload,
        "messages": [_user("hi"), {"role": "assistant", "content": "the answer"}],
        "continue_final_message": True,
    }
    assert PROMPT.count(continued) == _reference_count(continued)


def test_a_trailing_assistant_turn_is_resent_as_a_user_turn_unless_continued() -> None:
    asked = [_user("hi"), {"role": "assistant", "content": "the pipeline"}]
    resent = [_user("hi"), _user("the pipeline")]
    assert PROMPT.count({"messages": asked}) == PROMPT.count({"messages": resent})
    continued = PROMPT.count({"messages": asked, "continue_final_message": True})
    assert continued != PROMPT.count({"messages": resent})


def test_what_sglangs_request_model_drops_does_not_count() -> None:
    plain = PROMPT.count({"messages": [_user("hello")]})
    assert PROMPT.count({"messages": [{**_user("hello"), "mood": "x" * 500}]}) == plain
    assert PROMPT.count({"messages": [{"role": "USER", "content": "hello"}]}) == plain
    null = {"messages": [{"role": "system", "content": None}, _user("hello")]}
    empty = {"messages": [{"role": "system", "content": ""}, _user("hello")]}
    assert PROMPT.count(null) == PROMPT.count(empty)


def test_tools_count_only_when_the_choice_lets_them() -> None:
    messages = [_user("weather in Paris?")]
    none = PROMPT.count({"messages": messages})
    both = PROMPT.count({"messages": messages, "tools": [WEATHER, CLOCK]})
    assert both > none
    assert PROMPT.count({"messages": messages, "tools": [WEATHER], "tool_choice": "none"}) == none
    named = {"type": "function", "function": {"name": "clock"}}
    assert PROMPT.count(
        {"messages": messages, "tools": [WEATHER, CLOCK], "tool_choice": named}
    ) == PROMPT.count({"messages": messages, "tools": [CLOCK]})


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"reasoning_effort": "30"}, "must be a named tier"),
        ({"reasoning_effort": "0.5"}, "must be a named tier"),
        ({"task": "dance"}, "unknown task"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "image, video and audio input is not supported",
        ),
    ],
)
def test_requests_sglang_refuses_are_refused(payload: dict[str, Any], message: str) -> None:
    with pytest.raises(ChatTemplateError, match=message):
        PROMPT.count({"messages": [_user("hi")], **payload})


def test_a_task_after_a_tool_result_counts_like_sglang() -> None:
    payload = {
        "messages": [
            _user("hi"),
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "clock", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "c", "content": "12:00"},
        ],
        "tools": [CLOCK],
        "task": "query",
    }  # fmt: skip
    assert PROMPT.count(payload) == _reference_count(payload)
    assert PROMPT.count(payload) == PROMPT.count({**payload, "task": None}) - 1


def test_a_tokenizer_without_deepseeks_special_tokens_is_refused_at_load(
    tmp_path: Path,
) -> None:
    from tests.unit.gateway_fixtures import train_tokenizer as chatml_tokenizer

    (tmp_path / "tokenizer.json").write_text(chatml_tokenizer().to_str())
    with pytest.raises(GatewayError, match="cannot encode DeepSeek V4 chats"):
        DeepSeekV4Prompt.from_dir(tmp_path)


@pytest.mark.parametrize(
    ("parser", "config", "encoding"),
    [
        ("deepseekv4", None, "dsv4"),
        (None, {"architectures": [ARCHITECTURE]}, "dsv4"),
        (None, {"architectures": ["DeepseekV41ForCausalLM"]}, "dsv41"),
        (None, {"architectures": [ARCHITECTURE], "model_type": "deepseek_v41"}, "dsv41"),
        ("deepseekv32", {"architectures": [ARCHITECTURE]}, "dsv32"),
        ("qwen25", {"architectures": ["Qwen2ForCausalLM"]}, None),
        (None, {"num_hidden_layers": 43}, None),
        (None, None, None),
    ],
)
def test_the_encoder_is_chosen_as_sglang_chooses(
    tmp_path: Path, parser: str | None, config: dict[str, Any] | None, encoding: str | None
) -> None:
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    assert chat_encoding(tmp_path, parser) == encoding


def test_an_unreadable_config_is_a_startup_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(GatewayError, match=r"config\.json"):
        chat_encoding(tmp_path, None)


# --- in the admission decision ----------------------------------------------------------


def _admission(tmp_path: Path, *, cap: int = 8192, window: int = 12288) -> Admission:
    (tmp_path / "tokenizer.json").write_text(TOKENIZER.to_str())
    policy = clamp_policy(model=MODEL, cap=cap, window=window)
    counter = TokenCounter.from_dir(tmp_path)
    return Admission(policy=policy, counter=counter, template=DeepSeekV4Prompt.from_dir(tmp_path))


def _chat(messages: list[dict[str, Any]], **fields: Any) -> bytes:
    return json.dumps({"model": MODEL, "messages": messages, **fields}).encode()


def test_admission_refuses_a_v4_prompt_over_the_cap_by_its_exact_count(tmp_path: Path) -> None:
    admission = _admission(tmp_path, cap=300, window=600)
    words = "the pipeline spark node "
    over = next(n for n in range(40, 400) if PROMPT.count({"messages": [_user(words * n)]}) > 300)
    just = [_user(words * (over - 1))]
    decision = admission.decide(Route.CHAT, _chat(just, max_tokens=10))
    assert isinstance(decision, Admitted)
    decision = admission.decide(Route.CHAT, _chat(just))  # the rest of the window: exact
    assert isinstance(decision, Admitted)
    assert decision.input_tokens_exact
    assert decision.input_tokens == PROMPT.count({"messages": just})
    assert decision.max_output_tokens == 600 - decision.input_tokens - 1
    refused = admission.decide(Route.CHAT, _chat([_user(words * over)]))
    assert isinstance(refused, ErrorReply)
    assert refused.status == 400
    assert f"input is {PROMPT.count({'messages': [_user(words * over)]})} tokens" in (
        refused.message
    )


def test_admission_settles_a_short_v4_prompt_by_its_bound(tmp_path: Path) -> None:
    decision = _admission(tmp_path).decide(Route.CHAT, _chat([_user("hi")], max_tokens=100))
    assert isinstance(decision, Admitted)
    assert not decision.input_tokens_exact
    assert decision.input_tokens >= PROMPT.count({"messages": [_user("hi")]})


def test_admission_answers_400_for_what_the_encoder_refuses(tmp_path: Path) -> None:
    decision = _admission(tmp_path).decide(Route.CHAT, _chat([_user("hi")], reasoning_effort="30"))
    assert isinstance(decision, ErrorReply)
    assert decision.status == 400
    assert decision.message == "DeepSeek-V4 reasoning_effort must be a named tier, got '30'"
    assert decision.param == "reasoning_effort"
    task = _admission(tmp_path).decide(Route.CHAT, _chat([_user("hi")], task="dance"))
    assert isinstance(task, ErrorReply)
    assert task.param == "task"
    bad = _admission(tmp_path).decide(
        Route.CHAT, _chat([_user("hi")], response_format={"type": "json_object"})
    )
    assert isinstance(bad, ErrorReply)
    assert bad.param == "messages"
    assert bad.message.startswith("The messages cannot be encoded for this model: ")


def test_object_arguments_count_as_compact_json_and_the_request_is_untouched() -> None:
    def conversation(arguments: object) -> dict[str, Any]:
        call = {"id": "c", "type": "function",
                "function": {"name": "get_weather", "arguments": arguments}}  # fmt: skip
        return {
            "messages": [
                _user("weather?"),
                {"role": "developer", "content": "Be brief."},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c", "content": "sunny"},
            ],
            "tools": [WEATHER],
        }

    payload = conversation({"city": "Paris", "unit": "°C"})
    before = json.dumps(payload)
    as_text = conversation('{"city":"Paris","unit":"°C"}')
    assert PROMPT.count(payload) == PROMPT.count(as_text) == _reference_count(payload)
    assert json.dumps(payload) == before  # the client's objects were not rewritten


def test_a_task_is_always_encoded_so_its_checks_run() -> None:
    payload = {"messages": [_user("hi")], "task": "domain"}
    size = PROMPT.measure(payload, exact_above=10**6, byte_level=True)
    assert size.exact
    assert size.tokens == _reference_count(payload)


def test_counts_from_worker_threads_agree() -> None:
    """Long bodies are decided on a worker thread (app.py): the encoder is shared."""
    payload = {"messages": [_user("the pipeline spark node " * 400)]}
    with ThreadPoolExecutor(4) as pool:
        counts = set(pool.map(lambda _: PROMPT.count(payload), range(8)))
    assert counts == {_reference_count(payload)}
