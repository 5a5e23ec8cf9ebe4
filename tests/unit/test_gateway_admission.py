"""The admission decision, as a pure function: cap, window, validation, model names."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sparkllm.gateway.admission import Admission, AdmissionPolicy, Admitted, Route
from sparkllm.gateway.chat_template import ChatTemplate
from sparkllm.gateway.config import MaxTokensPolicy
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.rules.allowlist import TOOL_FEATURES
from sparkllm.gateway.tokens import TokenCounter
from tests.unit.gateway_fixtures import (
    MODEL,
    TOKENIZER_CORPUS_WORD,
    train_tokenizer,
    write_model_dir,
)

CAP, WINDOW = 200, 300
TOKENIZER = train_tokenizer()


def _policy(**overrides: Any) -> AdmissionPolicy:
    values: dict[str, Any] = {
        "served_model_name": MODEL,
        "model_aliases": frozenset({"gpt-4o"}),
        "max_input_tokens": CAP,
        "context_length": WINDOW,
        "max_tokens_policy": MaxTokensPolicy.CLAMP,
        "default_max_tokens": None,
    }
    values.update(overrides)
    return AdmissionPolicy(**values)


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> tuple[TokenCounter, ChatTemplate]:
    model_dir = write_model_dir(tmp_path_factory.mktemp("model"), TOKENIZER)
    return TokenCounter.from_dir(model_dir), ChatTemplate.load(tokenizer_dir=model_dir)


def _admission(parts: tuple[TokenCounter, ChatTemplate], **overrides: Any) -> Admission:
    counter, template = parts
    return Admission(policy=_policy(**overrides), counter=counter, template=template)


def _chat(content: str = "hello", **fields: Any) -> bytes:
    return json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": content}], **fields}
    ).encode()


def _rendered_tokens(parts: tuple[TokenCounter, ChatTemplate], content: str) -> int:
    _counter, template = parts
    rendered = template.render(
        [{"role": "user", "content": content}], tools=None, template_kwargs={}
    )
    return len(TOKENIZER.encode(rendered, add_special_tokens=False).ids)


def _content_of_tokens(parts: tuple[TokenCounter, ChatTemplate], tokens: int) -> str:
    """A user message whose rendered prompt is exactly ``tokens`` tokens (or fails)."""
    words = 0
    while _rendered_tokens(parts, TOKENIZER_CORPUS_WORD * words) < tokens:
        words += 1
    content = TOKENIZER_CORPUS_WORD * words
    assert _rendered_tokens(parts, content) == tokens, "pick a word that is one token"
    return content


def _room(input_tokens: int) -> int:
    """Output tokens that fit: SGLang refuses input + max_tokens >= context_length."""
    return WINDOW - input_tokens - 1


def _admitted(decision: Admitted | ErrorReply) -> Admitted:
    assert isinstance(decision, Admitted), decision
    return decision


def _refused(decision: Admitted | ErrorReply) -> ErrorReply:
    assert isinstance(decision, ErrorReply), decision
    return decision


# --- the cap -------------------------------------------------------------------------


def test_input_at_the_cap_is_admitted_and_one_more_is_refused(parts: Any) -> None:
    admission = _admission(parts)
    at_cap = _admitted(admission.decide(Route.CHAT, _chat(_content_of_tokens(parts, CAP))))
    assert (at_cap.input_tokens, at_cap.input_tokens_exact) == (CAP, True)
    over = _refused(admission.decide(Route.CHAT, _chat(_content_of_tokens(parts, CAP + 1))))
    assert (over.status, over.code, over.param) == (400, "context_length_exceeded", "messages")
    assert f"{CAP + 1} tokens" in over.message
    assert f"limit of {CAP} tokens" in over.message


def test_counted_input_matches_the_tokenizer_exactly(parts: Any) -> None:
    content = "the quick brown fox 你好 🙂 " * 3
    admitted = _admitted(_admission(parts).decide(Route.CHAT, _chat(content)))
    assert admitted.input_tokens_exact
    assert admitted.input_tokens == _rendered_tokens(parts, content)


def test_small_prompts_with_room_skip_tokenisation(parts: Any) -> None:
    admitted = _admitted(_admission(parts).decide(Route.CHAT, _chat("hi", max_tokens=10)))
    assert admitted.input_tokens_exact is False
    assert admitted.input_tokens >= _rendered_tokens(parts, "hi")  # an upper bound


# --- fitting the output into the window ------------------------------------------------


def test_missing_max_tokens_gets_the_rest_of_the_window(parts: Any) -> None:
    admitted = _admitted(_admission(parts).decide(Route.CHAT, _chat("hello")))
    expected = _room(_rendered_tokens(parts, "hello"))
    assert admitted.max_output_tokens == expected
    assert json.loads(admitted.body)["max_tokens"] == expected


@pytest.mark.parametrize(("default", "expected_default"), [(50, 50), (299, None)])
def test_default_max_tokens_is_used_and_clamped(
    parts: Any, default: int, expected_default: int | None
) -> None:
    admitted = _admitted(_admission(parts, default_max_tokens=default).decide(Route.CHAT, _chat()))
    window_rest = _room(_rendered_tokens(parts, "hello"))
    expected = expected_default if expected_default is not None else window_rest
    assert json.loads(admitted.body)["max_tokens"] == expected


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_too_many_output_tokens_are_clamped(parts: Any, field: str) -> None:
    admitted = _admitted(_admission(parts).decide(Route.CHAT, _chat("hello", **{field: 5000})))
    rest = _room(_rendered_tokens(parts, "hello"))
    forwarded = json.loads(admitted.body)
    assert forwarded[field] == rest
    assert admitted.max_output_tokens == rest
    assert admitted.input_tokens + forwarded[field] == WINDOW - 1  # SGLang needs "<"


def test_both_output_fields_are_clamped_independently(parts: Any) -> None:
    body = _chat(max_tokens=20, max_completion_tokens=5000)
    forwarded = json.loads(_admitted(_admission(parts).decide(Route.CHAT, body)).body)
    assert forwarded["max_tokens"] == 20
    assert forwarded["max_completion_tokens"] == _room(_rendered_tokens(parts, "hello"))


def test_too_many_output_tokens_are_refused_under_reject(parts: Any) -> None:
    admission = _admission(parts, max_tokens_policy=MaxTokensPolicy.REJECT)
    reply = _refused(admission.decide(Route.CHAT, _chat(max_tokens=5000)))
    tokens = _rendered_tokens(parts, "hello")
    assert (reply.status, reply.code, reply.param) == (400, "context_length_exceeded", "max_tokens")
    assert "'max_tokens' is 5000" in reply.message
    assert f"input is {tokens} tokens" in reply.message
    assert f"at most {_room(tokens)} output tokens" in reply.message
    fits = _admitted(admission.decide(Route.CHAT, _chat(max_tokens=_room(tokens))))
    assert json.loads(fits.body)["max_tokens"] == _room(tokens)
    one_more = _refused(admission.decide(Route.CHAT, _chat(max_tokens=_room(tokens) + 1)))
    assert one_more.param == "max_tokens"


def test_body_is_forwarded_byte_for_byte_when_nothing_changes(parts: Any) -> None:
    body = b"".join(
        [
            b'{"model":  "' + MODEL.encode() + b'", "max_tokens": 10, "seed": 1,\n',
            b' "messages": [{"role": "user", "content": "hi"}], "logit_bias": {"12": 0.5}}',
        ]
    )
    assert _admitted(_admission(parts).decide(Route.CHAT, body)).body == body


def test_alias_is_rewritten_and_other_fields_kept(parts: Any) -> None:
    body = json.dumps(
        {
            "model": "gpt-4o",
            "max_tokens": 10,
            "temperature": 0.2,
            "messages": [{"role": "user", "content": "hi"}],
        }
    ).encode()
    forwarded = json.loads(_admitted(_admission(parts).decide(Route.CHAT, body)).body)
    assert forwarded["model"] == MODEL
    assert forwarded["temperature"] == 0.2


def test_unknown_model_is_404_model_not_found(parts: Any) -> None:
    reply = _refused(
        _admission(parts).decide(Route.CHAT, _chat().replace(MODEL.encode(), b"llama"))
    )
    assert (reply.status, reply.code, reply.param) == (404, "model_not_found", "model")
    assert "`llama`" in reply.message


# --- completions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "expected_tokens"),
    [
        ([1, 2, 3, 4], 4),
        ([[1, 2], [3, 4, 5, 6, 7]], 7),
        ("the quick brown fox", None),
        (["hi", "the quick brown fox jumps"], None),
    ],
)
def test_completion_prompts_are_counted(
    parts: Any, prompt: Any, expected_tokens: int | None
) -> None:
    """A batch (when the deployment takes one) is seen whole: all inputs, all outputs."""
    body = json.dumps({"model": MODEL, "prompt": prompt}).encode()
    admitted = _admitted(_admission(parts, max_prompts=2).decide(Route.COMPLETIONS, body))
    if expected_tokens is None:
        texts = [prompt] if isinstance(prompt, str) else prompt
        expected_tokens = sum(len(TOKENIZER.encode(text).ids) for text in texts)
    batch = isinstance(prompt, list) and isinstance(prompt[0], str | list)
    prompts = len(prompt) if batch else 1
    assert (admitted.input_tokens, admitted.input_tokens_exact) == (expected_tokens, True)
    assert json.loads(admitted.body)["max_tokens"] == _room(expected_tokens) // prompts


def test_completion_token_ids_over_the_cap_are_refused(parts: Any) -> None:
    body = json.dumps({"model": MODEL, "prompt": [[1], list(range(CAP + 5))]}).encode()
    reply = _refused(_admission(parts, max_prompts=2).decide(Route.COMPLETIONS, body))
    assert (reply.code, reply.param) == ("context_length_exceeded", "prompt")
    assert f"{CAP + 5} tokens" in reply.message


# --- malformed requests: 400 naming the problem ------------------------------------------

_MESSAGES = [{"role": "user", "content": "hi"}]
_TOOL = {"type": "function", "function": {"name": "f"}}


def _with(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": _MESSAGES, **fields}


def _one(**message: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [message]}


def _prompt(prompt: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompt": prompt}


_BAD_ARGUMENTS = [{"function": {"name": "f", "arguments": "{"}}]
# (body, param, code, a fragment of the message)
_BAD_CHAT = [
    (b"{not json", None, "invalid_json", "could not parse the JSON body"),
    (b"", None, "invalid_json", "could not parse"),
    (b"\xff\xfe\x00", None, "invalid_json", "could not parse"),
    (b'{"model": NaN}', None, "invalid_json", "NaN is not valid JSON"),
    (b"[" * 100000, None, "invalid_json", "could not parse"),
    (b"[1, 2]", "body", "invalid_type", "must be a JSON object, got array"),
    ({"messages": _MESSAGES}, "model", "missing_required_parameter", "'model'"),
    (_with(model=7), "model", "invalid_type", "got number"),
    ({"model": MODEL}, "messages", "missing_required_parameter", "'messages'"),
    (_with(messages="hi"), "messages", "invalid_type", "an array"),
    (_with(messages=[]), "messages", "invalid_value", "at least one"),
    (_with(messages=["hi"]), "messages[0]", "invalid_type", "object"),
    (_one(content="x"), "messages[0].role", "missing_required_parameter", "role"),
    (_one(role=1), "messages[0].role", "invalid_type", "string"),
    (_one(role="user", content=5), "messages[0].content", "invalid_type", "got number"),
    (
        _one(role="user", content=[{"type": "image_url"}]),
        "messages[0].content[0].type",
        "invalid_value",
        "Only text content parts",
    ),
    (
        _one(role="user", content=[{"type": "text"}]),
        "messages[0].content[0].text",
        "invalid_type",
        "string",
    ),
    (_one(role="pirate", content="arr"), "messages", "invalid_value", "Unsupported role: pirate"),
    (_one(role="user", content="a\ud800"), "messages", "invalid_value", "unpaired surrogate"),
    (_one(role="assistant", tool_calls=_BAD_ARGUMENTS), "messages", "invalid_value", "valid JSON"),
    (_with(max_tokens="10"), "max_tokens", "invalid_type", "an integer, got string"),
    (_with(max_tokens=1.5), "max_tokens", "invalid_type", "an integer"),
    (_with(max_tokens=True), "max_tokens", "invalid_type", "got boolean"),
    (_with(max_tokens=0), "max_tokens", "invalid_value", "at least 1"),
    (_with(max_completion_tokens=-3), "max_completion_tokens", "invalid_value", "at least 1"),
    (_with(stream="yes"), "stream", "invalid_type", "a boolean"),
    (_with(tools={}), "tools", "invalid_type", "an array"),
    (_with(tools=[{"function": {}}]), "tools[0].function.name", "invalid_type", "a string"),
    (_with(tools=[_TOOL], tool_choice=["x"]), "tool_choice", "invalid_value", "must be 'none'"),
    (
        _with(chat_template_kwargs={"messages": []}),
        "chat_template_kwargs",
        "invalid_value",
        'may not set "messages"',
    ),
    (  # issue 25: a request may not choose the template the engine renders
        _with(chat_template_kwargs={"chat_template": "{{ 'x' }}"}),
        "chat_template_kwargs",
        "invalid_value",
        'may not set "chat_template"',
    ),
    (_with(chat_template_kwargs=[]), "chat_template_kwargs", "invalid_type", "an object"),
    (_with(reasoning_effort=3), "reasoning_effort", "invalid_type", "a string"),
]
_BAD_COMPLETION = [
    ({"model": MODEL}, "prompt", "missing_required_parameter", "'prompt'"),
    (_prompt([]), "prompt", "invalid_type", "non-empty array"),
    (_prompt(42), "prompt", "invalid_type", "'prompt' must be"),
    (_prompt(["ok", 3]), "prompt[1]", "invalid_type", "got number"),
    (_prompt([[1, -2]]), "prompt[0]", "invalid_type", "token ids"),
    (_prompt("a\udc00"), "prompt", "invalid_value", "unpaired surrogate"),
]


def _check_refusal(reply: ErrorReply, *, param: str | None, code: str, fragment: str) -> None:
    assert (reply.status, reply.param, reply.code) == (400, param, code)
    assert fragment in reply.message
    error = json.loads(reply.body())["error"]
    expected = {"message": reply.message, "type": "invalid_request_error", "param": param}
    assert error == {**expected, "code": code}


def _raw(body: Any) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


@pytest.mark.parametrize(("body", "param", "code", "fragment"), _BAD_CHAT)
def test_malformed_chat_requests_name_the_problem(
    parts: Any, body: Any, param: str | None, code: str, fragment: str
) -> None:
    reply = _refused(_admission(parts).decide(Route.CHAT, _raw(body)))
    _check_refusal(reply, param=param, code=code, fragment=fragment)


@pytest.mark.parametrize(("body", "param", "code", "fragment"), _BAD_COMPLETION)
def test_malformed_completion_requests_name_the_problem(
    parts: Any, body: Any, param: str | None, code: str, fragment: str
) -> None:
    reply = _refused(_admission(parts).decide(Route.COMPLETIONS, _raw(body)))
    _check_refusal(reply, param=param, code=code, fragment=fragment)


def test_tool_choice_none_hides_the_tools_from_the_template(parts: Any) -> None:
    tools = [
        {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
    ]
    admission = _admission(parts, tool_features=TOOL_FEATURES)
    with_tools = _admitted(admission.decide(Route.CHAT, _chat(tools=tools)))
    hidden = _admitted(admission.decide(Route.CHAT, _chat(tools=tools, tool_choice="none")))
    named = {"type": "function", "function": {"name": "other"}}
    filtered_out = _admitted(admission.decide(Route.CHAT, _chat(tools=tools, tool_choice=named)))
    plain = _admitted(admission.decide(Route.CHAT, _chat()))
    assert with_tools.input_tokens > plain.input_tokens
    assert hidden.input_tokens == plain.input_tokens == filtered_out.input_tokens


def test_unused_path_keeps_lone_surrogates_escaped(parts: Any) -> None:
    body = json.dumps({"model": "gpt-4o", "user": "\ud800", "messages": _MESSAGES}).encode()
    forwarded = _admitted(_admission(parts).decide(Route.CHAT, body)).body
    assert b"\\ud800" in forwarded
    assert json.loads(forwarded)["user"] == "\ud800"


def test_filler_word_is_one_token() -> None:
    # Guard for _content_of_tokens: the filler word must be a single token.
    assert len(TOKENIZER.encode(TOKENIZER_CORPUS_WORD).ids) == 1


def test_reasoning_parts_are_accepted_and_left_out_of_the_prompt(parts: Any) -> None:
    content = [
        {"type": "text", "text": "hello"},
        {"type": "reasoning", "text": "long hidden reasoning " * 50},
        {"type": "thinking", "thinking": None},
    ]
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": content}]})
    admitted = _admitted(_admission(parts).decide(Route.CHAT, body.encode()))
    assert admitted.input_tokens == _rendered_tokens(parts, "hello")


def test_an_input_filling_the_window_leaves_no_room_and_is_refused(parts: Any) -> None:
    admission = _admission(parts, max_input_tokens=WINDOW - 1)
    content = _content_of_tokens(parts, WINDOW - 1)
    reply = _refused(admission.decide(Route.CHAT, _chat(content)))
    assert (reply.code, reply.param) == ("context_length_exceeded", "messages")
    assert "leaves no room for an answer" in reply.message
    fits = _admitted(admission.decide(Route.CHAT, _chat(_content_of_tokens(parts, WINDOW - 2))))
    assert fits.max_output_tokens == 1
