"""What a relayed answer really used: from its ``usage``, or counted from the stream.

Why after the fact and off the token path: a budget reserves ``input + granted output``
at admission and must then be charged what the engine really produced, so the rest goes
back to the user. The relay keeps the answer's bytes as they pass (a list append per
chunk, nothing parsed while tokens flow); when the exchange is over the meter reads them:

* a JSON answer's ``usage`` (``prompt_tokens``, ``completion_tokens``; Messages and
  Responses say ``input_tokens``, ``output_tokens``, a Responses stream inside its
  final ``response``, a Messages stream in ``message_delta``; the usage of the opening
  events — ``message_start``'s 1 output token — is no final count) — also when the
  client left before it came: a non-streamed generation is made whole before its first
  byte, so the relay keeps reading it for a client that left (proxy.py, ``drain``) and
  the engine's own count is charged, not "no byte sent, no output made";
* a stream's ``usage`` chunk, when the client asked for one (``stream_options``);
* otherwise the stream's text (content, reasoning, tool-call arguments, completions'
  ``text``) counted with the model's tokenizer — also for a stream the client left:
  a stream's tokens go out as they are made and the engine aborted when the connection
  closed, so what it streamed is what it made (give or take the tokens in flight).

When the engine's answer cannot tell (a JSON answer cut off mid-body, more than
``MAX_METERED_BYTES`` of answer), the reservation is charged in full. A client gone
before any answer byte — a stream during prefill, or any request before it was written
upstream — is charged its prompt and no output (the engine aborted, or never had it).
The budget is never exceeded either way: the engine cannot produce more than the
``max_tokens`` the reservation covers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sparkllm.gateway.asgi import Message, Send

MAX_METERED_BYTES = 16 * 1024 * 1024
_SSE = b"text/event-stream"


@dataclass(frozen=True, slots=True)
class Used:
    """Tokens to charge; ``measured`` False when the reservation was charged in full."""

    input_tokens: int
    output_tokens: int
    measured: bool
    input_from_usage: bool = False  # the prompt count is the engine's own (``usage``)


NOTHING_USED = Used(0, 0, measured=True)


class UsageMeter:
    """Wraps ``send`` to keep the answer's bytes; ``used()`` reads them afterwards."""

    __slots__ = ("_chunks", "_overflow", "_size", "_sse", "_status", "send")

    def __init__(self, send: Send) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        self._overflow = False
        self._sse = False
        self._status = 0

        async def metering_send(message: Message) -> None:
            if message["type"] == "http.response.body":
                body = message.get("body", b"")
                if body and not self._overflow:
                    self._size += len(body)
                    self._overflow = self._size > MAX_METERED_BYTES
                    self._chunks.append(body)
            elif message["type"] == "http.response.start":
                self._status = int(message["status"])
                headers = dict(message.get("headers") or ())
                self._sse = bytes(headers.get(b"content-type", b"")).startswith(_SSE)
            await send(message)

        self.send: Send = metering_send

    @property
    def size(self) -> int:
        """Bytes of answer kept so far."""
        return self._size

    def used(
        self,
        *,
        input_tokens: int,
        reserved_output: int,
        answered: bool,
        count: Callable[[str], int] | None,
        client_closed: bool = False,
    ) -> Used:
        """What to charge; ``answered``: the upstream sent an answer (not a gateway error).

        A client gone before any answer byte is charged the prompt (the engine had it)
        and no output (the disconnect aborted it before any was sent).
        """
        if not self._chunks and client_closed:
            return Used(input_tokens, 0, measured=False)
        if not answered or not self._chunks or self._status >= 400:
            return NOTHING_USED  # nothing reached an engine, or it refused
        if self._overflow:
            return Used(input_tokens, reserved_output, measured=False)
        data = b"".join(self._chunks)
        usage = _stream_usage(data) if self._sse else _json_usage(data)
        if usage is not None:
            prompt, completion = usage
            output = min(completion, reserved_output)
            if prompt:
                return Used(prompt, output, measured=True, input_from_usage=True)
            return Used(input_tokens, output, measured=True)
        if self._sse and count is not None:
            counted = count(_stream_text(data))
            return Used(input_tokens, min(counted, reserved_output), measured=True)
        return Used(input_tokens, reserved_output, measured=False)


def _usage_of(event: Any) -> tuple[int, int] | None:
    if not isinstance(event, dict):
        return None
    usage = event.get("usage")
    for outer in ("response", "message"):  # a Responses / Messages stream event's object
        if usage is None and isinstance(event.get(outer), dict):
            usage = event[outer].get("usage")
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion = usage.get("completion_tokens", usage.get("output_tokens"))
    if not isinstance(completion, int):
        return None
    return (prompt if isinstance(prompt, int) else 0), completion


def _json_usage(data: bytes) -> tuple[int, int] | None:
    try:
        return _usage_of(json.loads(data))
    except ValueError:
        return None


def _events(data: bytes) -> list[Any]:
    events = []
    for line in data.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if not payload or payload == b"[DONE]":
            continue
        try:
            events.append(json.loads(payload))
        except ValueError:
            continue
    return events


# Stream events whose usage is not the answer's final count: a Messages stream's
# message_start says the output so far (1 token), a Responses stream's opening events
# carry none. A stream cut off before its final usage is counted from its text.
_OPENING_EVENTS: Final = frozenset({"message_start", "response.created", "response.in_progress"})
# Generated text in Messages deltas (text, tool input, thinking) and Responses events.
_ANTHROPIC_DELTAS: Final = ("text", "partial_json", "thinking")
_RESPONSES_DELTAS: Final = frozenset(
    {
        *("response.output_text.delta", "response.function_call_arguments.delta"),
        *("response.reasoning_text.delta", "response.reasoning_summary_text.delta"),
    }
)


def _stream_usage(data: bytes) -> tuple[int, int] | None:
    found = None
    for event in _events(data):
        if isinstance(event, dict) and event.get("type") in _OPENING_EVENTS:
            continue
        found = _usage_of(event) or found
    return found


def _stream_text(data: bytes) -> str:
    """Every generated piece of text in a stream, in order (what the tokenizer re-counts):
    chat and completions choices, Messages content_block_delta, Responses text deltas."""
    pieces: list[str] = []
    for event in _events(data):
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "content_block_delta" and isinstance(delta := event.get("delta"), dict):
            pieces.extend(v for k in _ANTHROPIC_DELTAS if isinstance(v := delta.get(k), str))
            continue
        if kind in _RESPONSES_DELTAS and isinstance(delta := event.get("delta"), str):
            pieces.append(delta)
            continue
        choices = event.get("choices") if isinstance(event, dict) else None
        for choice in choices if isinstance(choices, list) else ():
            if isinstance(choice, dict):
                delta = choice.get("delta")
                _pieces_of(delta if isinstance(delta, dict) else choice, pieces)
    return "".join(pieces)


def _pieces_of(delta: dict[str, Any], pieces: list[str]) -> None:
    for key in ("reasoning_content", "content", "text"):
        if isinstance(value := delta.get(key), str):
            pieces.append(value)
    calls = delta.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            pieces.extend(v for k in ("name", "arguments") if isinstance(v := function.get(k), str))
