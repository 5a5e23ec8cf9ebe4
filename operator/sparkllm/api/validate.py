"""The entry points that turn untrusted mappings into validated InferenceClusters.

Everything outside the API package (the CLI reading a file, the operator reading the
watched object, tests) goes through here rather than calling pydantic directly, for two
reasons. First, the API server validates JSON: a string is never an integer, an integer
never a boolean. pydantic's default (lax) mode would accept ``replicas: "2"``, so input is
validated as JSON in strict mode, and pydantic then agrees with ``kubectl apply``.
Integral floats (``2.0``) count as integers, as they do for the API server. Second,
callers handle sparkllm's errors, not pydantic's: failures become one
:class:`~sparkllm.errors.SpecError` whose message names every offending field by its
manifest path (``spec.engine.layerPartition: ...``), as ``kubectl`` does.

Transition rules (immutable fields) need the previous object; the operator calls
:func:`validate_inference_cluster_update` with the last spec it acted on. The
administrator's policy (:mod:`sparkllm.api.admin_policy`) is checked here too when the
caller has one (the operator, ``sparkllm render --admin-policy``), after the spec itself.
"""

import json
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from sparkllm.api.admin_policy import AdminPolicy, enforce
from sparkllm.api.rules import RULE_ERROR_TYPE, ApiModel, Rule
from sparkllm.api.spec import InferenceCluster
from sparkllm.errors import SpecError


def validate_inference_cluster(
    obj: Mapping[str, Any], *, policy: AdminPolicy | None = None
) -> InferenceCluster:
    """Validate a manifest (or an object read from the API server) as an InferenceCluster.

    Raises :class:`SpecError` naming every invalid field; with the administrator's
    ``policy``, :class:`PolicyDeniedError` naming every field outside it (a valid spec).
    """
    try:
        document = json.dumps(_integral_floats_as_ints(obj), default=_jsonable)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"InferenceCluster is not a JSON document: {exc}") from exc
    try:
        ic = InferenceCluster.model_validate_json(document, strict=True)
    except ValidationError as exc:
        raise SpecError(f"{_object_label(obj)} is invalid: {describe_errors(exc)}") from exc
    if policy is not None:
        enforce(ic, policy)
    return ic


def validate_inference_cluster_update(old: InferenceCluster, new: InferenceCluster) -> None:
    """Check an update against the CRD's transition rules (``self == oldSelf``).

    Raises :class:`SpecError` naming every field that may not change.
    """
    problems = _transition_violations(old.spec, new.spec, path="spec")
    if problems:
        label = _object_label(new.to_manifest())
        raise SpecError(f"{label} is invalid: " + "; ".join(problems))


def describe_errors(exc: ValidationError) -> str:
    """One line per pydantic error: ``<manifest path>: <message>``, joined by '; '."""
    errors = exc.errors(include_url=False)
    item_locs = [tuple(error["loc"]) for error in errors]
    lines = []
    for error in errors:
        loc = tuple(error["loc"])
        if error["type"] == "too_short" and any(
            len(other) > len(loc) and other[: len(loc)] == loc for other in item_locs
        ):
            # pydantic counts only the items that validated: "[0]" is "too short" once
            # its one item failed. The item's own error is the one to report.
            continue
        path = format_path(loc)
        if error["type"] == RULE_ERROR_TYPE:
            path += (error.get("ctx") or {}).get("field_path", "")
        lines.append(f"{path or '<root>'}: {error['msg']}")
    return "; ".join(lines)


def format_path(loc: Sequence[int | str]) -> str:
    """``("spec", "placement", "nodeGroups", 0, 1)`` -> ``spec.placement.nodeGroups[0][1]``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def _transition_violations(old: BaseModel, new: BaseModel, *, path: str) -> list[str]:
    problems = []
    for attribute, info in type(new).model_fields.items():
        wire_name = info.alias or attribute
        old_value, new_value = getattr(old, attribute), getattr(new, attribute)
        for rule in info.metadata:
            if isinstance(rule, Rule) and rule.is_transition_rule and old_value != new_value:
                problems.append(f"{path}.{wire_name}: {rule.message}")
        if isinstance(old_value, ApiModel) and isinstance(new_value, ApiModel):
            problems.extend(
                _transition_violations(old_value, new_value, path=f"{path}.{wire_name}")
            )
    return problems


def _object_label(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        return "InferenceCluster"
    namespace = metadata.get("namespace")
    name = f"{namespace}/{metadata['name']}" if isinstance(namespace, str) else metadata["name"]
    return f"InferenceCluster {name}"


def _integral_floats_as_ints(value: Any) -> Any:
    """``2.0`` -> ``2``, recursively, as the API server's JSON decoding does.

    kubectl sends YAML's ``replicas: 2.0`` as the JSON number ``2`` and the server accepts it
    as an integer; PyYAML keeps it a float, which strict validation would refuse.
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {key: _integral_floats_as_ints(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_integral_floats_as_ints(item) for item in value]
    return value


def _jsonable(value: Any) -> Any:
    """``json.dumps`` fallback for what YAML and kopf hand us besides plain JSON types."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not a JSON type")
