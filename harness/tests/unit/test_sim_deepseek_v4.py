"""The simulator's DeepSeek V4 output: the pinned SGLang's markers, parsed as its parsers do."""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from sparkllm_dev.sim.deepseek_v4 import (
    DSML,
    THINK_END,
    TOOL_CALLS_END,
    TOOL_CALLS_START,
    Parsers,
    ToolSpec,
    first_tool,
    fit_length,
    known_answer,
    parse_output,
    parse_tool_calls,
    raw_pieces,
    thinking_requested,
    tool_call_text,
)

TOOL = ToolSpec(name="get_weather", parameters=(("city", "string"), ("days", "integer")))


def sglang_source(path: str) -> str:
    return metadata.distribution("sglang").locate_file(path).read_text(encoding="utf-8")


def test_markers_are_the_pinned_sglang_parsers() -> None:
    reasoning = sglang_source("sglang/srt/parser/reasoning_parser.py")
    assert f'DSV4_THINK_END_TOKEN = "{THINK_END}"' in reasoning
    assert f'DSV4_DSML_TOKEN = "{DSML}"' in reasoning
    assert '"deepseek-v4": DeepSeekV4Detector' in reasoning
    v32 = sglang_source("sglang/srt/function_call/deepseekv32_detector.py")
    assert f'dsml_token = "{DSML}"' in v32
    v4 = sglang_source("sglang/srt/function_call/deepseekv4_detector.py")
    assert 'tool_calls_block_name = "tool_calls"' in v4
    assert TOOL_CALLS_START in v4
    assert TOOL_CALLS_END in v4
    parameter = f'<{DSML}parameter name="city" string="true">San Francisco</{DSML}parameter>'
    assert parameter in v4


def test_a_tool_call_round_trips_and_a_malformed_one_stays_content() -> None:
    text = tool_call_text(TOOL)
    content, calls = parse_tool_calls("Let me check." + text)
    assert content == "Let me check."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris", "days": 1})
    ]
    broken = tool_call_text(TOOL, malformed=True)
    assert parse_tool_calls(broken) == (broken, ())
    json_body = (
        f'{TOOL_CALLS_START}<{DSML}invoke name="f">{{"a": 1}}</{DSML}invoke>{TOOL_CALLS_END}'
    )
    assert parse_tool_calls(json_body)[1][0].arguments == '{"a": 1}'


@pytest.mark.parametrize(
    ("parsers", "reasoning", "content_has_markers"),
    [(Parsers(reasoning=True, tools=True), "r1 r2", False), (Parsers(False, False), "", True)],
)
def test_output_is_split_only_by_configured_parsers(
    parsers: Parsers, reasoning: str, content_has_markers: bool
) -> None:
    raw = raw_pieces(answer=["a"], reasoning=["r1", " r2"], thinking=True, tool=TOOL, faults=())
    output = parse_output(raw, thinking=True, parsers=parsers, finish_reason="stop")
    assert "".join(output.reasoning) == reasoning
    assert (TOOL_CALLS_START in "".join(output.content)) is content_has_markers
    assert output.completion_tokens == len(raw)
    assert output.finish_reason == ("stop" if content_has_markers else "tool_calls")


def test_request_switches_and_known_answers() -> None:
    assert thinking_requested({"chat_template_kwargs": {"thinking": True}})
    assert thinking_requested({"reasoning_effort": "high"})
    assert not thinking_requested({"chat_template_kwargs": {"thinking": False}})
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    assert first_tool({"tools": tools}) == ToolSpec(name="f", parameters=())
    assert first_tool({"tools": tools, "tool_choice": "none"}) is None
    assert known_answer("What is 6 times 7? Answer with the number only.") == "The answer is 42."
    assert known_answer("What is 2+2?") is None


@pytest.mark.parametrize(
    ("max_tokens", "ignore_eos", "expected", "reason"),
    [
        (None, False, ["r", "</think>", "a"], "stop"),
        (2, False, ["r", "</think>"], "length"),
        (3, True, ["r", "</think>", "a"], "length"),
        (5, True, ["r", "</think>", "a", " x", " y"], "length"),
        (5, False, ["r", "</think>", "a"], "stop"),
    ],
)
def test_max_tokens_counts_reasoning_and_ignore_eos_fills_to_it(
    max_tokens: int | None, ignore_eos: bool, expected: list[str], reason: str
) -> None:
    pieces, finish = fit_length(
        ["r", THINK_END, "a"], filler=["x", " y"], max_tokens=max_tokens, ignore_eos=ignore_eos
    )
    assert (pieces, finish) == (expected, reason)
