"""Payload rules ``allowed_fields`` and ``tool_features``: which request fields (and
tool-calling features) pass the front door, per route; the rest is a 400 naming the field.

Why an allowlist: smg and SGLang take far more than OpenAI's fields, and several reach
past the admission layer's count or into the engine's internals — ``input_ids`` replaces
the rendered prompt (its length unchecked against the input cap), ``rid``,
``session_params``, ``lora_path``, ``custom_logit_processor``,
``return_hidden_states``, ``priority``, ``bootstrap_*`` and ``routed_dp_rank`` steer
the engine's scheduler, memory and code. A field passes only when the admission layer
understands what it does to the engine's work and the served configuration supports it:

* OpenAI's fields the engine supports (``STANDARD``);
* SGLang extensions that shape the prompt, which admission counts as the engine does
  (``COUNTED_EXTENSIONS``: template switches, continuation, V4 tasks);
* SGLang sampling extensions with a use here (``OPTIONAL_EXTENSIONS``, e.g.
  ``ignore_eos``, which the acceptance benchmark sends) only where
  ``spec.admission.extensions`` enables them, for every user or for named ones.

Everything else — ``input_ids``, SGLang's internal fields, fields of other APIs, typos —
is refused with ``unsupported_parameter``. Pure; the check is one set difference.

``allowed_fields`` runs right after the body parses, before any field is read;
``tool_features`` once the fields that size the work are known (a tool choice or a
strict function is well-formed by then, or the shape checks named it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sparkllm import gateway_settings
from sparkllm.gateway import replies
from sparkllm.gateway.replies import ErrorReply, RequestRejectedError
from sparkllm.gateway.rules.context import Draft, Route

_COMMON: Final = frozenset(
    {
        *("model", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n"),
        *("presence_penalty", "seed", "stop", "stream", "stream_options", "temperature"),
        *("top_p", "user"),
    }
)
# Fields that change no work: the OpenAI SDK sends them, SGLang's request model takes
# them and nothing it computes reads them — on chat it ignores them (undeclared: pydantic
# drops them), on Responses and Messages they are declared labels (user, metadata,
# store, ...). tests/unit/test_gateway_client_fields.py derives chat's from the pinned
# wheel's model and the SDK's parameters, and checks each is taken by the wheel's model.
_CACHE_HINTS = ("prompt_cache_key", "prompt_cache_retention", "prompt_cache_options")
NO_WORK: Final = {
    "/v1/chat/completions": frozenset(
        {"metadata", "store", "service_tier", "safety_identifier", "verbosity", *_CACHE_HINTS}
    ),
    "/v1/completions": frozenset[str](),
    "/v1/messages": frozenset({"metadata", "betas"}),
    "/v1/messages/count_tokens": frozenset({"betas"}),
    "/v1/responses": frozenset(
        {"store", "metadata", "service_tier", "user", "parallel_tool_calls", "stream_options"}
        | {"safety_identifier", *_CACHE_HINTS}
    ),
}
_ANTHROPIC: Final = frozenset({"model", "messages", "system", "tools", "tool_choice"})
# OpenAI's (and Anthropic's) fields the engine supports, per route (legacy completions: no
# best_of, which multiplies work unseen, and no suffix, which SGLang does not implement;
# Messages and Responses: what protocols.py converts as SGLang does).
STANDARD: Final = {
    route: fields | NO_WORK[route]
    for route, fields in {
        "/v1/chat/completions": _COMMON
        | {
            *("messages", "max_completion_tokens", "top_logprobs", "response_format"),
            *("tools", "tool_choice", "parallel_tool_calls", "reasoning_effort"),
        },
        "/v1/completions": _COMMON | {"prompt", "echo"},
        "/v1/messages": _ANTHROPIC
        | {"max_tokens", "stream", "temperature", "top_p", "top_k", "stop_sequences"},
        "/v1/messages/count_tokens": _ANTHROPIC,
        "/v1/responses": frozenset(
            {"model", "input", "instructions", "max_output_tokens", "stream", "temperature"}
            | {"top_p"}
        ),
    }.items()
}
# SGLang extensions admission reads and counts as the engine does (always allowed).
COUNTED_EXTENSIONS: Final = {
    "/v1/chat/completions": frozenset(
        {"chat_template_kwargs", "continue_final_message", "reasoning", "task"}
    ),
    "/v1/completions": frozenset[str](),
    "/v1/messages": frozenset[str](),
    "/v1/messages/count_tokens": frozenset[str](),
    "/v1/responses": frozenset[str](),
}
# SGLang sampling extensions a deployment may enable (spec.admission.extensions).
OPTIONAL_EXTENSIONS: Final = frozenset(gateway_settings.OPTIONAL_EXTENSIONS)
CODE_UNSUPPORTED_PARAMETER: Final = "unsupported_parameter"


class Allowlist:
    """The fields one deployment lets through, per route and user.

    ``extensions`` maps an optional extension to the users it is enabled for (empty:
    every user).
    """

    def __init__(self, extensions: Mapping[str, frozenset[str]]) -> None:
        unknown = set(extensions) - OPTIONAL_EXTENSIONS
        if unknown:
            raise ValueError(f"not an optional extension: {', '.join(sorted(unknown))}")
        self._for_everyone = frozenset(name for name, users in extensions.items() if not users)
        self._for_users = {name: users for name, users in extensions.items() if users}
        self._base = {
            route: STANDARD[route] | COUNTED_EXTENSIONS[route] | self._for_everyone
            for route in STANDARD
        }

    def check(self, route: str, payload: Mapping[str, Any], *, user: str | None) -> None:
        """Refuse (400 ``unsupported_parameter``) the first field that may not pass."""
        allowed = self._base[route]
        if allowed.issuperset(payload):  # the common case: one set comparison
            return
        for field in payload:
            if field in allowed or user in self._for_users.get(field, ()):
                continue
            raise RequestRejectedError(_unsupported(field))


def allowed_fields(draft: Draft) -> ErrorReply | None:
    """Refuse the first field this deployment does not let through for this user."""
    draft.allowlist.check(draft.route.value, draft.payload, user=draft.user)
    return None


def _unsupported(field: str) -> ErrorReply:
    if field in OPTIONAL_EXTENSIONS:
        why = "is not enabled for your key on this deployment"
    else:
        why = "is not supported by this deployment"
    return replies.invalid_request(
        f"The parameter '{field}' {why}; remove it from the request.",
        param=field,
        code=CODE_UNSUPPORTED_PARAMETER,
    )


# Tool-calling features a deployment may enable (spec.admission.toolCalling); each is
# checked where the request uses it.
TOOL_FEATURES: Final = frozenset(gateway_settings.TOOL_FEATURES)
_WHY = "is not supported by this deployment (spec.admission.toolCalling)"


def tool_features(draft: Draft) -> ErrorReply | None:
    """Refuse (a chat, or what the engine makes one of) a tool-calling feature
    ``spec.admission.toolCalling`` does not enable."""
    if draft.route is not Route.COMPLETIONS:
        check_tool_features(draft.chat, enabled=draft.policy.tool_features)
    return None


def check_tool_features(payload: Mapping[str, Any], *, enabled: frozenset[str]) -> None:
    """Refuse a tool choice, strict function or JSON-schema format not enabled here.

    Runs after the shape checks: ``tools`` and messages are well-formed when present.
    """
    if enabled >= TOOL_FEATURES:
        return
    choice = payload.get("tool_choice")
    if choice == "required" and "required" not in enabled:
        _refuse_feature("tool_choice 'required'", param="tool_choice")
    if isinstance(choice, dict) and "named" not in enabled:
        _refuse_feature("A named tool_choice", param="tool_choice")
    response_format = payload.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") not in (
        None, "text", "json_object"
    ):  # fmt: skip
        kind = response_format.get("type")
        if kind != "json_schema" or "json_schema" not in enabled:
            _refuse_feature(f"response_format type {kind!r}", param="response_format.type")
    if "strict" not in enabled:
        for param, function in _tool_definitions(payload):
            if function.get("strict") is True:
                _refuse_feature("A strict function", param=f"{param}.strict")


def _tool_definitions(payload: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The request's function definitions and system messages' (malformed ones skipped:
    the shape checks name them)."""
    found = _functions(payload.get("tools"), param="tools")
    messages = payload.get("messages")
    for index, message in enumerate(messages if isinstance(messages, list) else ()):
        if isinstance(message, dict):
            found += _functions(message.get("tools"), param=f"messages[{index}].tools")
    return found


def _functions(tools: object, *, param: str) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(tools, list):
        return []
    return [
        (f"{param}[{index}].function", tool["function"])
        for index, tool in enumerate(tools)
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict)
    ]


def _refuse_feature(what: str, *, param: str) -> None:
    raise RequestRejectedError(
        replies.invalid_request(
            f"{what} ('{param}') {_WHY}.", param=param, code=CODE_UNSUPPORTED_PARAMETER
        )
    )
