"""Translate pydantic's JSON Schema into a Kubernetes structural OpenAPI v3 schema.

A CRD's schema must be *structural*: every node typed, no ``$ref``, no ``anyOf`` that
carries types, no ``additionalProperties: false``, draft-4 style exclusive bounds. pydantic
emits JSON Schema draft 2020-12 with ``$defs``/``$ref``, ``anyOf [X, null]`` for optional
fields and numeric ``exclusiveMinimum``. This module rewrites one into the other, and
nothing more: the meaning (types, bounds, patterns, enums, defaults, descriptions, CEL
rules) comes from the models unchanged, so the models stay the single source of truth.

Two deliberate adjustments:

- Object defaults are minimised: a key whose value equals that property's own default is
  dropped, so ``restartPolicy`` defaults to ``{}`` and the API server fills the leaves
  from their own defaults (it defaults top-down, nested fields included).
- Defaults under ``status`` are dropped: status is written by the operator, and a
  schema default would make "not observed yet" indistinguishable from a real value.
"""

from typing import Any

JsonSchema = dict[str, Any]

# Key order in the generated YAML: what a reader looks for first comes first.
_KEY_ORDER = (
    "description", "type", "format", "enum", "default", "minimum", "exclusiveMinimum",
    "maximum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "minItems",
    "maxItems", "items", "required", "properties", "additionalProperties",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys", "x-kubernetes-validations",
)  # fmt: skip
_DROPPED_KEYS = frozenset({"title"})


def structural_schema(json_schema: JsonSchema, *, in_status: bool = False) -> JsonSchema:
    """Convert a pydantic ``model_json_schema(by_alias=True)`` result to a structural one."""
    definitions: dict[str, JsonSchema] = json_schema.get("$defs", {})
    root = {key: value for key, value in json_schema.items() if key != "$defs"}
    return _convert(root, definitions=definitions, in_status=in_status, path="")


def _convert(
    node: JsonSchema, *, definitions: dict[str, JsonSchema], in_status: bool, path: str
) -> JsonSchema:
    node = _inline(node, definitions=definitions, path=path)
    out: JsonSchema = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key == "properties":
            out[key] = {
                name: _convert(
                    child, definitions=definitions, in_status=in_status, path=f"{path}.{name}"
                )
                for name, child in value.items()
            }
        elif key == "items":
            out[key] = _convert(
                value, definitions=definitions, in_status=in_status, path=f"{path}[]"
            )
        elif key == "additionalProperties":
            if value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif isinstance(value, dict):
                out[key] = _convert(
                    value, definitions=definitions, in_status=in_status, path=f"{path}{{}}"
                )
            # False (pydantic's extra="forbid") has no structural spelling: unknown
            # fields are rejected by the API server's strict field validation instead.
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            out[key.replace("exclusive", "").lower()] = value
            out[key] = True
        elif key == "const":
            out["enum"] = [value]
        elif key == "default":
            if value is not None and not in_status:
                out[key] = value
        else:
            out[key] = value
    if "default" in out and out.get("type") == "object":
        out["default"] = _minimise_default(out["default"], out)
    if "type" not in out:
        raise TypeError(f"schema node {path or '<root>'} has no type: {sorted(node)}")
    return _ordered(out)


def _inline(node: JsonSchema, *, definitions: dict[str, JsonSchema], path: str) -> JsonSchema:
    """Resolve ``$ref`` and ``anyOf [X, null]``; the referring node's keys win."""
    if "anyOf" in node:
        branches = [branch for branch in node["anyOf"] if branch != {"type": "null"}]
        if len(branches) != 1:
            raise TypeError(f"schema node {path}: a union of types is not structural")
        outer = {key: value for key, value in node.items() if key != "anyOf"}
        node = _merge(_inline(branches[0], definitions=definitions, path=path), outer)
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        outer = {key: value for key, value in node.items() if key != "$ref"}
        node = _merge(_inline(definitions[name], definitions=definitions, path=path), outer)
    return node


def _merge(base: JsonSchema, outer: JsonSchema) -> JsonSchema:
    """``base`` overlaid with ``outer``; CEL rules of both are kept, the model's first."""
    merged = {**base, **outer}
    rules = [*base.get("x-kubernetes-validations", []), *outer.get("x-kubernetes-validations", [])]
    if rules:
        merged["x-kubernetes-validations"] = rules
    return merged


def _minimise_default(value: Any, schema: JsonSchema) -> Any:
    """Drop the keys of an object default that the schema would default the same way."""
    if not isinstance(value, dict):
        return value
    properties: dict[str, JsonSchema] = schema.get("properties", {})
    minimal: dict[str, Any] = {}
    for key, item in value.items():
        child = properties.get(key, {})
        if item is None:
            continue
        # A nested object's default is itself minimised: compare like with like.
        reduced = _minimise_default(item, child)
        if "default" in child and child["default"] == reduced:
            continue
        minimal[key] = reduced
    return minimal


def _ordered(node: JsonSchema) -> JsonSchema:
    rank = {key: index for index, key in enumerate(_KEY_ORDER)}
    return dict(sorted(node.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0])))


def iter_schema_nodes(schema: JsonSchema, path: str = "") -> list[tuple[str, JsonSchema]]:
    """Every node of a structural schema with its dotted path, for checks and docs."""
    nodes = [(path, schema)]
    for name, child in schema.get("properties", {}).items():
        nodes.extend(iter_schema_nodes(child, f"{path}.{name}" if path else name))
    if "items" in schema:
        nodes.extend(iter_schema_nodes(schema["items"], f"{path}[]"))
    if isinstance(schema.get("additionalProperties"), dict):
        nodes.extend(iter_schema_nodes(schema["additionalProperties"], f"{path}{{}}"))
    return nodes
