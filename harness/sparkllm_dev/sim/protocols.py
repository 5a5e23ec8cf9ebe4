"""SIMULATED Anthropic Messages and OpenAI Responses routes, as SGLang 0.5.23 shapes them.

Why: SGLang serves ``/v1/messages``, ``/v1/messages/count_tokens`` and ``/v1/responses``
by converting the body to a chat-completions request (``anthropic/serving.py``,
``openai/serving_responses.py``) and converting the chat answer back. The simulator does
the same with its own chat generation: ``to_chat`` makes the chat body (text content,
system prompt or instructions, ``max_tokens`` / ``max_output_tokens``), the chat is
generated as any other, and ``anthropic_message`` / ``responses_object`` shape the
answer as the wheel's protocol models do (``AnthropicMessagesResponse``,
``ResponsesResponse``). Non-streamed answers only: a ``stream: true`` body gets a 400
that says so. Every answer carries ``x-sparkllm-simulator: true``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any, Literal

Protocol = Literal["messages", "responses"]
_FINISH_TO_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _text(content: Any) -> Any:
    """Text content as the chat takes it (a string, or the text parts' texts)."""
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return content


def to_chat(protocol: Protocol, body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat-completions body SGLang makes of a Messages or Responses body (text)."""
    messages: list[dict[str, Any]] = []
    if protocol == "messages":
        system = _text(body.get("system"))
        if system:
            messages.append({"role": "system", "content": system})
        for message in body.get("messages") or []:
            if isinstance(message, Mapping):
                messages.append(
                    {"role": message.get("role"), "content": _text(message.get("content"))}
                )
        chat: dict[str, Any] = {"max_tokens": body.get("max_tokens")}
    else:
        if body.get("instructions"):
            messages.append({"role": "system", "content": body["instructions"]})
        raw = body.get("input")
        items = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw or []
        for item in items:
            if isinstance(item, Mapping):
                messages.append({"role": item.get("role"), "content": _text(item.get("content"))})
        chat = {"max_tokens": body.get("max_output_tokens")}
    return {"model": body.get("model"), "messages": messages, **chat}


def anthropic_message(chat: Mapping[str, Any]) -> dict[str, Any]:
    """A chat completion as SGLang's ``_convert_response`` returns it (Messages API)."""
    choice = chat["choices"][0]
    usage = chat.get("usage") or {}
    text = choice["message"].get("content") or ""
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "model": chat["model"],
        "stop_reason": _FINISH_TO_STOP.get(choice.get("finish_reason"), "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage.get("prompt_tokens", 0),
            "output_tokens": usage.get("completion_tokens", 0),
        },
    }


def responses_object(chat: Mapping[str, Any], body: Mapping[str, Any]) -> dict[str, Any]:
    """A chat completion as a ``ResponsesResponse`` (one output message, completed)."""
    choice = chat["choices"][0]
    usage = chat.get("usage") or {}
    text = choice["message"].get("content") or ""
    incomplete = choice.get("finish_reason") == "length"
    prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": int(time.time()),
        "model": chat["model"],
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata"),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "temperature": body.get("temperature"),
        "tool_choice": "auto",
        "tools": [],
        "top_p": body.get("top_p"),
        "user": body.get("user"),
        "output": [
            {
                "id": f"msg_{uuid.uuid4().hex}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "usage": {
            "input_tokens": prompt,
            "output_tokens": completion,
            "total_tokens": prompt + completion,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }
