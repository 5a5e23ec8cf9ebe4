"""Validation rules that exist once and run twice: as CEL in the API server, as Python here.

DESIGN.md makes the API server the place where an InferenceCluster is validated (OpenAPI
schema plus CEL ``x-kubernetes-validations``) and the pydantic models the single source
of truth the CRD is generated from. Bounds, patterns and enums translate mechanically
from pydantic to OpenAPI; cross-field rules do not, so each one is written here as a
:class:`Rule` holding the CEL expression, the Python predicate and the one message both
report. Keeping the halves side by side means neither can change without the other in
view; ``tests/integration/test_api_server_validation.py`` proves they agree against a real
API server.

A rule is attached either to a field, as ``Annotated[T, Rule(...)]`` (it then validates
that field's value), or to a model, by listing it in the model's ``cel_rules`` class
attribute (it then validates the whole object, and ``field_path`` says which field the
error is about). Transition rules (those that read ``oldSelf``) have no Python predicate:
they need the previous object, which only :func:`sparkllm.api.validate_inference_cluster_update`
has.

:class:`ApiModel` is the base of every model in the API: camelCase on the wire,
snake_case in Python, unknown fields rejected, instances immutable.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

CEL_KEY = "x-kubernetes-validations"
# The pydantic error type of a failed rule; its context carries the rule's field path.
RULE_ERROR_TYPE = "cel_rule"

FieldReason = Literal["FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired"]


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One validation rule: a CEL expression for the API server and its Python twin.

    ``cel`` is evaluated with ``self`` bound to the value the rule is attached to;
    ``check`` receives the same value (already validated field by field) and returns
    True when it is acceptable. ``message`` is what both report; it names the field.
    ``field_path`` (a CEL field path relative to ``self``, e.g. ``.engine.layerPartition``)
    moves the error from the object to the field the user must change. ``detail`` (Python)
    and ``detail_cel`` (a CEL string expression over ``self``) name what is wrong in this
    value — e.g. the unknown flags — appended to ``message`` after ": " by both halves (the
    API server through ``messageExpression``). ``reason`` picks
    the error type kubectl prints. ``FieldValueDuplicate`` is deliberately not offered: for
    it the API server prints "Duplicate value" and drops the message.
    """

    cel: str
    message: str
    check: Callable[[Any], bool] | None
    field_path: str | None = None
    reason: FieldReason = "FieldValueInvalid"
    detail: Callable[[Any], str] | None = None
    detail_cel: str | None = None

    def __post_init__(self) -> None:
        if "{" in self.message or "}" in self.message:
            # PydanticCustomError treats braces as format fields.
            raise ValueError(f"rule message must not contain braces: {self.message!r}")
        if (self.detail is None) != (self.detail_cel is None):
            raise ValueError("a rule's detail needs both halves: detail and detail_cel")

    @property
    def is_transition_rule(self) -> bool:
        """True for rules comparing against ``oldSelf`` (enforced on update only)."""
        return self.check is None

    def to_cel(self) -> dict[str, str]:
        """The rule as one entry of ``x-kubernetes-validations``."""
        entry = {"rule": self.cel, "message": self.message}
        if self.detail_cel is not None:
            entry["messageExpression"] = f"{self.message!r} + ': ' + {self.detail_cel}"
        if self.field_path is not None:
            entry["fieldPath"] = self.field_path
        entry["reason"] = self.reason
        return entry

    def enforce(self, value: Any) -> None:
        """Raise the rule's pydantic error when ``value`` breaks it."""
        if self.check is not None and not self.check(value):
            message = self.message
            if self.detail is not None:  # braces would read as format fields
                message += ": " + self.detail(value).replace("{", "(").replace("}", ")")
            raise PydanticCustomError(
                RULE_ERROR_TYPE, message, {"field_path": self.field_path or ""}
            )

    # --- use as ``Annotated[T, Rule(...)]`` ------------------------------------------

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        schema = handler(source)
        if self.is_transition_rule:
            return schema

        def enforce_and_pass(value: Any) -> Any:
            self.enforce(value)
            return value

        return core_schema.no_info_after_validator_function(enforce_and_pass, schema)

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema.setdefault(CEL_KEY, []).append(self.to_cel())
        return json_schema


def re2_search(pattern: str, value: str) -> bool:
    """CEL's ``value.matches(pattern)`` in Python: an unanchored RE2 search.

    The patterns used in rules are plain enough that RE2 and Python's ``re`` agree, except
    for one trap: Python's ``$`` also matches before a trailing newline, RE2's does not.
    """
    return re.search(pattern.replace("$", r"\Z"), value) is not None


def _attach_model_rules(schema: dict[str, Any], model_class: type[BaseModel]) -> None:
    """``json_schema_extra`` hook: publish a model's ``cel_rules`` in its JSON schema."""
    rules: tuple[Rule, ...] = getattr(model_class, "cel_rules", ())
    if rules:
        schema[CEL_KEY] = [rule.to_cel() for rule in rules]


class ApiModel(BaseModel):
    """Base of every InferenceCluster API model.

    Python attributes are snake_case; the wire format (YAML/JSON, the CRD schema) is
    camelCase through aliases, and both spellings are accepted when constructing models
    in Python. Unknown fields are errors, as they are for ``kubectl apply`` (strict field
    validation). Instances are frozen: a spec is a value, never edited in place.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
        extra="forbid",
        frozen=True,
        json_schema_extra=_attach_model_rules,
    )

    # Whole-object rules of this model; see the module docstring.
    cel_rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _enforce_cel_rules(self) -> Self:
        # Runs only once every field is valid, and reports the first broken rule: a
        # validator raises one error. (The API server evaluates all rules and may report
        # several lines for one mistake; both name the same field first.)
        for rule in type(self).cel_rules:
            rule.enforce(self)
        return self

    def to_wire(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase keys, absent optionals omitted."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
