"""The start-stage markers are SGLang 0.5.23's own log statements, read from the wheel.

``sparkllm.sglang_contract.start_log`` turns a rank's log into a stage. Each marker names
the wheel file that writes its line; here that file is parsed (not imported: the dev venv
holds sglang without its dependencies), every logger call's message and every progress
bar's text is rendered (an f-string's values become ``X``; a bar's ``desc`` goes through
SGLang's own ``BAR_FORMAT`` from ``srt/utils/common.py``), and the marker must match one
of them — so a new pin that rewords a line fails here. The parser is then run on a start
as the wheel's statements print it, in the order a real start does.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path

import pytest

from sparkllm.sglang_contract.start_log import (
    FIRED_UP,
    MARKERS,
    SHARDS_DESC,
    LogMarker,
    StartStage,
    read_start_log,
)

_LOG_METHODS = {"info", "warning", "debug", "error"}


def _wheel_root() -> Path:
    spec = importlib.util.find_spec("sglang")  # finds the package without importing it
    assert spec is not None
    assert spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def _render(node: ast.expr) -> str | None:
    """A string expression's text, each f-string value as ``X`` (``{bs=}`` keeps ``bs=``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                parts.append("X")
        return "".join(parts)
    return None


@cache
def _bar_format() -> str:
    """SGLang's ``BAR_FORMAT`` (srt/utils/common.py), as the wheel defines it."""
    tree = ast.parse((_wheel_root() / "srt/utils/common.py").read_text("utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == [
            "BAR_FORMAT"
        ]:
            text = _render(node.value)
            assert text is not None
            return text
    raise AssertionError("no BAR_FORMAT in srt/utils/common.py")


def _is_log_call(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _LOG_METHODS:
        return ast.unparse(func.value) == "logger"
    return isinstance(func, ast.Name) and func.id == "log_info_on_rank0"


@cache
def _statements(source: str) -> dict[str, tuple[str, ...]]:
    """The file's rendered logger messages and progress-bar lines, by kind."""
    tree = ast.parse((_wheel_root() / source).read_text("utf-8"))
    logged: list[str] = []
    bars: list[str] = []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        if _is_log_call(call):
            message = call.args[1] if ast.unparse(call.func) == "log_info_on_rank0" else None
            text = _render(message if message is not None else call.args[0])
            if text is not None:
                logged.append(text)
        name = ast.unparse(call.func)
        if name == "tqdm" or name.endswith(".set_description"):
            desc = next((k.value for k in call.keywords if k.arg == "desc"), None)
            desc = desc if desc is not None else (call.args[0] if name != "tqdm" else None)
            text = None if desc is None else _render(desc)
            bar = next((ast.unparse(k.value) for k in call.keywords if k.arg == "bar_format"), "")
            if text is not None:
                bars.append(text)
                if bar == "BAR_FORMAT":
                    bars.append(
                        _bar_format().format(
                            desc=text,
                            percentage=26,
                            n_fmt="12",
                            total_fmt="46",
                            elapsed="00:41",
                            remaining="01:37",
                            rate_fmt="3.42s/it",
                        )
                    )
    return {"logger": tuple(logged), "tqdm": tuple(bars)}


@pytest.mark.parametrize("marker", MARKERS, ids=lambda m: f"{m.stage}:{m.pattern.pattern}")
def test_each_marker_is_a_statement_of_the_pinned_wheel(marker: LogMarker) -> None:
    statements = _statements(marker.source)[marker.kind]
    matching = [text for text in statements if marker.pattern.search(text)]
    assert matching, f"no {marker.kind} statement in sglang/{marker.source} matches {marker}"
    assert marker.pattern.search(marker.example), "the marker's example must match it too"


def test_the_shard_bar_is_the_safetensors_loader_with_sglang_bar_format() -> None:
    bars = _statements("srt/model_loader/weight_utils.py")["tqdm"]
    line = f"{SHARDS_DESC}:  26% Completed | 12/46 [00:41<01:37, 3.42s/it]"
    assert line in bars  # desc + BAR_FORMAT, formatted as tqdm does
    reading = read_start_log([line], rank=0)
    assert reading is not None
    assert reading.shards == "12/46"


def test_a_start_reads_stage_by_stage() -> None:
    """A start as the wheel prints it (examples in the order SGLang writes them)."""
    examples = {m.pattern.pattern: m.example for m in MARKERS}
    begin, shards, end, pool, jit, graph, batches, captured, fired = examples.values()
    log = ["[2026-12-02 11:00:00] server_args not shown", begin]
    reading = read_start_log(log, rank=0)
    assert reading is not None
    assert (reading.stage, reading.shards) == (StartStage.LOADING_WEIGHTS, None)
    log.append(shards.replace("12/46", "1/46") + "\r" + shards)  # tqdm's in-place update
    reading = read_start_log(log, rank=0)
    assert reading is not None
    assert reading.shards == "12/46"
    expected = [
        (end, StartStage.ALLOCATING_KV_CACHE),
        (pool, StartStage.KERNEL_CAPTURE),
        (jit, StartStage.KERNEL_CAPTURE),
        (graph, StartStage.KERNEL_CAPTURE),
        (batches, StartStage.KERNEL_CAPTURE),
        (captured, StartStage.WARMING_UP),
        (fired, StartStage.READY),
    ]
    for line, stage in expected:
        log.append(f"[2026-12-02 11:03:00 TP0] {line}")
        reading = read_start_log(log, rank=0)
        assert reading is not None, line
        assert reading.stage is stage, line
    assert FIRED_UP in fired
    # a rank > 0 serves nothing: its graphs captured, it is ready (no "fired up" line)
    worker = read_start_log(log[:-1], rank=1)
    assert worker is not None
    assert worker.stage is StartStage.READY
    assert read_start_log(["nothing to see"], rank=0) is None


def test_a_restart_appended_to_the_old_log_reads_as_the_new_start() -> None:
    examples = [m.example for m in MARKERS]
    log = [*examples, examples[0]]  # a whole start, then the next one's "Load weight begin."
    reading = read_start_log(log, rank=0)
    assert reading is not None
    assert reading.stage is StartStage.LOADING_WEIGHTS
    assert reading.shards is None  # the old start's count is not this one's
