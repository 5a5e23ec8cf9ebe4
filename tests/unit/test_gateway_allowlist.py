"""Only known fields pass the front door; work per request and tool calling are bounded.

Issue 14: ``input_ids`` and SGLang's internal fields were forwarded, one request could
ask for many prompts or answers, and strict/required tool calling passed although the
documents do not support it in production. Each is now a 400 that names the field.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkllm.errors import GatewayError
from sparkllm.gateway.admission import Admission, Admitted, Route
from sparkllm.gateway.chat_template import ChatTemplate
from sparkllm.gateway.config import load_gateway_config
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.rules.allowlist import (
    COUNTED_EXTENSIONS,
    OPTIONAL_EXTENSIONS,
    STANDARD,
    TOOL_FEATURES,
)
from sparkllm.gateway.tokens import TokenCounter
from tests.unit.gateway_fixtures import MODEL, clamp_policy, train_tokenizer, write_model_dir

TOKENIZER = train_tokenizer()
# SGLang 0.5.23's request fields that steer the engine past the admission layer.
INTERNAL = [
    *("input_ids", "rid", "session_params", "session_id", "lora_path"),
    *("custom_logit_processor", "custom_params", "return_hidden_states", "priority"),
    *("bootstrap_host", "bootstrap_port", "bootstrap_room", "routed_dp_rank"),
    *("data_parallel_rank", "disagg_prefill_dp_rank", "return_routed_experts"),
    *("extra_key", "cache_salt", "watermark", "images_config", "mm_processor_kwargs"),
    *("return_prompt_token_ids", "return_meta_info", "custom_labels", "x_custom"),
]
WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("model"), TOKENIZER)


def _admission(model_dir: Path, **overrides: Any) -> Admission:
    counter = TokenCounter.from_dir(model_dir)
    template = ChatTemplate.load(tokenizer_dir=model_dir)
    policy = dataclasses.replace(clamp_policy(cap=200, window=300), **overrides)
    return Admission(policy=policy, counter=counter, template=template)


def _chat(**fields: Any) -> bytes:
    return json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], **fields}
    ).encode()


def _refusal(decision: Admitted | ErrorReply, *, param: str) -> ErrorReply:
    assert isinstance(decision, ErrorReply), decision
    assert (decision.status, decision.code, decision.param) == (400, "unsupported_parameter", param)
    assert f"'{param}'" in decision.message or param.split(".", maxsplit=1)[0] in decision.message
    return decision


@pytest.mark.parametrize("field", INTERNAL)
def test_input_ids_and_sglangs_internal_fields_are_refused_by_name(parts: Any, field: str) -> None:
    completion = json.dumps({"model": MODEL, "prompt": "hi", field: [1]}).encode()
    for route, body in ((Route.CHAT, _chat(**{field: [1]})), (Route.COMPLETIONS, completion)):
        reply = _refusal(_admission(parts).decide(route, body), param=field)
        assert "not supported by this deployment" in reply.message


def test_a_chat_with_12000_input_ids_is_refused_before_counting(parts: Any) -> None:
    body = _chat(input_ids=list(range(12_000)), max_tokens=1)
    _refusal(_admission(parts).decide(Route.CHAT, body), param="input_ids")


def test_standard_fields_and_counted_extensions_pass(parts: Any) -> None:
    fields = {
        "temperature": 0.2, "top_p": 0.9, "seed": 1, "stop": ["\n"], "user": "u",
        "frequency_penalty": 0.1, "presence_penalty": 0.1, "logprobs": True,
        "top_logprobs": 2, "logit_bias": {"1": 0.5}, "stream": False,
        "parallel_tool_calls": False, "response_format": {"type": "json_object"},
        "reasoning_effort": "low", "chat_template_kwargs": {"enable_thinking": False},
        "continue_final_message": False, "n": 1, "max_completion_tokens": 5,
    }  # fmt: skip
    assert isinstance(_admission(parts).decide(Route.CHAT, _chat(**fields)), Admitted)
    assert set(fields) <= STANDARD[Route.CHAT.value] | COUNTED_EXTENSIONS[Route.CHAT.value]


@pytest.mark.parametrize("field", sorted(OPTIONAL_EXTENSIONS))
def test_an_extension_passes_only_where_the_spec_enables_it(parts: Any, field: str) -> None:
    body = _chat(**{field: 1})
    refused = _refusal(_admission(parts).decide(Route.CHAT, body, user="alice"), param=field)
    assert "not enabled for your key" in refused.message
    for_all = _admission(parts, extensions={field: frozenset()})
    assert not _is_unsupported(for_all.decide(Route.CHAT, body, user="alice"))
    for_bench = _admission(parts, extensions={field: frozenset({"bench"})})
    assert not _is_unsupported(for_bench.decide(Route.CHAT, body, user="bench"))
    _refusal(for_bench.decide(Route.CHAT, body, user="alice"), param=field)


def _is_unsupported(decision: Admitted | ErrorReply) -> bool:
    return isinstance(decision, ErrorReply) and decision.code == "unsupported_parameter"


def test_ignore_eos_for_the_benchmark_user_is_counted_like_any_request(parts: Any) -> None:
    admission = _admission(parts, extensions={"ignore_eos": frozenset({"bench"})})
    plain = admission.decide(Route.CHAT, _chat(max_tokens=8), user="bench")
    eos = admission.decide(Route.CHAT, _chat(max_tokens=8, ignore_eos=True), user="bench")
    assert isinstance(plain, Admitted)
    assert isinstance(eos, Admitted)
    assert eos.input_tokens == plain.input_tokens


@pytest.mark.parametrize("field", ["best_of", "suffix", "messages", "response_format"])
def test_completions_refuse_what_they_do_not_support(parts: Any, field: str) -> None:
    body = json.dumps({"model": MODEL, "prompt": "hi", field: 2}).encode()
    _refusal(_admission(parts).decide(Route.COMPLETIONS, body), param=field)


# --- work multiplication -------------------------------------------------------------------


def test_n_and_batches_are_one_by_default(parts: Any) -> None:
    admission = _admission(parts)
    n = admission.decide(Route.CHAT, _chat(n=2))
    assert isinstance(n, ErrorReply)
    assert (n.code, n.param) == ("invalid_value", "n")
    assert "at most 1 answer(s)" in n.message
    batch = json.dumps({"model": MODEL, "prompt": ["a", "b"]}).encode()
    refused = admission.decide(Route.COMPLETIONS, batch)
    assert isinstance(refused, ErrorReply)
    assert (refused.code, refused.param) == ("invalid_value", "prompt")
    assert "at most 1 prompt(s)" in refused.message


def test_when_allowed_the_limits_see_prompts_times_n(parts: Any) -> None:
    one = _admission(parts).decide(Route.COMPLETIONS, _completion([list(range(40))]))
    assert isinstance(one, Admitted)
    admission = _admission(parts, max_choices=3, max_prompts=4)
    both = admission.decide(Route.COMPLETIONS, _completion([list(range(40))] * 2, n=2))
    assert isinstance(both, Admitted)
    assert both.input_tokens == 4 * 40
    assert both.max_output_tokens == (300 - 1 - 160) // 4  # every sequence's output fits
    over = admission.decide(Route.COMPLETIONS, _completion([list(range(40))] * 4, n=2))
    assert isinstance(over, ErrorReply)
    assert over.code == "context_length_exceeded"
    assert "input is 320 tokens (4 prompt(s), n = 2; the largest prompt is 40" in over.message


def _completion(prompt: Any, **fields: Any) -> bytes:
    return json.dumps({"model": MODEL, "prompt": prompt, **fields}).encode()


# --- tool-calling policy -------------------------------------------------------------------

_FEATURES = [
    ("required", {"tools": [WEATHER], "tool_choice": "required"}, "tool_choice"),
    (
        "named",
        {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "weather"}}},
        "tool_choice",
    ),
    (
        "strict",
        {"tools": [{"type": "function", "function": {"name": "weather", "strict": True}}]},
        "tools[0].function.strict",
    ),
    (
        "json_schema",
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}},
        "response_format.type",
    ),
]


@pytest.mark.parametrize(("feature", "fields", "param"), _FEATURES)
def test_tool_calling_beyond_auto_needs_the_spec(
    parts: Any, feature: str, fields: dict[str, Any], param: str
) -> None:
    reply = _refusal(_admission(parts).decide(Route.CHAT, _chat(**fields)), param=param)
    assert "not supported by this deployment" in reply.message
    enabled = _admission(parts, tool_features=frozenset({feature}))
    assert isinstance(enabled.decide(Route.CHAT, _chat(**fields)), Admitted)


def test_auto_tools_and_non_strict_functions_pass(parts: Any) -> None:
    tool = {"type": "function", "function": {"name": "weather", "strict": False}}
    decision = _admission(parts).decide(Route.CHAT, _chat(tools=[tool], tool_choice="auto"))
    assert isinstance(decision, Admitted)


# --- configuration -------------------------------------------------------------------------


def test_the_gateway_reads_the_new_settings(tmp_path: Path) -> None:
    base = ["--served-model-name", "m", "--api-keys-dir", str(tmp_path)]
    base += ["--tokenizer-dir", str(tmp_path)]
    config = load_gateway_config(
        [*base, "--extensions", '{"ignore_eos": ["bench"], "top_k": []}'],
        environ={
            "SPARKLLM_GATEWAY_TOOL_CALLING": "named,strict",
            "SPARKLLM_GATEWAY_MAX_CHOICES": "2",
        },
    )
    assert config.extensions == {"ignore_eos": ("bench",), "top_k": ()}
    assert (config.tool_calling, config.max_choices) == (("named", "strict"), 2)
    for bad in (["--extensions", '{"input_ids": []}'], ["--tool-calling", "everything"]):
        with pytest.raises(GatewayError):
            load_gateway_config([*base, *bad], environ={})
    assert set(TOOL_FEATURES) == {"required", "named", "strict", "json_schema"}


# --- fuzz: any field set, never a crash, an unknown field always named ---------------------

_KEYS = st.sampled_from(sorted(STANDARD[Route.CHAT.value] | OPTIONAL_EXTENSIONS)) | st.text(
    max_size=12
)


@given(extra=st.dictionaries(_KEYS, st.none() | st.integers() | st.text(max_size=5), max_size=4))
def test_fuzzed_fields_are_refused_by_name_or_decided(parts: Any, extra: dict[str, Any]) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}
    decision = _admission(parts).decide(Route.CHAT, json.dumps(body).encode(), user="alice")
    allowed = STANDARD[Route.CHAT.value] | COUNTED_EXTENSIONS[Route.CHAT.value]
    unknown = [key for key in body if key not in allowed]
    if unknown:
        assert isinstance(decision, ErrorReply)
        assert (decision.code, decision.param) == ("unsupported_parameter", unknown[0])
    elif isinstance(decision, ErrorReply):
        assert 400 <= decision.status < 500
