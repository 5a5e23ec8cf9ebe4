"""Acceptance point 3, "real generation": five checks that read the answers, not the status.

Why each check: the documents accepted the deployment only after a deterministic question
was answered correctly and identically, streams were well-formed, reasoning appeared only
when asked for, a basic function call came back as ``tool_calls``, and the tool-calling
forms production does not support (strict / required) were refused by the front door.
Each check returns a :class:`Row` whose detail names what was wrong, so a failure is
actionable. Thinking is switched with ``chat_template_kwargs.thinking`` (DeepSeek V4's
template switch, which the front door passes and counts).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import httpx

from sparkllm.bench.accept.rows import Row, verdict
from sparkllm.bench.accept.sse import StreamedChat, read_stream

CHAT_PATH: Final = "/v1/chat/completions"
SECTION: Final = "functional"
WEATHER_FUNCTION: Final[dict[str, Any]] = {
    "name": "get_weather",
    "description": "Current weather of a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "city name"}},
        "required": ["city"],
    },
}
WEATHER_TOOL: Final[dict[str, Any]] = {"type": "function", "function": WEATHER_FUNCTION}


@dataclass(frozen=True, slots=True)
class Probe:
    """Where the checks send their requests, and the deterministic question."""

    client: httpx.AsyncClient
    model: str
    headers: Mapping[str, str]
    question: str = "What is 6 times 7? Answer with the number only."
    expected: str = "42"
    max_tokens: int = 64

    def body(self, content: str, **extra: Any) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": self.max_tokens,
            "temperature": 0,
            **extra,
        }

    async def post(self, body: Mapping[str, Any]) -> httpx.Response:
        return await self.client.post(CHAT_PATH, json=dict(body), headers=dict(self.headers))

    async def stream(self, body: Mapping[str, Any]) -> tuple[int, StreamedChat | str]:
        """(status, the parsed stream) or (status, the error text)."""
        reply = await self.post({**body, "stream": True})
        if reply.status_code != 200:
            return reply.status_code, reply.text[:200]
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return 200, read_stream(reply.text, usage_expected=usage)


def _row(name: str, *, basis: str, problems: Sequence[str | None]) -> Row:
    """pass without problems, else fail naming them (None entries are no problem)."""
    found = [problem for problem in problems if problem]
    return Row(
        section=SECTION, name=name, verdict=verdict(not found), basis=basis, detail="; ".join(found)
    )


def _message(reply: httpx.Response) -> Mapping[str, Any] | str:
    """The first choice's message, or why there is none."""
    if reply.status_code != 200:
        return f"HTTP {reply.status_code}: {reply.text[:200]}"
    try:
        message = reply.json()["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return f"no choices[0].message in the answer: {reply.text[:200]}"
    return message if isinstance(message, Mapping) else "choices[0].message is not an object"


async def check_deterministic(probe: Probe) -> Row:
    basis = f"{probe.question!r} at temperature 0, asked twice; must contain {probe.expected!r}"
    answers = []
    for _ in range(2):
        message = _message(await probe.post(probe.body(probe.question)))
        if isinstance(message, str):
            return _row("deterministic answer", basis=basis, problems=[message])
        answers.append(str(message.get("content") or ""))
    if answers[0] != answers[1]:
        detail = f"the two answers differ: {answers[0][:80]!r} vs {answers[1][:80]!r}"
        return _row("deterministic answer", basis=basis, problems=[detail])
    found = probe.expected in answers[0]
    detail = "" if found else f"expected {probe.expected!r} not in the answer {answers[0][:80]!r}"
    return _row("deterministic answer", basis=basis, problems=[None if found else detail])


async def check_streaming(probe: Probe) -> Row:
    basis = "stream with include_usage: data: framing, one [DONE] last, usage in the last chunk"
    body = probe.body(
        "Describe a pipeline in one sentence.", stream_options={"include_usage": True}
    )
    status, stream = await probe.stream(body)
    if isinstance(stream, str):
        return _row("streaming", basis=basis, problems=[f"HTTP {status}: {stream}"])
    if stream.problem is None and not stream.content:
        stream.fail("the stream carried no content")
    return _row("streaming", basis=basis, problems=[stream.problem])


async def check_reasoning(probe: Probe) -> Row:
    basis = "chat_template_kwargs.thinking true: reasoning_content present; false: absent"
    problems = []
    for thinking in (True, False):
        body = probe.body(probe.question, chat_template_kwargs={"thinking": thinking})
        status, stream = await probe.stream(body)
        if isinstance(stream, str):
            problems.append(f"thinking {thinking}: HTTP {status}: {stream}")
        elif stream.problem is not None:
            problems.append(f"thinking {thinking}: {stream.problem}")
        elif thinking and not stream.reasoning.strip():
            problems.append("reasoning content absent although thinking was on")
        elif not thinking and stream.reasoning:
            problems.append(
                f"reasoning content present with thinking off: {stream.reasoning[:60]!r}"
            )
    return _row("reasoning", basis=basis, problems=problems)


def _tool_call_problem(message: Mapping[str, Any]) -> str | None:
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        content = str(message.get("content") or "")[:80]
        return f"no tool_calls in the answer (content: {content!r})"
    function = calls[0].get("function") if isinstance(calls[0], Mapping) else None
    if not isinstance(function, Mapping) or function.get("name") != "get_weather":
        return f"the call names {function and function.get('name')!r}, not 'get_weather'"
    try:
        arguments = json.loads(function.get("arguments") or "")
    except ValueError:
        return f"arguments are not valid JSON: {str(function.get('arguments'))[:80]!r}"
    if not isinstance(arguments, Mapping) or not isinstance(arguments.get("city"), str):
        return f"arguments lack the required string 'city': {arguments!r}"
    return None


async def check_tool_call(probe: Probe) -> Row:
    basis = "one function (get_weather, city: string), tool_choice auto: a parsed tool_calls entry"
    body = probe.body("What is the weather in Paris?", tools=[WEATHER_TOOL], tool_choice="auto")
    message = _message(await probe.post(body))
    problem = message if isinstance(message, str) else _tool_call_problem(message)
    return _row("function call", basis=basis, problems=[problem])


async def check_unsupported_tools_refused(probe: Probe) -> Row:
    basis = "a strict function and tool_choice 'required' each refused with HTTP 400 and a message"
    strict_tool = {"type": "function", "function": {**WEATHER_FUNCTION, "strict": True}}
    forms = {
        "strict function": probe.body("Weather in Paris?", tools=[strict_tool]),
        "tool_choice 'required'": probe.body(
            "Weather in Paris?", tools=[WEATHER_TOOL], tool_choice="required"
        ),
    }
    problems = []
    for name, body in forms.items():
        reply = await probe.post(body)
        if reply.status_code != 400:
            problems.append(f"{name}: answered HTTP {reply.status_code}, not refused")
            continue
        error = (
            reply.json().get("error") if "json" in reply.headers.get("content-type", "") else None
        )
        text = str(error.get("message", "")) if isinstance(error, Mapping) else ""
        if "not supported" not in text:
            problems.append(f"{name}: refused without a clear message ({reply.text[:120]!r})")
    return _row("unsupported tool forms refused", basis=basis, problems=problems)


FUNCTIONAL_CHECKS: Final[tuple[Callable[[Probe], Awaitable[Row]], ...]] = (
    check_deterministic,
    check_streaming,
    check_reasoning,
    check_tool_call,
    check_unsupported_tools_refused,
)
