"""SGLang's chat messages as its chat handler hands them to the template.

Why its own module: before the engine renders a chat template it reshapes the request's
messages, and the rendered prompt — which the input cap counts — depends on that shape
as much as on the template. This module reproduces that layer: ``message_dump`` (the
fields SGLang's request model keeps, unset ones null; tools as its ``Tool`` model dumps
them) and ``prepare_messages`` (``serving_chat._apply_jinja_template``: null fields
dropped, ``content: null`` rendered as "", text parts joined with a space for templates
that take string content, tool-call ``arguments`` parsed from JSON, a trailing assistant
message continued or turned into a user turn, an empty conversation refused). The
template itself — transformers' Jinja environment — is chat_template.py's.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from typing import Any

_TEXT_PART_TYPES = frozenset({"text", "input_text"})
_NULLABLE_FUNCTION_FIELDS = frozenset({"description", "parameters"})
# SGLang's chat message fields (ChatCompletionMessageGenericParam), in its order.
_MESSAGE_FIELDS = (
    *("role", "content", "tool_call_id", "name", "phase", "reasoning_content"),
    *("tool_calls", "tools", "prefix"),
)

Message = dict[str, Any]


class ContentFormat(enum.StrEnum):
    """How a template expects ``message.content`` (SGLang's detection, same names)."""

    STRING = "string"  # plain text; content parts are joined with a space
    OPENAI = "openai"  # a list of {"type": "text", "text": ...} parts


class ChatTemplateError(ValueError):
    """The request's messages cannot be rendered by the template (the client's fault)."""


def _joined_text(parts: Sequence[Any]) -> str:
    return " ".join(str(part["text"]) for part in parts if part.get("type") in _TEXT_PART_TYPES)


def prepare_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    content_format: ContentFormat,
    continue_final_message: bool,
) -> tuple[list[Message], str]:
    """SGLang's message preparation; returns the messages and an assistant prefix.

    ``messages`` as SGLang's request model dumps them (``message_dump``). Expects shapes
    already validated by admission (objects with a string role; content a
    string, null or a list of text parts; reasoning parts are left out, as SGLang does).
    Raises ChatTemplateError for tool-call arguments that are not a JSON object, and when
    no message is left (a lone assistant message continued), as the engine does.
    """
    prepared: list[Message] = []
    for original in messages:
        message = {  # a null content becomes "" in its place, as SGLang writes it
            key: "" if value is None else value
            for key, value in original.items()
            if value is not None or key == "content"
        }
        content = message.get("content", "")
        if isinstance(content, list):
            if content_format is ContentFormat.STRING or message.get("role") == "tool":
                content = _joined_text(content)
            else:
                content = [
                    {"type": "text", "text": part["text"]}
                    for part in content
                    if part.get("type") in _TEXT_PART_TYPES
                ]
        message["content"] = content
        if message.get("role") == "assistant" and isinstance(message.get("tool_calls"), list):
            message["tool_calls"] = [_parsed_tool_call(call) for call in message["tool_calls"]]
        prepared.append(message)
    prefix = ""
    if prepared and prepared[-1].get("role") == "assistant":
        last_content = prepared[-1]["content"]
        if isinstance(last_content, str):
            if continue_final_message:
                prefix = last_content
                prepared.pop()
            else:
                prepared[-1] = {"role": "user", "content": last_content}
    if not prepared:  # transformers' apply_chat_template refuses it (a 400 from the engine)
        raise ChatTemplateError("Cannot apply chat template to an empty conversation.")
    return prepared, prefix


def message_dump(message: Mapping[str, Any]) -> Message:
    """The message as SGLang's request model dumps it: its fields only, unset ones null.

    A user message keeps role and content; others also their tool-call id, name, phase,
    reasoning content, tool calls (id, index, type, function name and arguments) and
    tools (as ``validation`` dumps them), and the prefix flag. The role is lower-cased.
    """
    role = str(message["role"]).lower()
    if role == "user":
        return {"role": role, "content": message.get("content")}
    dumped = {field: message.get(field) for field in _MESSAGE_FIELDS}
    dumped["role"] = role
    calls = dumped["tool_calls"]
    if isinstance(calls, list):
        dumped["tool_calls"] = [_call_dump(call) for call in calls]
    if isinstance(dumped["tools"], list):
        dumped["tools"] = [tool_dump(tool) for tool in dumped["tools"]]
    return dumped


def tool_dump(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A tool as SGLang's ``Tool`` model dumps it for the chat template.

    ``type``, ``function`` and ``defer_loading`` (null when unset); the function's
    ``description`` and ``parameters`` (null when unset), ``strict`` and
    ``defer_loading`` only when set, in the client's key order; other keys dropped.
    Expects a shape validation.py checked.
    """
    function = tool["function"]
    defer = tool.get("defer_loading")
    function_defer = function.get("defer_loading")
    fields = {
        "description": function.get("description"),
        "name": function["name"],
        "parameters": function.get("parameters"),
        "strict": function.get("strict"),
        "defer_loading": defer if function_defer is None else function_defer,
    }
    dumped = {k: v for k, v in fields.items() if v is not None or k in _NULLABLE_FUNCTION_FIELDS}
    order = [key for key in function if key in dumped]
    dumped = {key: dumped[key] for key in order + [k for k in dumped if k not in order]}
    return {"type": tool.get("type", "function"), "function": dumped, "defer_loading": defer}


def _call_dump(call: Any) -> Any:
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        return call
    function = call["function"]
    return {
        "id": call.get("id"),
        "index": call.get("index"),
        "type": call.get("type", "function"),
        "function": {"name": function.get("name"), "arguments": function.get("arguments")},
    }


def _parsed_tool_call(call: Any) -> Any:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("arguments"), str):
        return call
    try:
        arguments = json.loads(function["arguments"])
    except (ValueError, RecursionError) as exc:
        raise ChatTemplateError("tool call function.arguments must be valid JSON") from exc
    if not isinstance(arguments, dict):
        raise ChatTemplateError("tool call function.arguments must be a JSON object")
    return {**call, "function": {**function, "arguments": arguments}}


__all__ = [
    "ChatTemplateError",
    "ContentFormat",
    "Message",
    "message_dump",
    "prepare_messages",
    "tool_dump",
]
