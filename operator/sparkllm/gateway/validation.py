"""Shape checks for OpenAI request bodies: each failure is a 400 that names the field.

Why here and not in the engine: a malformed request should cost the deployment nothing,
and the client should learn exactly which field is wrong (``param`` in the error body),
in OpenAI's vocabulary. Only what admission relies on is checked (model, output limits,
the prompt and what the chat template reads); every other field passes through to the
engine untouched, so new OpenAI or SGLang parameters need no gateway change.

All functions are pure and raise ``RequestRejectedError`` carrying the reply.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NoReturn

from sparkllm.gateway import replies
from sparkllm.gateway.chat_messages import tool_dump
from sparkllm.gateway.replies import RequestRejectedError
from sparkllm.gateway_settings import RESERVED_TEMPLATE_KWARGS

_TEXT_PART_TYPES = frozenset({"text", "input_text"})
_REASONING_PART_TYPES = frozenset({"thinking", "reasoning"})
_TOOL_CHOICE_WORDS = frozenset({"none", "auto", "required"})


def reject(message: str, *, param: str | None, code: str = replies.CODE_INVALID_VALUE) -> NoReturn:
    """Stop admission with a 400 naming ``param``."""
    raise RequestRejectedError(replies.invalid_request(message, param=param, code=code))


def _type_name(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "null" if value is None else "number"
    )


def wrong_type(param: str, expected: str, value: object) -> NoReturn:
    """Stop admission with a 400 for a field of the wrong JSON type."""
    reject(
        f"'{param}' must be {expected}, got {_type_name(value)}.",
        param=param,
        code=replies.CODE_INVALID_TYPE,
    )


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every request (json.loads with an option builds a new one per call).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def parse_json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object (strict JSON: no NaN/Infinity).

    Decoded as ``json.loads`` decodes bytes: UTF-8, -16 or -32 by the first bytes, lone
    surrogates passed through (admission rejects them where they matter).
    """
    try:
        payload = _DECODER.decode(body.decode(json.detect_encoding(body), "surrogatepass"))
    except (ValueError, RecursionError) as exc:
        reject(
            f"We could not parse the JSON body of your request ({exc}).",
            param=None,
            code=replies.CODE_INVALID_JSON,
        )
    if not isinstance(payload, dict):
        wrong_type("body", "a JSON object", payload)
    return payload


def required(payload: Mapping[str, Any], param: str) -> Any:
    """The value of a required field (absent or null is a 400)."""
    value = payload.get(param)
    if value is None:
        reject(
            f"Missing required parameter: '{param}'.",
            param=param,
            code=replies.CODE_MISSING_PARAMETER,
        )
    return value


def optional_bool(payload: Mapping[str, Any], param: str) -> bool:
    """A boolean flag, False when absent or null."""
    value = payload.get(param)
    if value is None:
        return False
    if not isinstance(value, bool):
        wrong_type(param, "a boolean", value)
    return value


def optional_positive_int(payload: Mapping[str, Any], param: str) -> int | None:
    """An integer >= 1, or None when absent or null."""
    value = payload.get(param)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        wrong_type(param, "an integer", value)
    if value < 1:
        reject(f"'{param}' must be at least 1, got {value}.", param=param)
    return value


def _check_content(content: object, *, param: str) -> None:
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        wrong_type(param, "a string, an array of content parts or null", content)
    for index, part in enumerate(content):
        part_param = f"{param}[{index}]"
        if not isinstance(part, dict):
            wrong_type(part_param, "a content part object", part)
        if part.get("type") in _REASONING_PART_TYPES:
            continue  # SGLang accepts them and leaves them out of the prompt
        if part.get("type") not in _TEXT_PART_TYPES:
            reject(
                f"Only text content parts are supported; {part_param}.type is "
                f"{json.dumps(part.get('type'))}.",
                param=f"{part_param}.type",
            )
        if not isinstance(part.get("text"), str):
            wrong_type(f"{part_param}.text", "a string", part.get("text"))


def _with_function(value: object, *, param: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """An object with a ``function`` object (a tool, or a past tool call), and that function."""
    if not isinstance(value, dict):
        wrong_type(param, "an object", value)
    function = value.get("function")
    if not isinstance(function, dict):
        wrong_type(f"{param}.function", "an object", function)
    return value, function


def _check_tool_call(call: object, *, param: str) -> None:
    """A past tool call SGLang's ``ToolCall`` model takes."""
    call, function = _with_function(call, param=param)
    name, arguments = function.get("name"), function.get("arguments")
    if name is not None and not isinstance(name, str):
        wrong_type(f"{param}.function.name", "a string", name)
    if arguments is not None and not isinstance(arguments, str | dict):
        wrong_type(f"{param}.function.arguments", "a string or an object", arguments)
    if call.get("id") is not None and not isinstance(call["id"], str):
        wrong_type(f"{param}.id", "a string", call["id"])
    index = call.get("index")
    if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
        wrong_type(f"{param}.index", "an integer", index)
    if call.get("type", "function") != "function":
        reject(f"'{param}.type' must be 'function'.", param=f"{param}.type")


def chat_messages(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``messages``: a non-empty array of objects with a string role and text content."""
    messages = required(payload, "messages")
    if not isinstance(messages, list):
        wrong_type("messages", "an array", messages)
    if not messages:
        reject("'messages' must contain at least one message.", param="messages")
    for index, message in enumerate(messages):
        param = f"messages[{index}]"
        if not isinstance(message, dict):
            wrong_type(param, "an object", message)
        role = message.get("role")
        if not isinstance(role, str) or not role:
            if role is None:
                reject(
                    f"Missing required parameter: '{param}.role'.",
                    param=f"{param}.role",
                    code=replies.CODE_MISSING_PARAMETER,
                )
            wrong_type(f"{param}.role", "a non-empty string", role)
        _check_content(message.get("content"), param=f"{param}.content")
        tool_calls = message.get("tool_calls")
        if tool_calls is not None and not isinstance(tool_calls, list):
            wrong_type(f"{param}.tool_calls", "an array", tool_calls)
        for call_index, call in enumerate(tool_calls or ()):
            _check_tool_call(call, param=f"{param}.tool_calls[{call_index}]")
        if message.get("tools") is not None:
            _checked_tools(message["tools"], param=f"{param}.tools")
    return messages


def _check_tool(tool: object, *, param: str) -> None:
    """A tool definition SGLang's ``Tool`` model takes (what ``tool_dump`` relies on)."""
    tool, function = _with_function(tool, param=param)
    if not isinstance(function.get("name"), str):
        wrong_type(f"{param}.function.name", "a string", function.get("name"))
    if not isinstance(tool.get("type", "function"), str):
        wrong_type(f"{param}.type", "a string", tool.get("type"))
    for owner, field, want, where in (
        (function, "description", str, f"{param}.function.description"),
        (function, "strict", bool, f"{param}.function.strict"),
        (function, "defer_loading", bool, f"{param}.function.defer_loading"),
        (tool, "defer_loading", bool, f"{param}.defer_loading"),
    ):
        value = owner.get(field)
        if value is not None and not isinstance(value, want):
            wrong_type(where, "a string" if want is str else "a boolean", value)


def _checked_tools(tools: object, *, param: str) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        wrong_type(param, "an array", tools)
    for index, tool in enumerate(tools):
        _check_tool(tool, param=f"{param}[{index}]")
    return tools


def chat_tools(payload: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The tools the template renders, dumped and chosen by ``tool_choice`` as SGLang does."""
    tools = payload.get("tools")
    dumped = [] if tools is None else [tool_dump(t) for t in _checked_tools(tools, param="tools")]
    choice = payload.get("tool_choice")
    if choice is None or (isinstance(choice, str) and choice in _TOOL_CHOICE_WORDS):
        return dumped if dumped and choice != "none" else None
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        if isinstance(name, str) and choice.get("type", "function") == "function":
            return [tool for tool in dumped if tool["function"]["name"] == name] or None
    reject(
        "'tool_choice' must be 'none', 'auto', 'required' or "
        '{"type": "function", "function": {"name": ...}}.',
        param="tool_choice",
    )


_EFFORT_TIERS = frozenset({"none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max"})
_TRUE_WORDS = frozenset({"1", "true", "yes", "y", "on"})


def _effort_value(value: object, *, param: str) -> str | float:
    """A reasoning effort as SGLang's model takes it: a named tier, or a number in [0, 0.99].

    A number must be written as a string at the top level (the gateway's rule, SGLang
    also takes a JSON number); in a ``reasoning`` object either form is taken.
    """
    if isinstance(value, str) and value in _EFFORT_TIERS:
        return value
    if param == "reasoning_effort" and not isinstance(value, str):
        wrong_type(param, "a string", value)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        wrong_type(param, "a named effort tier or a number", value)
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0.0 <= number <= 0.99:  # also refuses NaN
        reject(
            f"'{param}' must be one of {', '.join(sorted(_EFFORT_TIERS))} or a number "
            f"from 0 to 0.99, got {json.dumps(value)}.",
            param=param,
        )
    return number


def reasoning(payload: Mapping[str, Any]) -> tuple[str | float | None, bool | None]:
    """(reasoning effort, thinking) as SGLang's request validator resolves them.

    ``normalize_reasoning_inputs``: a ``reasoning`` object's effort replaces
    ``reasoning_effort``; its ``enabled`` turns thinking on; any effort then decides
    thinking (on unless "none"). None: the request does not say.
    """
    effort_raw = payload.get("reasoning_effort")
    effort = None if effort_raw is None else _effort_value(effort_raw, param="reasoning_effort")
    thinking: bool | None = None
    settings = payload.get("reasoning")
    if settings is not None and not isinstance(settings, dict):
        wrong_type("reasoning", "an object", settings)
    if settings:
        nested = settings.get("effort")
        if nested is None:
            nested = settings.get("reasoning_effort")
        if nested is not None:
            effort = _effort_value(nested, param="reasoning.effort")
        enabled = settings.get("enabled")
        if enabled is None:
            enabled = settings.get("enable", False)
        if isinstance(enabled, str):
            enabled = enabled.strip().lower() in _TRUE_WORDS
        if enabled:
            thinking = True
    if effort is not None:
        thinking = effort != "none"
    return effort, thinking


def template_kwargs(
    payload: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Extra template variables: ``reasoning_effort`` and ``chat_template_kwargs``.

    As SGLang builds them: an effort (or ``reasoning`` object) sets ``thinking`` and
    ``enable_thinking`` unless ``chat_template_kwargs`` sets them itself; then the
    engine's server defaults (``--default-chat-template-kwargs``, ``defaults``) fill the
    keys still unset (``serving_chat._process_messages``: ``setdefault``), and a default
    ``reasoning_effort`` becomes the effort when the request names none.
    """
    effort, kwargs = _with_defaults(payload, defaults or {})
    rendered: dict[str, Any] = {}
    if effort is not None:
        rendered["reasoning_effort"] = effort
    rendered.update(kwargs)
    return rendered


def _with_defaults(
    payload: Mapping[str, Any], defaults: Mapping[str, Any]
) -> tuple[str | float | None, dict[str, Any]]:
    """(the effort, chat_template_kwargs) once SGLang has applied the server defaults.

    Without defaults SGLang leaves both as the request's validator made them; with any,
    an effort in the merged kwargs (the request's own, else a default's) becomes the
    request's effort when it names none.
    """
    effort, thinking = reasoning(payload)
    extra = chat_template_kwargs(payload)
    if thinking is not None:
        extra = {"thinking": thinking, "enable_thinking": thinking, **extra}
    if not defaults:
        return effort, extra
    merged = {**defaults, **extra}
    if effort is None and merged.get("reasoning_effort") is not None:
        effort = merged["reasoning_effort"]
    return effort, merged


def chat_template_kwargs(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``chat_template_kwargs``: an object whose keys are not reserved: the template's own
    variables, nor ``chat_template``, which would replace the template counted with."""
    extra = payload.get("chat_template_kwargs")
    if extra is None:
        return {}
    if not isinstance(extra, dict):
        wrong_type("chat_template_kwargs", "an object", extra)
    for key in extra:
        if key in RESERVED_TEMPLATE_KWARGS or not key.isidentifier():
            reject(
                f"'chat_template_kwargs' may not set {json.dumps(key)}.",
                param="chat_template_kwargs",
            )
    return extra


def thinking(payload: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> bool:
    """Whether SGLang's encoders (DeepSeek V4) run in thinking mode for this request:
    ``chat_template_kwargs.thinking`` once the server defaults are applied (the request's
    effort decides it when neither says)."""
    _, kwargs = _with_defaults(payload, defaults or {})
    return bool(kwargs.get("thinking", False))


def effort(
    payload: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
) -> str | float | None:
    """The reasoning effort SGLang hands the encoder, server defaults applied."""
    resolved, _ = _with_defaults(payload, defaults or {})
    return resolved


def completion_prompts(payload: Mapping[str, Any]) -> list[str | list[int]]:
    """``prompt``: a string, an array of strings, token ids, or arrays of token ids."""
    prompt = required(payload, "prompt")
    if isinstance(prompt, str):
        return [prompt]
    if not isinstance(prompt, list) or not prompt:
        reject(
            "'prompt' must be a string, a non-empty array of strings, an array of token "
            "ids or an array of token-id arrays.",
            param="prompt",
            code=replies.CODE_INVALID_TYPE,
        )
    if all(_is_token_id(item) for item in prompt):
        return [prompt]
    prompts: list[str | list[int]] = []
    for index, item in enumerate(prompt):
        is_token_ids = isinstance(item, list) and item and all(map(_is_token_id, item))
        if isinstance(item, str) or is_token_ids:
            prompts.append(item)
        else:
            wrong_type(f"prompt[{index}]", "a string or a non-empty array of token ids", item)
    return prompts


def _is_token_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
