"""Acceptance point 3's checks against the simulator: each passes on a healthy engine and
fails, naming why, when the simulator breaks the one thing it checks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from sparkllm.bench.accept.functional import (
    FUNCTIONAL_CHECKS,
    Probe,
    check_deterministic,
    check_reasoning,
    check_streaming,
    check_tool_call,
    check_unsupported_tools_refused,
)
from sparkllm.bench.accept.rows import Row
from sparkllm.bench.accept.sse import read_stream
from tests.unit.accept_sim import KEY, MODEL, served

Check = Callable[[Probe], Awaitable[Row]]


def run_check(
    tmp_path: Path, check: Check, *, faults: tuple[str, ...] = (), front_door: bool = True
) -> Row:
    async def go(client: httpx.AsyncClient) -> Row:
        probe = Probe(client=client, model=MODEL, headers={"Authorization": f"Bearer {KEY}"})
        return await check(probe)

    with served(tmp_path, faults=faults, front_door=front_door) as run:
        return run(go)


@pytest.mark.parametrize("check", FUNCTIONAL_CHECKS)
def test_every_check_passes_on_a_healthy_engine(tmp_path: Path, check: Check) -> None:
    row = run_check(tmp_path, check)
    assert (row.verdict, row.detail) == ("pass", "")
    assert row.basis


@pytest.mark.parametrize(
    ("check", "fault", "why"),
    [
        (check_deterministic, "nondeterministic", "the two answers differ"),
        (check_streaming, "broken-stream", "expected exactly one [DONE], got 0"),
        (check_reasoning, "no-reasoning", "reasoning content absent although thinking was on"),
        (check_tool_call, "malformed-tool-call", "no tool_calls in the answer"),
    ],
)
def test_a_simulator_fault_fails_its_check_naming_why(
    tmp_path: Path, check: Check, fault: str, why: str
) -> None:
    row = run_check(tmp_path, check, faults=(fault,))
    assert row.verdict == "fail"
    assert why in row.detail


def test_without_the_front_door_strict_and_required_are_not_refused(tmp_path: Path) -> None:
    row = run_check(tmp_path, check_unsupported_tools_refused, front_door=False)
    assert row.verdict == "fail"
    assert "strict function: answered HTTP 200, not refused" in row.detail
    assert "tool_choice 'required': answered HTTP 200, not refused" in row.detail


def test_the_expected_answer_is_read(tmp_path: Path) -> None:
    async def expecting_43(probe: Probe) -> Row:
        wrong = Probe(client=probe.client, model=MODEL, headers=probe.headers, expected="43")
        return await check_deterministic(wrong)

    row = run_check(tmp_path, expecting_43)
    assert row.verdict == "fail"
    assert "expected '43' not in the answer 'The answer is 42." in row.detail


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('data: {"choices": []}\n\n', "expected exactly one [DONE], got 0"),
        ('data: {"choices": []}\n\ndata: [DONE]\n\ndata: [DONE]\n\n', "got 2"),
        ("data: [DONE]\n\ndata: {}\n\n", "data after [DONE]"),
        ("event: x\n\ndata: [DONE]\n\n", "not framed as 'data: ...'"),
        ("data: {oops\n\ndata: [DONE]\n\n", "a chunk is not JSON"),
        ('data: {"choices": []}\n\ndata: [DONE]', "does not end with a blank line"),
    ],
)
def test_stream_framing_problems_are_named(text: str, why: str) -> None:
    assert why in (read_stream(text, usage_expected=False).problem or "")


def test_usage_must_be_in_the_last_chunk_when_asked() -> None:
    text = 'data: {"choices": [], "usage": null}\n\ndata: [DONE]\n\n'
    assert "no usage in the last chunk" in (read_stream(text, usage_expected=True).problem or "")
    assert read_stream(text, usage_expected=False).problem is None
