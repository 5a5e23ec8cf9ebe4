"""``spec.engine`` against the pinned SGLang (0.5.23): parser names and owned flags.

The parser enums are copied into the API so ``kubectl explain`` lists them and the API
server refuses a typo; this test compares them with sglang's own lists, read from the
files of the pinned sglang the dev virtualenv installs (no deps, never imported). The
owned-flag rule is compared with the flag table the renderer extracts from the same wheel
(``sparkllm/sglang_contract/sglang_flags.json``).
"""

from __future__ import annotations

import ast
import json
from importlib import resources
from typing import Any, get_args

import pytest

from sparkllm.api import OPERATOR_OWNED_FLAGS, validate_inference_cluster
from sparkllm.errors import SpecError
from sparkllm.sglang_contract.fields import ReasoningParser, ToolCallParser
from sparkllm_dev.ci import unavailable
from sparkllm_dev.flags.extract import read_installed_sources
from tests.fixtures.invalid import apply_changes, load_base_manifest


def _wheel_list(member: str, variable: str) -> list[str]:
    """A list literal from the pinned sglang's files, as the dev virtualenv installs them."""
    try:
        sources = read_installed_sources("0.5.23")
    except SpecError as exc:
        unavailable(str(exc))
    tree = ast.parse(sources[member])
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == variable for target in statement.targets
        ):
            names: list[str] = ast.literal_eval(statement.value)
            return names
    raise AssertionError(f"{variable} not found in {member}")


def test_tool_call_parsers_are_sglangs() -> None:
    names = _wheel_list("sglang/srt/function_call/parser_names.py", "TOOL_CALL_PARSER_NAMES")
    assert list(get_args(ToolCallParser)) == ["auto", *names]


def test_reasoning_parsers_are_sglangs() -> None:
    names = _wheel_list("sglang/srt/parser/reasoning_parser_names.py", "REASONING_PARSER_NAMES")
    assert list(get_args(ReasoningParser)) == ["auto", *names]


def _sglang_flags() -> set[str]:
    table: dict[str, Any] = json.loads(
        resources.files("sparkllm.sglang_contract").joinpath("sglang_flags.json").read_text()
    )
    assert table["sglang_version"] == "0.5.23"
    names: set[str] = set()
    for flag in table["flags"]:
        names.add(flag["name"])
        names.update(flag["aliases"])
        names.update(flag.get("negations") or [])
    return names


def test_owned_flags_exist_in_sglang() -> None:
    assert set(OPERATOR_OWNED_FLAGS) <= _sglang_flags()


def test_no_other_sglang_flag_is_refused_as_an_abbreviation() -> None:
    # extraArgs refuses any flag name that prefixes an owned flag (argparse abbreviations);
    # that must not catch a real flag the operator does not own.
    caught = [
        flag
        for flag in _sglang_flags() - set(OPERATOR_OWNED_FLAGS)
        if any(owned.startswith(flag) for owned in OPERATOR_OWNED_FLAGS)
    ]
    assert caught == []


@pytest.mark.parametrize(
    ("args", "accepted"),
    [
        (["--log-level", "debug"], True),
        (["--model-impl", "sglang"], True),
        (["--enable-metrics-for-all-schedulers"], True),
        (["--watchdog-timeout=600"], True),
        (["--mem-frac", "0.9"], False),
        (["--pp", "2"], False),
        (["--port=30001"], False),
        (["--model", "/other"], False),
        (["--"], False),
    ],
)
def test_extra_args_rule(args: list[str], accepted: bool) -> None:
    manifest = apply_changes(
        load_base_manifest(), set_values={"spec.engine.extraArgs": args}, delete=[]
    )
    if accepted:
        validate_inference_cluster(manifest)
    else:
        with pytest.raises(SpecError, match=r"spec\.engine\.extraArgs: extraArgs must not set"):
            validate_inference_cluster(manifest)
