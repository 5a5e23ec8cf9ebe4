"""The settings table (gateway_settings.SETTINGS): every record of a setting agrees with its row.

A setting a spec sets and the gateway reads has five records — the API field (and the
CRD made from it), the variable the renderer writes, the gateway's config field, its
default and bounds in each — and a rule between settings (the input cap below the
window) has two checks, the API's and the gateway's. Each is made from the row; this
walks the table and proves it, by asking each consumer rather than reading the table
back: the API model and the CRD schema, ``admission_env`` of a spec setting a
non-default value, ``load_gateway_config`` of that env, the gateway's own bounds and
defaults, and both refusals of a spec breaking a relation. A new scalar field of
``spec.admission`` without a row fails the last test.
"""

from __future__ import annotations

import re
import typing
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from sparkllm.api import AdmissionSpec
from sparkllm.api.crd import build_openapi_schema
from sparkllm.api.spec import SPEC_RULES, InferenceClusterSpec
from sparkllm.errors import GatewayError, SpecError
from sparkllm.gateway.config import GatewayConfig, load_gateway_config
from sparkllm.gateway_settings import (
    CONTEXT_LENGTH,
    INPUT_BELOW_WINDOW,
    RELATIONS,
    SETTINGS,
    Setting,
    setting,
)
from sparkllm.render.gateway import admission_env
from tests.unit.test_gateway_config import REQUIRED_ENV
from tests.unit.test_render_gateway import ENGINE_KEY, cluster

ROWS = pytest.mark.parametrize("row", SETTINGS, ids=lambda row: row.field)
# spec.admission's fields that are no scalar setting: a reference, lists with shapes of
# their own (names checked against gateway_settings' lists), a nested section.
NOT_SCALAR = {"api_keys_secret_ref", "extensions", "governance", "tool_calling"}


def _api_field(row: Setting) -> FieldInfo:
    model: type[BaseModel] = InferenceClusterSpec
    *sections, name = row.attributes
    for section in sections:
        annotation = model.model_fields[section].annotation
        assert isinstance(annotation, type)
        assert issubclass(annotation, BaseModel)
        model = annotation
    return model.model_fields[name]


def _bounds(info: FieldInfo) -> tuple[int | None, int | None]:
    found: dict[str, Any] = {}
    for item in info.metadata:
        for bound in ("ge", "le"):
            if getattr(item, bound, None) is not None:
                found[bound] = getattr(item, bound)
    return found.get("ge"), found.get("le")


def _other_value(row: Setting) -> int | str:
    """A value within the bounds, not the default, breaking no relation."""
    if row.choices:
        return next(choice for choice in row.choices if choice != row.default)
    assert isinstance(row.default, int)
    return row.default + 1


def _env_of(**spec_changes: Any) -> dict[str, str]:
    env = admission_env(cluster(**spec_changes), engine_key=ENGINE_KEY)
    return {e["name"]: e["value"] for e in env if "value" in e}


@ROWS
def test_the_api_field_is_the_rows(row: Setting) -> None:
    info = _api_field(row)
    assert info.default == row.default
    assert info.description == row.description
    assert _bounds(info) == (row.minimum, row.maximum)
    if row.choices:
        assert typing.get_args(info.annotation) == row.choices
    schema = build_openapi_schema()["properties"]["spec"]
    for name in row.spec.split("."):
        schema = schema["properties"][name]
    assert (schema["default"], schema["description"]) == (row.default, row.description)
    assert (schema.get("minimum"), schema.get("maximum")) == (row.minimum, row.maximum)
    assert tuple(schema.get("enum", ())) == row.choices


@ROWS
def test_the_renderer_writes_the_rows_variable_and_the_gateway_reads_it_back(
    row: Setting,
) -> None:
    value = _other_value(row)
    section, name = row.spec.split(".")
    env = _env_of(**{f"{section}__{name}": value})
    assert env[row.env] == str(value)
    config = load_gateway_config([], environ={**env, **REQUIRED_ENV})
    assert getattr(config, row.field) == value
    default = _env_of()
    if row.omit_default:  # the gateway's default is the spec's: nothing to write
        assert row.env not in default
        assert GatewayConfig.model_fields[row.field].default == row.default
    else:
        assert default[row.env] == str(row.default)


@ROWS
def test_the_gateway_config_field_is_the_rows(row: Setting) -> None:
    info = GatewayConfig.model_fields[row.field]
    assert info.default == row.gateway_default
    assert info.description == row.summary
    if row.choices:
        return
    assert row.minimum is not None
    assert row.maximum is not None
    wide = {"context_length": str(CONTEXT_LENGTH.maximum)} if row is not CONTEXT_LENGTH else {}
    for accepted in (row.minimum, row.maximum):
        flags = {**wide, row.field: str(accepted)}
        if row is CONTEXT_LENGTH:  # a window of 1 leaves no cap below it: the relation says
            flags["max_input_tokens"] = str(max(1, accepted - 1))
            if accepted == 1:
                problem = INPUT_BELOW_WINDOW.problem(1, 1)
                with pytest.raises(GatewayError, match=re.escape(problem)):
                    load_gateway_config(_flags(flags), environ=REQUIRED_ENV)
                continue
        config = load_gateway_config(_flags(flags), environ=REQUIRED_ENV)
        assert getattr(config, row.field) == accepted
    lowest = 0 if row.fractional else row.minimum - 1
    for refused in (lowest, row.maximum + 1):
        with pytest.raises(GatewayError, match=f"{row.field}: Input should be"):
            load_gateway_config(_flags({**wide, row.field: str(refused)}), environ=REQUIRED_ENV)
    if row.fractional:  # seconds: the gateway run by hand takes fractions too
        flags = _flags({row.field: "0.5"})
        assert getattr(load_gateway_config(flags, environ=REQUIRED_ENV), row.field) == 0.5


def _flags(values: dict[str, str]) -> list[str]:
    return [
        word for field, value in values.items() for word in ("--" + field.replace("_", "-"), value)
    ]


def test_the_input_cap_below_the_window_is_one_rule_refused_by_the_api_and_the_gateway() -> None:
    cap, window = setting(INPUT_BELOW_WINDOW.field), setting(INPUT_BELOW_WINDOW.bound)
    assert (cap.spec, window.spec) == ("admission.maxInputTokens", "engine.contextLength")
    (rule,) = [rule for rule in SPEC_RULES if rule.message == INPUT_BELOW_WINDOW.api_message()]
    assert rule.cel == "self.admission.maxInputTokens < self.engine.contextLength"
    assert rule.field_path == ".admission.maxInputTokens"
    with pytest.raises(SpecError) as refused:
        cluster(admission__maxInputTokens=4096, engine__contextLength=4096)
    assert (
        "maxInputTokens must be less than engine.contextLength: the window must keep room "
        "for the answer" in str(refused.value)
    )
    assert cluster(admission__maxInputTokens=4095, engine__contextLength=4096)
    with pytest.raises(GatewayError) as caught:
        load_gateway_config(
            _flags({"max_input_tokens": "4096", "context_length": "4096"}), environ=REQUIRED_ENV
        )
    assert INPUT_BELOW_WINDOW.problem(4096, 4096) in str(caught.value)
    assert str(caught.value).endswith(
        "max_input_tokens (4096) must be < context_length (4096): the window must keep room "
        "for the answer"
    )


def test_every_relation_names_fields_the_gateway_has() -> None:
    for relation in RELATIONS:
        assert {relation.field, relation.bound} <= set(GatewayConfig.model_fields)


def test_every_scalar_admission_field_is_a_row_of_the_table() -> None:
    rows = {row.attributes for row in SETTINGS}
    scalar = set(AdmissionSpec.model_fields) - NOT_SCALAR
    assert {("admission", name) for name in scalar} <= rows
    assert {row.field for row in SETTINGS} <= set(GatewayConfig.model_fields)
