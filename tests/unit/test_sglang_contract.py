"""The SGLang contract's one table: spec path -> flag -> server_info key, against the pinned SGLang.

The table is what the API (owned flags, parser enums), the renderer (argv) and the
ConfigApplied check share; these tests hold it to the pinned flag table and to the spec
models, and hold the renderer to the table.
"""

from __future__ import annotations

from typing import Any, get_args

import pytest
from pydantic import BaseModel

from sparkllm.api import InferenceClusterSpec
from sparkllm.configcheck import expected_settings
from sparkllm.sglang_contract.argv import flag_name
from sparkllm.sglang_contract.command import engine_args
from sparkllm.sglang_contract.fields import (
    LAUNCH_FIELDS,
    OPERATOR_OWNED_FLAGS,
    ReasoningParser,
    ToolCallParser,
)
from sparkllm.sglang_contract.flags import flag_spec, flag_table
from tests.unit.test_configcheck import sample_spec

OPERATOR_SOURCE = "operator: "


def _resolves(model: type[BaseModel], path: list[str]) -> bool:
    """Whether ``path`` (camelCase names, as in a manifest) names a field of ``model``."""
    by_alias = {field.alias or name: field for name, field in model.model_fields.items()}
    field = by_alias.get(path[0])
    if field is None:
        return False
    if len(path) == 1:
        return True
    nested = next(
        (arg for arg in (field.annotation, *get_args(field.annotation)) if _is_model(arg)), None
    )
    return nested is not None and _resolves(nested, path[1:])


def _is_model(candidate: object) -> bool:
    return isinstance(candidate, type) and issubclass(candidate, BaseModel)


@pytest.mark.parametrize("field", LAUNCH_FIELDS, ids=lambda field: field.flag)
def test_every_row_names_a_pinned_flag_and_its_server_info_key(field: Any) -> None:
    spec = flag_spec(field.flag)  # raises for a flag the pinned SGLang does not have
    assert spec.name == field.flag, "rows use the canonical spelling"
    assert field.server_info_key == spec.dest
    assert spec.dest in flag_table().field_defaults or not spec.has_default


@pytest.mark.parametrize("field", LAUNCH_FIELDS, ids=lambda field: field.flag)
def test_every_row_names_its_spec_path(field: Any) -> None:
    if field.source.startswith(OPERATOR_SOURCE):
        return
    # A product of fields ("spec.engine.tensorParallel x spec.engine.pipelineParallel"):
    # every factor must be a spec field.
    for source in field.source.split(" x "):
        head, *path = source.split(".")
        assert head == "spec"
        assert _resolves(InferenceClusterSpec, path), f"{source} is not a spec field"


def test_each_flag_appears_once() -> None:
    flags = [field.flag for field in LAUNCH_FIELDS]
    assert len(flags) == len(set(flags))


def test_owned_flags_are_the_table_with_its_aliases() -> None:
    spellings = {flag_spec(field.flag).name for field in LAUNCH_FIELDS}
    spellings |= {alias for field in LAUNCH_FIELDS for alias in flag_spec(field.flag).aliases}
    assert set(OPERATOR_OWNED_FLAGS) == spellings


def test_parser_enums_are_the_pinned_choices() -> None:
    assert get_args(ToolCallParser) == flag_spec("--tool-call-parser").choices
    assert get_args(ReasoningParser) == flag_spec("--reasoning-parser").choices
    assert "deepseekv4" in get_args(ToolCallParser)
    assert "deepseek-v4" in get_args(ReasoningParser)


VARIANTS: dict[str, dict[str, Any]] = {
    "sample": {},
    "no-parsers": {"toolCallParser": None, "reasoningParser": None},
    "other-numbers": {"memFractionStatic": 0.5, "contextLength": 16384, "maxRunningRequests": 2},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("rank", [0, 1])
def test_every_flag_the_renderer_emits_is_in_the_table(variant: str, rank: int) -> None:
    spec = sample_spec(**VARIANTS[variant])
    args = engine_args(spec, rank=rank, rank0_ip="10.0.0.10")
    emitted = {name for name in map(flag_name, args) if name is not None}
    assert emitted <= {field.flag for field in LAUNCH_FIELDS} | set(OPERATOR_OWNED_FLAGS)
    if variant == "no-parsers":
        assert "--tool-call-parser" not in emitted


def test_the_check_expects_one_value_per_row_with_its_source() -> None:
    expected = expected_settings(sample_spec(), rank0_address="10.0.0.10")
    for field in LAUNCH_FIELDS:
        if field.secret:
            assert field.server_info_key not in expected
            continue
        assert expected[field.server_info_key].source == field.source
    assert expected["mem_fraction_static"].value == 0.57
    assert expected["cuda_graph_max_bs_decode"].source == "spec.engine.cudaGraphMaxBatchSize"
    assert expected["dist_init_addr"].value == "10.0.0.10:5000"


def test_a_float_flag_given_an_integer_expects_a_float() -> None:
    # SGLang's argparse stores type=float: --watchdog-timeout 600 is reported as 600.0.
    expected = expected_settings(sample_spec(extraArgs=["--watchdog-timeout", "600"]))
    assert expected["watchdog_timeout"].value == 600.0
    assert isinstance(expected["watchdog_timeout"].value, float)
    assert expected["watchdog_timeout"].source == "spec.engine.extraArgs"
