"""A strict reader of one streamed chat completion, for the streaming checks.

Why not the benchmark's client: that one times a stream and forgives its shape; the
acceptance check judges the shape itself — every event framed as ``data: ...`` and ended
by a blank line, every payload JSON, exactly one ``[DONE]`` and nothing after it,
``usage`` in the last chunk when asked — and it gathers what the checks read: content,
reasoning content and tool calls (their argument pieces joined per index).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class StreamedChat:
    """What a stream carried, and the first framing problem found (None: well-formed)."""

    content: str = ""
    reasoning: str = ""
    tool_calls: dict[int, dict[str, str]] = field(default_factory=dict)
    chunks: list[Mapping[str, Any]] = field(default_factory=list)
    done_markers: int = 0
    problem: str | None = None

    def fail(self, problem: str) -> None:
        if self.problem is None:
            self.problem = problem

    def take(self, data: Mapping[str, Any]) -> None:
        self.chunks.append(data)
        for choice in data.get("choices") or ():
            delta = choice.get("delta") or {}
            self.content += delta.get("content") or ""
            self.reasoning += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls") or ():
                entry = self.tool_calls.setdefault(
                    int(call.get("index", 0)), {"name": "", "arguments": ""}
                )
                function = call.get("function") or {}
                entry["name"] += function.get("name") or ""
                entry["arguments"] += function.get("arguments") or ""


def _event_payloads(text: str, stream: StreamedChat) -> list[str]:
    if not text.endswith("\n\n"):
        stream.fail("the stream does not end with a blank line (an event cut off)")
    payloads = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        if not all(line.startswith("data:") for line in lines):
            stream.fail(f"an event is not framed as 'data: ...': {block[:60]!r}")
            continue
        payloads.append("\n".join(line[len("data:") :].strip() for line in lines))
    return payloads


def read_stream(text: str, *, usage_expected: bool) -> StreamedChat:
    """Parse a whole SSE body and judge its framing."""
    stream = StreamedChat()
    for payload in _event_payloads(text, stream):
        if payload == "[DONE]":
            stream.done_markers += 1
            continue
        if stream.done_markers:
            stream.fail("data after [DONE]")
        try:
            data = json.loads(payload)
        except ValueError:
            stream.fail(f"a chunk is not JSON: {payload[:60]!r}")
            continue
        if not isinstance(data, Mapping):
            stream.fail("a chunk is not a JSON object")
        elif "error" in data:
            stream.fail(f"an error inside the stream: {str(data['error'])[:120]}")
        else:
            stream.take(data)
    if stream.done_markers != 1:
        stream.fail(f"expected exactly one [DONE], got {stream.done_markers}")
    if usage_expected and not (
        stream.chunks and isinstance(stream.chunks[-1].get("usage"), Mapping)
    ):
        stream.fail("no usage in the last chunk although stream_options.include_usage was set")
    return stream
