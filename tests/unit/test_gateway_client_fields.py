"""Fields that change no work pass the front door as SGLang 0.5.23's own models take them.

The set per route (rules/allowlist.py ``NO_WORK``) is checked against the pinned wheel's
request models and the official OpenAI SDK's request parameters (both installed in the
dev venv): on chat it is exactly the SDK's parameters SGLang's ``ChatCompletionRequest``
does not declare (pydantic ignores them: nothing the engine computes can read them),
less the ones the front door refuses because ignoring them would silently change what
the client asked for (tools in the old ``functions`` form, audio output, moderation, ...).
Every no-work field is taken by the wheel's model for its route and changes nothing in
the validated request, or is one of that model's declared labels.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai.types import completion_create_params
from openai.types.chat import completion_create_params as chat_params
from openai.types.responses import response_create_params

from sparkllm.gateway.rules.allowlist import NO_WORK, STANDARD, Allowlist
from tests.unit import sglang_reference
from tests.unit.gateway_fixtures import MODEL

PROTOCOL, _, _ = sglang_reference.load()
ANTHROPIC, _, _ = sglang_reference.converters()
# Ignored by SGLang, refused here: ignoring them would answer another question than asked.
REFUSED_THOUGH_IGNORED = frozenset(
    {"functions", "function_call", "audio", "modalities", "prediction", "web_search_options"}
    | {"moderation"}
)
SAMPLES: dict[str, Any] = {
    "metadata": {"team": "a"}, "store": True, "service_tier": "auto", "user": "u-1",
    "parallel_tool_calls": True, "safety_identifier": "s-1", "verbosity": "low",
    "prompt_cache_key": "k-1", "prompt_cache_retention": "24h", "prompt_cache_options": {},
    "stream_options": {"include_obfuscation": False}, "betas": ["beta-1"],
}  # fmt: skip
_MESSAGES = [{"role": "user", "content": "hi"}]
ROUTES: dict[str, tuple[Any, dict[str, Any]]] = {
    "/v1/chat/completions": (
        PROTOCOL.ChatCompletionRequest, {"model": MODEL, "messages": _MESSAGES}
    ),
    "/v1/completions": (PROTOCOL.CompletionRequest, {"model": MODEL, "prompt": "hi"}),
    "/v1/responses": (PROTOCOL.ResponsesRequest, {"model": MODEL, "input": "hi"}),
    "/v1/messages": (
        ANTHROPIC.AnthropicMessagesRequest,
        {"model": MODEL, "messages": _MESSAGES, "max_tokens": 4},
    ),
    "/v1/messages/count_tokens": (
        ANTHROPIC.AnthropicCountTokensRequest, {"model": MODEL, "messages": _MESSAGES}
    ),
}  # fmt: skip


_FRESH_IDS = frozenset({"request_id"})  # a new random id per validated request


def _dump(model: Any, body: dict[str, Any], *, but: str = "") -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_validate(body).model_dump()  # raises if refused
    return {k: v for k, v in dumped.items() if k not in _FRESH_IDS and k != but}


def _sdk_fields(params: Any) -> set[str]:
    return {name for cls in params.__mro__ for name in getattr(cls, "__annotations__", {})}


def test_chats_no_work_fields_are_the_sdks_fields_sglang_ignores() -> None:
    declared = set(PROTOCOL.ChatCompletionRequest.model_fields)
    ignored = _sdk_fields(chat_params.CompletionCreateParamsBase) - declared
    print(f"\nOpenAI SDK chat fields SGLang 0.5.23 ignores: {sorted(ignored)}")
    assert ignored - REFUSED_THOUGH_IGNORED == NO_WORK["/v1/chat/completions"]
    assert not REFUSED_THOUGH_IGNORED & STANDARD["/v1/chat/completions"]


@pytest.mark.parametrize(
    ("route", "params"),
    [
        ("/v1/chat/completions", chat_params.CompletionCreateParamsBase),
        ("/v1/completions", completion_create_params.CompletionCreateParamsBase),
        ("/v1/responses", response_create_params.ResponseCreateParamsBase),
    ],
)
def test_openai_no_work_fields_are_openai_fields(route: str, params: Any) -> None:
    assert NO_WORK[route] <= _sdk_fields(params)


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_sglangs_model_takes_each_no_work_field_and_it_changes_nothing(route: str) -> None:
    model, minimal = ROUTES[route]
    for field in sorted(NO_WORK[route]):
        body = {**minimal, field: SAMPLES[field]}
        # Taken (SGLang's model raises otherwise), and nothing else in the request changes;
        # an undeclared field is dropped altogether.
        but = field if field in model.model_fields else ""
        assert _dump(model, body, but=but) == _dump(model, minimal, but=but), field
        Allowlist({}).check(route, body, user="alice")  # and the front door lets it pass
