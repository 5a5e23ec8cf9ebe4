"""DeepSeek V4's raw output, and SGLang's parsing of it, so acceptance checks mean something.

Why: the documents' acceptance point 3 ("real generation") checks reasoning content and
tool calls. A simulator that answered in plain words could only pass or fail those checks
by accident; this one writes what DeepSeek V4 writes and parses it as the pinned SGLang
does, so a broken format or a missing parser flag shows as a failed check. The markers are
those of SGLang 0.5.23's parsers (``srt/parser/reasoning_parser.py``:
``DSV4_THINK_END_TOKEN``; ``srt/function_call/deepseekv4_detector.py`` with the DSML tags
of ``deepseekv32_detector.py``, block name ``tool_calls``):

- thinking on: the chat template opens ``<think>`` in the prompt, so the model's output is
  reasoning, ``</think>``, then the answer; the ``deepseek-v4`` reasoning parser moves the
  part before ``</think>`` into ``reasoning_content``. Thinking off: the template closes
  the block itself and the output is the answer only.
- a tool call: a ``tool_calls`` block holding ``invoke name="f"`` holding ``parameter
  name="p" string="true"`` tags, each tag written ``<`` + DSML marker + name (the marker is
  "DSML" between two FULLWIDTH VERTICAL LINEs, U+FF5C); the ``deepseekv4`` tool parser
  turns it into ``tool_calls`` with JSON arguments. Text it cannot parse stays in
  ``content`` (no ``tool_calls``), as SGLang leaves it.

Without the parser flag on the engine the raw markers reach ``content``, as they would.
Faults (``--sim-fault``) break one thing each, for the acceptance checks' own tests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

THINK_END: Final = "</think>"
DSML: Final = "\uff5cDSML\uff5c"
TOOL_CALLS_START: Final = f"<{DSML}tool_calls>"
TOOL_CALLS_END: Final = f"</{DSML}tool_calls>"
INVOKE_END: Final = f"</{DSML}invoke>"
PARAMETER_END: Final = f"</{DSML}parameter>"

Fault = Literal["nondeterministic", "broken-stream", "no-reasoning", "malformed-tool-call"]
FAULTS: Final[tuple[Fault, ...]] = (
    "nondeterministic",
    "broken-stream",
    "no-reasoning",
    "malformed-tool-call",
)

_ARITHMETIC = re.compile(r"what is (\d{1,6}) (plus|times|minus) (\d{1,6})\?", re.IGNORECASE)
_INVOKE = re.compile(rf"<{DSML}invoke name=\"([^\"]+)\">(.*?){re.escape(INVOKE_END)}", re.DOTALL)
_PARAMETER = re.compile(
    rf"<{DSML}parameter name=\"([^\"]+)\" string=\"(true|false)\">(.*?){re.escape(PARAMETER_END)}",
    re.DOTALL,
)


def known_answer(prompt: str) -> str | None:
    """The simulator's only knowledge: small arithmetic ("What is 6 times 7?")."""
    match = _ARITHMETIC.search(prompt)
    if match is None:
        return None
    left, operator, right = int(match.group(1)), match.group(2).lower(), int(match.group(3))
    value = {"plus": left + right, "times": left * right, "minus": left - right}[operator]
    return f"The answer is {value}."


def thinking_requested(body: Mapping[str, Any]) -> bool:
    """Thinking on, as V4's template reads it: template kwargs or a reasoning effort."""
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, Mapping) and any(
        kwargs.get(key) is True for key in ("thinking", "enable_thinking")
    ):
        return True
    effort = body.get("reasoning_effort")
    return isinstance(effort, str) and effort not in ("", "none")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """The first function a request offers: its name and required parameters' types."""

    name: str
    parameters: tuple[tuple[str, str], ...]


def first_tool(body: Mapping[str, Any]) -> ToolSpec | None:
    """The tool the simulated model calls, or None (no tools, or tool_choice "none")."""
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools or body.get("tool_choice") == "none":
        return None
    function = tools[0].get("function") if isinstance(tools[0], Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        return None
    schema = function.get("parameters")
    schema = schema if isinstance(schema, Mapping) else {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    required = schema.get("required")
    names = required if isinstance(required, list) else list(properties)
    parameters = tuple(
        (str(name), str((properties.get(name) or {}).get("type", "string"))) for name in names
    )
    return ToolSpec(name=function["name"], parameters=parameters)


def _value(kind: str) -> tuple[str, bool]:
    """(text, is_string) of a parameter's sample value."""
    samples = {"integer": "1", "number": "1.5", "boolean": "true", "array": "[]", "object": "{}"}
    return (samples[kind], False) if kind in samples else ("Paris", True)


def tool_call_text(tool: ToolSpec, *, malformed: bool = False) -> str:
    """The raw DSML block calling ``tool`` (or, for the fault, one cut off mid-parameter)."""
    lines = [TOOL_CALLS_START, f'<{DSML}invoke name="{tool.name}">']
    for name, kind in tool.parameters:
        text, is_string = _value(kind)
        flag = "true" if is_string else "false"
        lines.append(f'<{DSML}parameter name="{name}" string="{flag}">{text}{PARAMETER_END}')
    if malformed:
        return "\n".join(lines[:2]) + f'\n<{DSML}parameter name="'
    return "\n".join([*lines, INVOKE_END, TOOL_CALLS_END])


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """One entry of ``tool_calls``: the name and the arguments as a JSON string."""

    name: str
    arguments: str


def _arguments(body: str) -> str | None:
    body = body.strip()
    if body.startswith("{"):
        try:
            return json.dumps(json.loads(body), ensure_ascii=False)
        except ValueError:
            return None
    values: dict[str, Any] = {}
    for name, is_string, text in _PARAMETER.findall(body):
        if is_string == "true":
            values[name] = text
            continue
        try:
            values[name] = json.loads(text)
        except ValueError:
            return None
    return json.dumps(values, ensure_ascii=False)


def parse_tool_calls(text: str) -> tuple[str, tuple[ParsedCall, ...]]:
    """(content, calls) as the ``deepseekv4`` parser splits them; unparseable -> content."""
    start = text.find(TOOL_CALLS_START)
    end = text.find(TOOL_CALLS_END, start)
    if start < 0 or end < 0:
        return text, ()
    calls = []
    for name, body in _INVOKE.findall(text[start:end]):
        arguments = _arguments(body)
        if arguments is None:
            return text, ()
        calls.append(ParsedCall(name=name, arguments=arguments))
    if not calls:
        return text, ()
    return text[:start] + text[end + len(TOOL_CALLS_END) :], tuple(calls)


def split_reasoning(pieces: Sequence[str], *, thinking: bool) -> tuple[list[str], list[str]]:
    """(reasoning pieces, content pieces) as the ``deepseek-v4`` reasoning parser splits them.

    With thinking on the output is reasoning until ``</think>``; a stream that never closes
    the block is reasoning to the end, as SGLang's forced-reasoning detector reads it.
    """
    if not thinking:
        return [], list(pieces)
    if THINK_END not in pieces:
        return list(pieces), []
    cut = list(pieces).index(THINK_END)
    return list(pieces[:cut]), list(pieces[cut + 1 :])


@dataclass(frozen=True, slots=True)
class ChatOutput:
    """What the serving layer sends: the parsed channels, one piece per token."""

    reasoning: tuple[str, ...]
    content: tuple[str, ...]
    tool_calls: tuple[ParsedCall, ...]
    finish_reason: str
    completion_tokens: int


@dataclass(frozen=True, slots=True)
class Parsers:
    """Which of SGLang's output parsers the engine was started with."""

    reasoning: bool
    tools: bool


def _pieces(text: str) -> list[str]:
    words = text.split(" ")
    return [word if index == 0 else " " + word for index, word in enumerate(words)]


def raw_pieces(
    *,
    answer: Sequence[str],
    reasoning: Sequence[str],
    thinking: bool,
    tool: ToolSpec | None,
    faults: Sequence[str],
) -> list[str]:
    """The model's raw output tokens: [reasoning, </think>] then the answer or a tool call."""
    head: list[str] = []
    if thinking:
        head = [] if "no-reasoning" in faults else list(reasoning)
        head.append(THINK_END)
    if tool is None:
        return [*head, *answer]
    call = tool_call_text(tool, malformed="malformed-tool-call" in faults)
    return [*head, *(line if i == 0 else "\n" + line for i, line in enumerate(call.split("\n")))]


def parse_output(
    pieces: Sequence[str], *, thinking: bool, parsers: Parsers, finish_reason: str
) -> ChatOutput:
    """Split raw tokens as SGLang's configured parsers would (none: all is content)."""
    reasoning, content = split_reasoning(pieces, thinking=thinking and parsers.reasoning)
    calls: tuple[ParsedCall, ...] = ()
    if parsers.tools:
        rest, calls = parse_tool_calls("".join(content))
        if calls:
            content = [rest] if rest.strip() else []
    return ChatOutput(
        reasoning=tuple(reasoning),
        content=tuple(content),
        tool_calls=calls,
        finish_reason="tool_calls" if calls else finish_reason,
        completion_tokens=len(pieces),
    )


def known_pieces(prompt: str) -> list[str] | None:
    """The known answer to ``prompt`` as tokens, or None."""
    answer = known_answer(prompt)
    return None if answer is None else _pieces(answer)


def fit_length(
    pieces: Sequence[str], *, filler: Sequence[str], max_tokens: int | None, ignore_eos: bool
) -> tuple[list[str], str]:
    """(tokens, finish_reason) under SGLang's length rules: ``max_tokens`` cuts every
    generated token, reasoning and markup included (``length``); ``ignore_eos`` runs on
    to exactly ``max_tokens``, the extra tokens taken from ``filler``."""
    if max_tokens is None:
        return list(pieces), "stop"
    if len(pieces) > max_tokens or (ignore_eos and len(pieces) == max_tokens):
        return list(pieces[:max_tokens]), "length"
    if not ignore_eos or not filler:
        return list(pieces), "stop"
    missing = max_tokens - len(pieces)
    padding = [" " + filler[index % len(filler)].strip() for index in range(missing)]
    return [*pieces, *padding], "length"
