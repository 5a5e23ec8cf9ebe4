"""Anthropic Messages and OpenAI Responses bodies as the chat request SGLang makes of them.

Why: SGLang 0.5.23 serves ``/v1/messages`` (and ``/v1/messages/count_tokens``) and
``/v1/responses`` by turning each body into a ``ChatCompletionRequest`` and rendering
that (``anthropic/serving.py: _convert_to_chat_completion_request``,
``openai/serving_responses.py: _construct_input_messages`` and ``_make_request``). The
engine's prompt is that chat's prompt, so admission counts it the same way: these pure
functions build the same chat messages and tools, and the chat rules measure them
(tests/unit/test_gateway_sglang_differential.py compares with the wheel's own code).

What is converted is the text protocol: text content, Anthropic's custom tools,
``tool_use`` / ``tool_result`` blocks with text, Responses' message items. What SGLang
would render with knowledge admission does not have — images, server-side tools,
thinking history (it depends on the engine's reasoning parser), Responses function-call
items, ``previous_response_id`` (a stored history the gateway cannot see) — is refused
with a 400 naming the field, before it costs the engine anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sparkllm.gateway import replies, validation
from sparkllm.gateway.rules.allowlist import CODE_UNSUPPORTED_PARAMETER

_ANTHROPIC_ROLES = ("user", "assistant")
_RESPONSES_PARTS = frozenset({"input_text", "output_text", "text"})


def _unsupported(what: str, *, param: str) -> None:
    validation.reject(
        f"{what} ('{param}') is not supported by this deployment.",
        param=param,
        code=CODE_UNSUPPORTED_PARAMETER,
    )


def _text(block: Mapping[str, Any], *, param: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        validation.wrong_type(f"{param}.text", "a string", text)
    return text


def _object(value: object, *, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        validation.wrong_type(param, "an object", value)
    return value


def _content(message: Mapping[str, Any], *, param: str) -> Any:
    """A message's or item's ``content`` (required; its shape is checked where it is read)."""
    content = message.get("content")
    if content is None:
        validation.reject(
            f"Missing required parameter: '{param}.content'.",
            param=f"{param}.content",
            code=replies.CODE_MISSING_PARAMETER,
        )
    return content


def _array(value: object, *, param: str) -> list[Any]:
    if not isinstance(value, list):
        validation.wrong_type(param, "an array", value)
    return value


# --- Anthropic Messages --------------------------------------------------------------


def anthropic_chat(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The chat request SGLang converts an Anthropic Messages body to (what counts)."""
    messages: list[dict[str, Any]] = []
    system = _anthropic_system(payload.get("system"))
    if system:
        messages.append({"role": "system", "content": "\n".join(system)})
    raw = _array(validation.required(payload, "messages"), param="messages")
    for index, message in enumerate(raw):
        _anthropic_message(messages, message, param=f"messages[{index}]")
    chat: dict[str, Any] = {"messages": messages}
    tools = _anthropic_tools(payload.get("tools"))
    if tools:
        chat["tools"] = tools
    choice = payload.get("tool_choice")
    if choice is not None:
        chat["tool_choice"] = _anthropic_tool_choice(_object(choice, param="tool_choice"), tools)
    elif tools:
        chat["tool_choice"] = "auto"
    return chat


def _anthropic_system(system: object) -> list[str]:
    if system is None:
        return []
    if isinstance(system, str):
        return [system] if system.strip() else []
    parts = []
    for index, raw in enumerate(_array(system, param="system")):
        param = f"system[{index}]"
        block = _object(raw, param=param)
        if block.get("type") != "text":
            _unsupported(f"A {json.dumps(block.get('type'))} system block", param=f"{param}.type")
        text = _text(block, param=param)
        if text:
            parts.append(text)
    return parts


def _role(message: dict[str, Any], *, param: str, system_field: str) -> str:
    """A conversation turn's role: 'user' or 'assistant'; the system prompt has its own
    field in both protocols (``system_field``), which the refusal names."""
    role = message.get("role")
    if role not in _ANTHROPIC_ROLES:
        validation.reject(
            f"'{param}.role' must be 'user' or 'assistant' (a system prompt goes in "
            f"'{system_field}'), got {json.dumps(role)}.",
            param=f"{param}.role",
        )
    return str(role)


def _anthropic_message(out: list[dict[str, Any]], message: object, *, param: str) -> None:
    message = _object(message, param=param)
    role = _role(message, param=param, system_field="system")
    content = _content(message, param=param)
    if isinstance(content, str):
        out.append({"role": role, "content": content})
        return
    parts: list[dict[str, Any]] = []
    tool_calls: list[dict[str, Any]] = []
    for index, raw in enumerate(_array(content, param=f"{param}.content")):
        where = f"{param}.content[{index}]"
        block = _object(raw, param=where)
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": _text(block, param=where)})
        elif kind == "tool_use" and role == "assistant":
            tool_calls.append(_tool_use(block, param=where))
        elif kind == "tool_use":  # Anthropic's API takes them from the assistant only
            _unsupported("A tool_use block in a user message", param=f"{where}.type")
        elif kind == "tool_result":
            _tool_result(out, parts, block, role=role, param=where)
        else:
            _unsupported(f"A {json.dumps(kind)} content block", param=f"{where}.type")
    converted: dict[str, Any] = {"role": role}
    if tool_calls:
        converted["tool_calls"] = tool_calls
    if parts:
        only_text = len(parts) == 1 and parts[0]["type"] == "text"
        converted["content"] = parts[0]["text"] if only_text else parts
        out.append(converted)
    elif tool_calls:
        out.append(converted)
    elif role == "assistant":  # SGLang keeps an empty assistant turn as ""
        converted["content"] = ""
        out.append(converted)


def _tool_use(block: Mapping[str, Any], *, param: str) -> dict[str, Any]:
    ident, name = block.get("id"), block.get("name")
    if not isinstance(ident, str):
        validation.wrong_type(f"{param}.id", "a string", ident)
    if not isinstance(name, str):
        validation.wrong_type(f"{param}.name", "a string", name)
    arguments = block.get("input")
    if arguments is not None:
        _object(arguments, param=f"{param}.input")
    return {
        "id": ident,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments or {})},
    }


def _tool_result(
    out: list[dict[str, Any]],
    parts: list[dict[str, Any]],
    block: Mapping[str, Any],
    *,
    role: str,
    param: str,
) -> None:
    """A user's tool result becomes tool messages (after the text before it); an
    assistant's, a text part (SGLang's rule)."""
    contents, text = _tool_result_content(block.get("content"), param=f"{param}.content")
    call_id = block.get("tool_use_id") or block.get("id") or ""
    if not isinstance(call_id, str):
        validation.wrong_type(f"{param}.tool_use_id", "a string", call_id)
    if role != "user":
        parts.append({"type": "text", "text": f"Tool result: {text}"})
        return
    if parts:
        only_text = len(parts) == 1 and parts[0]["type"] == "text"
        out.append({"role": "user", "content": parts[0]["text"] if only_text else list(parts)})
        parts.clear()
    out.extend({"role": "tool", "tool_call_id": call_id, "content": c} for c in contents)


def _tool_result_content(content: object, *, param: str) -> tuple[list[Any], str]:
    if content is None or isinstance(content, str):
        text = content or ""
        return [text], text
    texts = []
    for index, raw in enumerate(_array(content, param=param)):
        block = _object(raw, param=f"{param}[{index}]")
        if block.get("type") != "text":
            kind = json.dumps(block.get("type"))
            _unsupported(f"A {kind} tool result block", param=f"{param}[{index}].type")
        texts.append(_text(block, param=f"{param}[{index}]"))
    kept = [text for text in texts if text]
    text = "\n".join(kept)
    if not kept:
        return [""], text
    if len(kept) == 1:
        return [kept[0]], text
    return [[{"type": "text", "text": t} for t in kept]], text


def _anthropic_tools(tools: object) -> list[dict[str, Any]]:
    converted = []
    for index, raw in enumerate(_array(tools, param="tools") if tools is not None else ()):
        param = f"tools[{index}]"
        tool = _object(raw, param=param)
        if tool.get("type") not in (None, "custom"):
            _unsupported(f"A {json.dumps(tool.get('type'))} tool", param=f"{param}.type")
        name, schema = tool.get("name"), tool.get("input_schema")
        if not isinstance(name, str):
            validation.wrong_type(f"{param}.name", "a string", name)
        _object(schema, param=f"{param}.input_schema")
        description, strict = tool.get("description"), tool.get("strict", False)
        if description is not None and not isinstance(description, str):
            validation.wrong_type(f"{param}.description", "a string", description)
        if not isinstance(strict, bool):
            validation.wrong_type(f"{param}.strict", "a boolean", strict)
        function = {
            "name": name,
            "description": description or "",
            "parameters": schema,
            "strict": strict,
        }
        entry: dict[str, Any] = {"type": "function", "function": function}
        if tool.get("defer_loading") is not None:
            entry["defer_loading"] = tool["defer_loading"]
        converted.append(entry)
    return converted


def _anthropic_tool_choice(choice: Mapping[str, Any], tools: list[dict[str, Any]]) -> Any:
    kind = choice.get("type")
    if kind == "none":
        return "none"
    if kind not in ("auto", "any", "tool"):
        validation.reject(
            f"'tool_choice.type' must be auto, any, tool or none, got {json.dumps(kind)}.",
            param="tool_choice.type",
        )
    if not tools:
        if kind == "auto":
            return "none"  # SGLang leaves it unset: with no tools, nothing is rendered
        validation.reject(f"tool_choice {kind!r} needs at least one tool.", param="tool_choice")
    if kind == "auto":
        return "auto"
    if kind == "any":
        return "required"
    name = choice.get("name")
    if not any(tool["function"]["name"] == name for tool in tools):
        validation.reject(
            f"tool_choice names the tool {json.dumps(name)}, which is not in 'tools'.",
            param="tool_choice.name",
        )
    return {"type": "function", "function": {"name": name}}


# --- OpenAI Responses ----------------------------------------------------------------


def responses_chat(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The chat request SGLang builds from a Responses body (text message items)."""
    messages: list[dict[str, Any]] = []
    instructions = payload.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        validation.wrong_type("instructions", "a string", instructions)
    if instructions:
        messages.append({"role": "system", "content": instructions})
    raw = validation.required(payload, "input")
    if isinstance(raw, str):
        messages.append({"role": "user", "content": raw})
    else:
        for index, item in enumerate(_array(raw, param="input")):
            _merge_assistant(messages, _responses_item(item, param=f"input[{index}]"))
    return {"messages": messages}


def _responses_item(item: object, *, param: str) -> dict[str, Any]:
    item = _object(item, param=param)
    if item.get("type") not in (None, "message"):
        _unsupported(f"A {json.dumps(item.get('type'))} input item", param=f"{param}.type")
    role = _role(item, param=param, system_field="instructions")
    content = _content(item, param=param)
    if isinstance(content, str):
        return {"role": role, "content": content}
    parts = []
    for index, raw in enumerate(_array(content, param=f"{param}.content")):
        where = f"{param}.content[{index}]"
        part = _object(raw, param=where)
        if part.get("type") not in _RESPONSES_PARTS:
            _unsupported(f"A {json.dumps(part.get('type'))} content part", param=f"{where}.type")
        parts.append({"type": "text", "text": _text(part, param=where)})
    return {"role": role, "content": parts}


def _merge_assistant(messages: list[dict[str, Any]], message: dict[str, Any]) -> None:
    """Consecutive assistant items are one turn (``_merge_consecutive_assistant_messages``)."""
    if not (message["role"] == "assistant" and messages and messages[-1]["role"] == "assistant"):
        messages.append(message)
        return
    previous, new = messages[-1], message["content"]
    if new is None or new == "":
        return
    old = previous["content"]
    if old is None or old == "":
        previous["content"] = new
    elif isinstance(old, str) and isinstance(new, str):
        previous["content"] = old + "\n\n" + new
    else:
        previous["content"] = _as_parts(old) + _as_parts(new)


def _as_parts(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return list(content)
    return [{"type": "text", "text": content}] if content else []
