"""The gateway's count equals what SGLang 0.5.23 itself computes from the same raw body.

The reference is SGLang's own code from the pinned wheel (tests/unit/sglang_reference.py):
its ``ChatCompletionRequest`` model and validators parse the raw JSON, its chat serving
layer validates the request and prepares the messages (tools as its models dump them,
thinking and effort resolved by its validator, continuation, tool-call arguments),
transformers' own ``render_jinja_template`` renders the template, and the ids are
counted. For DeepSeek V4 its recipe adapter maps the request and its
renderer encodes it. No part of the gateway's request mapping is used to build the
reference. Bodies are generated over the fields SGLang's request model reads for the
prompt; each must be counted equal, or refused by both (the gateway may also refuse
what it does not let through at all, which is counted apart).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import types
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkllm.gateway.admission import Admission, Admitted, Route
from sparkllm.gateway.chat_template import ChatTemplate
from sparkllm.gateway.deepseek_prompt import DeepSeekV4Prompt
from sparkllm.gateway.rules.allowlist import TOOL_FEATURES
from sparkllm.gateway.tokens import TokenCounter
from sparkllm_dev.devcluster.toymodel import train_tokenizer as train_v4_tokenizer
from tests.unit import sglang_reference, transformers_reference
from tests.unit.gateway_fixtures import MODEL, clamp_policy, train_tokenizer, write_model_dir

PROTOCOL, SERVING_CHAT, SERVING_RECIPE = sglang_reference.load()
TOKENIZER = train_tokenizer()
V4_TOKENIZER = train_v4_tokenizer()
OUTCOMES: Counter[str] = Counter()

# A template that renders everything SGLang hands it: each message and tool with tojson,
# and the thinking switches.
DUMPING_TEMPLATE = """{{- bos_token }}
{%- if tools %}{% for tool in tools %}<tool>{{ tool | tojson }}{% endfor %}{% endif %}
{%- for message in messages %}<|im_start|>{{ message | tojson }}<|im_end|>{% endfor %}
{%- if thinking is defined %}<think={{ thinking }}>{% endif %}
{%- if enable_thinking is defined %}<enable={{ enable_thinking }}>{% endif %}
{%- if reasoning_effort is defined %}<effort={{ reasoning_effort }}>{% endif %}
{%- if add_generation_prompt %}<|im_start|>assistant{% endif %}"""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("model"), TOKENIZER, template=DUMPING_TEMPLATE)


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    print(f"\ndifferential outcomes: {dict(sorted(OUTCOMES.items()))}")


def _policy(defaults: dict[str, Any] | None = None) -> Any:
    """Large limits and every tool-calling feature: each body's count is compared."""
    policy = clamp_policy(cap=1_000_000, window=2_000_000)
    return dataclasses.replace(
        policy, tool_features=TOOL_FEATURES, template_defaults=defaults or {}
    )


def _jinja(model_dir: Path, defaults: dict[str, Any] | None = None) -> tuple[Admission, Any]:
    """The gateway and SGLang for a Jinja template; ``defaults``: the engine's
    ``--default-chat-template-kwargs``, which the operator mirrors into the gateway."""
    template = ChatTemplate.load(tokenizer_dir=model_dir)
    counter = TokenCounter.from_dir(model_dir)
    admission = Admission(policy=_policy(defaults), counter=counter, template=template)
    stand_in = transformers_reference.TokenizerStandIn(TOKENIZER, model_dir)
    chat = sglang_reference.serving(
        SERVING_CHAT, tokenizer=stand_in, content_format=template.content_format.value
    )
    chat.default_chat_template_kwargs = defaults or {}  # as its constructor reads it
    return admission, chat


def _v4(model_dir: Path, defaults: dict[str, Any] | None = None) -> tuple[Admission, Any]:
    counter = TokenCounter.from_dir(model_dir)
    prompt = DeepSeekV4Prompt(V4_TOKENIZER.to_str())
    admission = Admission(policy=_policy(defaults), counter=counter, template=prompt)
    renderer = types.ModuleType("renderer")
    path = sglang_reference.sglang_file("srt/parser/deepseek_recipe_renderer.py")
    exec(compile(path.read_text(), str(path), "exec"), renderer.__dict__)
    adapter = object.__new__(SERVING_RECIPE.DeepSeekRecipeChatEncodingAdapter)
    adapter._spec = "dsv4"
    adapter.deepseek_recipe = renderer.DeepSeekRecipe("dsv4", V4_TOKENIZER)
    adapter._default_effort = None
    stand_in = transformers_reference.TokenizerStandIn(V4_TOKENIZER, None)
    chat = sglang_reference.serving(SERVING_CHAT, tokenizer=stand_in, content_format="string")
    chat.chat_encoding_spec = "dsv4"
    chat._encoding_adapter = adapter
    chat.default_chat_template_kwargs = defaults or {}
    return admission, chat


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
_NAME = st.sampled_from(["weather", "clock"])
_ARGUMENTS = st.sampled_from(['{"city": "Paris"}', "{}", "[1]", "nope"]) | st.just({"x": 1})
_CALL = st.fixed_dictionaries(
    {"function": st.fixed_dictionaries({"name": _NAME}, optional={"arguments": _ARGUMENTS})},
    optional={"id": st.just("call_1"), "type": st.just("function"), "extra": st.just(1)},
)
_TOOL = st.fixed_dictionaries(
    {
        "function": st.fixed_dictionaries(
            {"name": _NAME},
            optional={
                "description": _TEXT | st.none(),
                "parameters": st.just({"type": "object"}) | st.none(),
                "strict": st.booleans() | st.none(),
                "defer_loading": st.booleans(),
                "extra": st.just("x"),
            },
        )
    },
    optional={"type": st.just("function"), "defer_loading": st.booleans()},
)
_PART = st.fixed_dictionaries({"type": st.just("text"), "text": _TEXT})
_CONTENT = _TEXT | st.none() | st.lists(_PART, max_size=2)
_MESSAGE = st.one_of(
    st.fixed_dictionaries(
        {"role": st.just("user"), "content": _TEXT | st.lists(_PART, min_size=1, max_size=2)},
        optional={"name": _TEXT},
    ),
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "developer", "System"]), "content": _CONTENT},
        optional={"name": _TEXT},
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": _CONTENT},
        optional={
            "reasoning_content": st.text(max_size=200),
            "tool_calls": st.lists(_CALL, max_size=2),
            "mood": _TEXT,
        },
    ),
    st.fixed_dictionaries(
        {"role": st.just("tool"), "content": _CONTENT},
        optional={"tool_call_id": st.just("call_1")},
    ),
)
_EFFORT = st.sampled_from(["none", "low", "high", "max", "0.5"]) | st.just(0.2)
_BODIES = st.fixed_dictionaries(
    {"model": st.just(MODEL), "messages": st.lists(_MESSAGE, min_size=1, max_size=4)},
    optional={
        "tools": st.lists(_TOOL, max_size=3),
        "tool_choice": st.sampled_from(["auto", "none", "required"])
        | st.just({"type": "function", "function": {"name": "clock"}}),
        "reasoning_effort": _EFFORT,
        "reasoning": st.fixed_dictionaries(
            {}, optional={"effort": _EFFORT, "enabled": st.booleans() | st.just("yes")}
        ),
        "chat_template_kwargs": st.fixed_dictionaries(
            {},
            optional={
                "thinking": st.booleans(),
                "enable_thinking": st.booleans(),
                "reasoning_effort": st.sampled_from(["low", "max"]),
            },
        ),
        "continue_final_message": st.booleans(),
        "response_format": st.just({"type": "json_object"}),
        "temperature": st.floats(0, 2),
        "stop": st.just(["\n"]),
    },
).map(lambda body: json.dumps(body).encode())


def _compare(admission: Admission, chat: Any, body: bytes) -> str:
    refusal = ""
    try:
        expected: int | None = sglang_reference.count(PROTOCOL, chat, body)
    except ValueError as exc:
        expected, refusal = None, str(exc)
    decision = admission.decide(Route.CHAT, body)
    if isinstance(decision, Admitted):
        assert decision.input_tokens_exact
        if expected is None and _UNKNOWN_TOOL.fullmatch(refusal):
            return "forwarded, the engine refuses the tool choice"  # no prompt to count
        assert expected is not None, f"the gateway forwards what SGLang refuses: {refusal}"
        assert decision.input_tokens == expected
        return "equal"
    if expected is None:
        return "both refused"
    # Stricter than SGLang by rule: a numeric reasoning_effort must be written as a string.
    assert decision.code == "unsupported_parameter" or decision.param in _STRICTER, decision
    return "refused by the gateway only"


# SGLang's checks of tool_choice against the tools: the engine answers 400 at once.
_UNKNOWN_TOOL = re.compile(
    r"Tool '.*' not found in tools list\.|Tools cannot be empty if tool choice is set to "
    r"(a specific tool|required)\.",
    re.DOTALL,
)
_STRICTER = frozenset({"reasoning_effort"})
# 300 in every profile: a differential against SGLang's own request handling over body
# shapes, whose refusal paths are rare.
_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# The same bodies once more under server defaults: fewer, the paths they add are few.
_DEFAULTS_SETTINGS = settings(_SETTINGS, max_examples=150)


@_SETTINGS
@given(body=_BODIES)
def test_jinja_counts_equal_sglangs(model_dir: Path, body: bytes) -> None:
    admission, chat = _jinja(model_dir)
    OUTCOMES["jinja " + _compare(admission, chat, body)] += 1


@_SETTINGS
@given(body=_BODIES)
def test_v4_counts_equal_sglangs(model_dir: Path, body: bytes) -> None:
    admission, chat = _v4(model_dir)
    OUTCOMES["v4 " + _compare(admission, chat, body)] += 1


# The engine's --default-chat-template-kwargs: the thinking switches and an effort.
_DEFAULTS = st.fixed_dictionaries(
    {},
    optional={
        "thinking": st.booleans(),
        "enable_thinking": st.booleans(),
        "reasoning_effort": st.sampled_from(["none", "low", "high"]),
        "custom": st.just("x"),
    },
)


@pytest.mark.parametrize("kind", ["jinja", "v4"])
@_DEFAULTS_SETTINGS
@given(body=_BODIES, defaults=_DEFAULTS)
def test_counts_with_server_defaults_equal_sglangs(
    model_dir: Path, kind: str, body: bytes, defaults: dict[str, Any]
) -> None:
    """Under the engine's --default-chat-template-kwargs, mirrored into the gateway."""
    admission, chat = (_v4 if kind == "v4" else _jinja)(model_dir, defaults)
    OUTCOMES[f"{kind}+defaults " + _compare(admission, chat, body)] += 1


_LOOP = [
    {"role": "user", "content": "weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "reasoning_content": "the pipeline spark node " * 400,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
        ],
    },
]
_SMALL_TOOLS = [{"type": "function", "function": {"name": f"t{i}"}} for i in range(80)]


@pytest.mark.parametrize(
    ("kind", "fields"),
    [
        ("v4", {"messages": _LOOP, "reasoning_effort": "high"}),
        ("v4", {"messages": _LOOP, "reasoning": {"effort": "max"}}),
        ("v4", {"messages": _LOOP, "reasoning": {"enabled": True}}),
        ("jinja", {"messages": _LOOP, "reasoning_effort": "low"}),
        ("jinja", {"messages": _LOOP[:1], "tools": _SMALL_TOOLS}),
    ],
)
def test_the_issues_shapes_count_as_sglang_counts(
    model_dir: Path, kind: str, fields: dict[str, Any]
) -> None:
    """Issue 14's cases: thinking from an effort or a reasoning object; dumped tools."""
    admission, chat = (_v4 if kind == "v4" else _jinja)(model_dir)
    body = json.dumps({"model": MODEL, **fields}).encode()
    assert _compare(admission, chat, body) == "equal"
    if kind == "v4":  # thinking keeps the pending turn's reasoning: far more tokens
        thinking = admission.decide(Route.CHAT, body)
        plain = admission.decide(
            Route.CHAT, json.dumps({"model": MODEL, "messages": _LOOP}).encode()
        )
        assert isinstance(thinking, Admitted)
        assert isinstance(plain, Admitted)
        assert thinking.input_tokens > plain.input_tokens + 300


def test_a_lone_continued_assistant_message_is_refused_by_both(model_dir: Path) -> None:
    """Continued, it leaves no message: transformers refuses an empty conversation."""
    admission, chat = _jinja(model_dir)
    for content in (None, "partial"):
        messages = [{"role": "assistant", "content": content}]
        body = {"model": MODEL, "messages": messages, "continue_final_message": True}
        assert _compare(admission, chat, json.dumps(body).encode()) == "both refused"


def test_a_server_default_thinking_is_counted_as_sglang_counts(model_dir: Path) -> None:
    """Issue 25: with ``--default-chat-template-kwargs '{"thinking": true}'`` on the engine,
    a V4 tool loop whose request says nothing about thinking keeps the pending turn's
    reasoning. Mirrored, the gateway counts what SGLang's own code renders; without the
    mirror it counted the prompt without it (the issue's 3,972 against 10,383)."""
    body = json.dumps({"model": MODEL, "messages": _LOOP}).encode()
    mirrored, chat = _v4(model_dir, {"thinking": True})
    assert _compare(mirrored, chat, body) == "equal"
    unmirrored, _ = _v4(model_dir)
    with_default = mirrored.decide(Route.CHAT, body)
    without = unmirrored.decide(Route.CHAT, body)
    assert isinstance(with_default, Admitted)
    assert isinstance(without, Admitted)
    expected = sglang_reference.count(PROTOCOL, chat, body)
    print(
        f"\nV4 tool loop, server default thinking: SGLang {expected}, gateway (mirrored) "
        f"{with_default.input_tokens}, gateway without the mirror {without.input_tokens}"
    )
    assert with_default.input_tokens == expected
    assert with_default.input_tokens > without.input_tokens + 300
    # a request's own switch still wins over the server default (SGLang: setdefault)
    off = json.dumps(
        {"model": MODEL, "messages": _LOOP, "chat_template_kwargs": {"thinking": False}}
    ).encode()
    assert _compare(mirrored, chat, off) == "equal"
    assert isinstance(decided := mirrored.decide(Route.CHAT, off), Admitted)
    assert decided.input_tokens == without.input_tokens


# --- /v1/messages and /v1/responses: the chat SGLang makes of them, counted -----------
# SGLang converts the body (anthropic/serving.py, openai/serving_responses.py, the
# wheel's own code: sglang_reference.converters()) and renders that chat; the gateway
# must count the same prompt, or refuse what it does not convert (unsupported_parameter).
ANTHROPIC, ANTHROPIC_SERVING, RESPONSES = sglang_reference.converters()
_TEXT_BLOCK = st.fixed_dictionaries({"type": st.just("text"), "text": _TEXT})
_BLOCK = st.one_of(
    _TEXT_BLOCK,
    st.fixed_dictionaries(
        {"type": st.just("tool_use"), "id": st.just("call_1"), "name": _NAME},
        optional={"input": st.just({"city": "Paris"}) | st.just({})},
    ),
    st.fixed_dictionaries(
        {"type": st.just("tool_result"), "tool_use_id": st.just("call_1")},
        optional={"content": _TEXT | st.lists(_TEXT_BLOCK, max_size=3)},
    ),
)
_ANTHROPIC_BODIES = st.fixed_dictionaries(
    {
        "model": st.just(MODEL),
        "max_tokens": st.just(16),
        "messages": st.lists(
            st.fixed_dictionaries(
                {
                    "role": st.sampled_from(["user", "assistant"]),
                    "content": _TEXT | st.lists(_BLOCK, max_size=3),
                }
            ),
            min_size=1,
            max_size=4,
        ),
    },
    optional={
        "system": _TEXT | st.lists(_TEXT_BLOCK, max_size=2),
        "tools": st.lists(
            st.fixed_dictionaries(
                {"name": _NAME, "input_schema": st.just({"type": "object"})},
                optional={"description": _TEXT, "strict": st.booleans()},
            ),
            max_size=2,
        ),
        "tool_choice": st.sampled_from(
            [{"type": "auto"}, {"type": "any"}, {"type": "none"}, {"type": "tool", "name": "clock"}]
        ),
        "metadata": st.just({"user_id": "u-1"}),
    },
).map(lambda body: json.dumps(body).encode())
_RESPONSES_PART = st.fixed_dictionaries(
    {"type": st.sampled_from(["input_text", "output_text", "text"]), "text": _TEXT}
)
_RESPONSES_BODIES = st.fixed_dictionaries(
    {
        "model": st.just(MODEL),
        "input": _TEXT
        | st.lists(
            st.fixed_dictionaries(
                {
                    "role": st.sampled_from(["user", "assistant"]),
                    "content": _TEXT | st.lists(_RESPONSES_PART, max_size=2),
                },
                optional={"type": st.just("message")},
            ),
            min_size=1,
            max_size=4,
        ),
    },
    optional={"instructions": _TEXT, "store": st.booleans(), "user": _TEXT},
).map(lambda body: json.dumps(body).encode())


def _anthropic_count(chat: Any, body: bytes) -> int:
    """SGLang's prompt length for a Messages body; ValueError if it refuses it."""
    from pydantic import ValidationError

    try:
        request = ANTHROPIC.AnthropicMessagesRequest.model_validate(json.loads(body))
    except ValidationError as exc:
        raise ValueError(f"request model: {exc}") from exc
    serving = object.__new__(ANTHROPIC_SERVING.AnthropicServing)
    serving.openai_serving_chat = chat
    serving._merge_inline_system = True  # (no system message inside 'messages' here)
    try:
        converted = serving._convert_to_chat_completion_request(request)
    except Exception as exc:  # handle_messages answers any conversion error with a 400
        raise ValueError(f"conversion: {exc}") from exc
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # SGLang reads max_tokens
        problem = chat._validate_request(converted)
        if problem is not None:
            raise ValueError(problem)
        return len(chat._process_messages(converted, is_multimodal=False).prompt_ids)


def _responses_count(chat: Any, body: bytes) -> int:
    """SGLang's prompt length for a Responses body (``_make_request``, its own code)."""

    class Responses(RESPONSES.OpenAIServingResponses):  # type: ignore[misc,name-defined]
        def _template_turn_grammar(self) -> bool:
            return False

        def _requires_response_template_detokenization(self, request: Any) -> bool:
            return False

    serving = object.__new__(Responses)
    serving.__dict__.update(chat.__dict__)
    serving.supports_inline_system = False  # instructions merged into one system message
    request = PROTOCOL.ResponsesRequest.model_validate(json.loads(body))
    tokenizer = chat.tokenizer_manager.tokenizer
    made = asyncio.run(serving._make_request(request, None, tokenizer))
    return len(made[3].prompt_ids)


def _compare_converted(
    admission: Admission, route: Route, expected: int | None, body: bytes
) -> str:
    decision = admission.decide(route, body, exact=True)
    if isinstance(decision, Admitted):
        assert expected is not None, "the gateway forwards what SGLang refuses"
        assert decision.input_tokens == expected
        return "equal"
    if expected is None:
        return "both refused"
    assert decision.code == "unsupported_parameter", decision
    return "refused by the gateway only"


# Fewer: the converted bodies reach the chat paths the tests above cover 300 times each.
_CONVERTED_SETTINGS = settings(_SETTINGS, max_examples=150)


@pytest.mark.parametrize("kind", ["jinja", "v4"])
@_CONVERTED_SETTINGS
@given(body=_ANTHROPIC_BODIES)
def test_messages_counts_equal_sglangs(model_dir: Path, kind: str, body: bytes) -> None:
    admission, chat = (_jinja if kind == "jinja" else _v4)(model_dir)
    try:
        expected: int | None = _anthropic_count(chat, body)
    except ValueError:
        expected = None
    for route in (Route.MESSAGES, Route.COUNT_TOKENS):
        counted = body if route is Route.MESSAGES else _without(body, "max_tokens", "metadata")
        OUTCOMES[
            f"{kind} {route.value} " + _compare_converted(admission, route, expected, counted)
        ] += 1


@pytest.mark.parametrize("kind", ["jinja", "v4"])
@settings(_SETTINGS, max_examples=100)
@given(body=_RESPONSES_BODIES)
def test_responses_counts_equal_sglangs(model_dir: Path, kind: str, body: bytes) -> None:
    admission, chat = (_jinja if kind == "jinja" else _v4)(model_dir)
    expected = _responses_count(chat, body)
    OUTCOMES[
        f"{kind} /v1/responses " + _compare_converted(admission, Route.RESPONSES, expected, body)
    ] += 1


def _without(body: bytes, *fields: str) -> bytes:
    return json.dumps({k: v for k, v in json.loads(body).items() if k not in fields}).encode()
