"""Every validation rule, on the pydantic side: invalid manifests fail naming the field,
near misses pass, and updates respect the immutable fields.

The invalid manifests live in ``tests/fixtures/invalid/cases.yaml`` because the API-server
test replays the same table against kube-apiserver.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sparkllm.api import (
    InferenceCluster,
    validate_inference_cluster,
    validate_inference_cluster_update,
)
from sparkllm.api.crd import build_crd
from sparkllm.api.schema import iter_schema_nodes
from sparkllm.errors import SpecError
from tests.fixtures.invalid import (
    InvalidCase,
    apply_changes,
    load_base_manifest,
    load_invalid_cases,
)

INVALID_CASES = load_invalid_cases()


def _changed(set_values: dict[str, Any], delete: list[str] | None = None) -> dict[str, Any]:
    return apply_changes(load_base_manifest(), set_values=set_values, delete=delete or [])


def test_the_table_is_large_enough() -> None:
    assert len(INVALID_CASES) >= 20
    assert len({case.name for case in INVALID_CASES}) == len(INVALID_CASES)


@pytest.mark.parametrize("case", INVALID_CASES, ids=[case.name for case in INVALID_CASES])
def test_invalid_manifest_is_rejected_naming_the_field(case: InvalidCase) -> None:
    with pytest.raises(SpecError) as raised:
        validate_inference_cluster(case.manifest)
    message = str(raised.value)
    assert f"{case.field}: " in message
    assert case.pydantic in message


def test_every_cel_rule_has_an_invalid_case() -> None:
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    messages = {
        rule["message"]
        for _, node in iter_schema_nodes(schema)
        for rule in node.get("x-kubernetes-validations", [])
        if "oldSelf" not in rule["rule"]
    }
    expected = {case.pydantic for case in INVALID_CASES}
    # A case's text is the rule's message, or (a rule with a detail) the message plus it.
    uncovered = [
        m for m in messages if not any(m.startswith(e) or e.startswith(m) for e in expected)
    ]
    assert not uncovered


VALID_CHANGES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("defaults-only-layer-split", {}, ["spec.engine.layerPartition"]),
    ("digest-image", {"spec.engine.image": "lmsysorg/sglang@sha256:" + "0" * 64}, []),
    (
        "tag-and-digest",
        {"spec.engine.image": "nvcr.io/nvidia/sglang:26.07-py3@sha256:" + "f" * 64},
        [],
    ),
    ("registry-port-with-tag", {"spec.engine.image": "localhost:5000/sglang:v0.5.23"}, []),
    ("tag-containing-latest", {"spec.engine.image": "nvcr.io/nvidia/sglang:latest-2026"}, []),
    ("scaled-to-zero", {"spec.replicas": 0}, []),
    ("mem-fraction-upper-bound", {"spec.engine.memFractionStatic": 0.95}, []),
    ("input-cap-just-below-window", {"spec.admission.maxInputTokens": 12287}, []),
    (
        "two-groups-two-replicas",
        {
            "spec.replicas": 2,
            "spec.placement.nodeGroups": [
                ["spark-a0", "spark-a1", "spark-a2"],
                ["spark-b0", "spark-b1", "spark-b2"],
            ],
        },
        [],
    ),
    (
        "more-groups-than-replicas",
        {"spec.placement.nodeGroups": [["a", "b", "c"], ["d", "e", "f"]]},
        [],
    ),
    (
        "custom-group-label",
        {"spec.placement": {"nodeGroupLabel": "example.com/rack"}, "spec.replicas": 5},
        [],
    ),
    (
        "single-node-pipeline",
        {
            "spec.engine.pipelineParallel": 1,
            "spec.engine.layerPartition": [43],
            "spec.placement.nodeGroups": [["spark-a0"]],
        },
        [],
    ),
    (
        "non-owned-extra-args",
        {"spec.engine.extraArgs": ["--model-impl", "sglang", "--log-level", "debug"]},
        [],
    ),
    ("plain-env", {"spec.engine.env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}, []),
    (  # mirrored into the front door, not refused (issue 25)
        "mirrored-template-defaults",
        {"spec.engine.extraArgs": ["--default-chat-template-kwargs", '{"thinking": true}']},
        [],
    ),
    (
        "tuning-sglang-env",
        {"spec.engine.env": [{"name": "SGLANG_MM_PRECOMPUTE_HASH", "value": "1"}]},
        [],
    ),
    ("flat-backoff", {"spec.restartPolicy.backoffSeconds": [30, 30, 30]}, []),
    ("switch-topology", {"spec.network.topology": "switch"}, []),
    ("no-parsers", {}, ["spec.engine.toolCallParser", "spec.engine.reasoningParser"]),
    ("name-of-40", {"metadata.name": "d" * 40}, []),
    ("integral-float-as-integer", {"spec.replicas": 1.0, "spec.engine.contextLength": 12288.0}, []),
    # yaml.safe_load turns an unquoted timestamp into a datetime, which JSON lacks.
    (
        "yaml-timestamp-in-metadata",
        {"metadata.creationTimestamp": datetime(2026, 1, 1, tzinfo=UTC)},
        [],
    ),
]


@pytest.mark.parametrize(
    ("set_values", "delete"),
    [(values, delete) for _, values, delete in VALID_CHANGES],
    ids=[name for name, _, _ in VALID_CHANGES],
)
def test_near_misses_are_accepted(set_values: dict[str, Any], delete: list[str]) -> None:
    validate_inference_cluster(_changed(set_values, delete))


def test_all_errors_are_reported_at_once() -> None:
    manifest = _changed({"spec.replicas": -1, "spec.engine.memFractionStatic": 2})
    with pytest.raises(SpecError) as raised:
        validate_inference_cluster(manifest)
    assert "spec.replicas: " in str(raised.value)
    assert "spec.engine.memFractionStatic: " in str(raised.value)


def test_a_failed_item_is_not_also_reported_as_a_short_list() -> None:
    manifest = _changed({"spec.placement.nodeGroups": [["spark-a0", "spark-a0", "spark-a1"]]})
    with pytest.raises(SpecError) as raised:
        validate_inference_cluster(manifest)
    assert "should have at least" not in str(raised.value)


def test_error_names_the_object() -> None:
    manifest = _changed({"metadata.namespace": "llm", "spec.replicas": -1})
    with pytest.raises(SpecError, match=r"^InferenceCluster llm/deepseek-v4-flash is invalid: "):
        validate_inference_cluster(manifest)


@pytest.mark.parametrize(
    "image",
    ["nvcr.io/nvidia/sglang:26.07-py3\n", "nvcr.io/nvidia/sglang:latest\n"],
    ids=["trailing-newline", "latest-with-newline"],
)
def test_regex_rules_use_re2_end_anchors(image: str) -> None:
    # Python's `$` matches before a trailing newline; RE2's (the API server's) does not.
    with pytest.raises(SpecError, match=r"image must be pinned"):
        validate_inference_cluster(_changed({"spec.engine.image": image}))


def test_non_json_input_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="not a JSON document"):
        validate_inference_cluster(_changed({"spec.replicas": object()}))


# --- updates ------------------------------------------------------------------------------


def _cluster(set_values: dict[str, Any]) -> InferenceCluster:
    return validate_inference_cluster(_changed(set_values))


UPDATE_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("mem-fraction", {"spec.engine.memFractionStatic": 0.5}, None),
    ("image", {"spec.engine.image": "nvcr.io/nvidia/sglang:26.08-py3"}, None),
    ("node-groups", {"spec.placement.nodeGroups": [["spark-b0", "spark-b1", "spark-b2"]]}, None),
    ("placement-mode", {"spec.placement": {"nodeGroupLabel": "sparkllm.io/node-group"}}, None),
    (
        "pipeline-parallel",
        {
            "spec.engine.pipelineParallel": 2,
            "spec.engine.layerPartition": [21, 22],
            "spec.placement.nodeGroups": [["spark-a0", "spark-a1"]],
        },
        "spec.engine.pipelineParallel: pipelineParallel is immutable",
    ),
]


@pytest.mark.parametrize(
    ("set_values", "refusal"),
    [(values, refusal) for _, values, refusal in UPDATE_CASES],
    ids=[name for name, _, _ in UPDATE_CASES],
)
def test_update_respects_immutable_fields(set_values: dict[str, Any], refusal: str | None) -> None:
    old, new = _cluster({}), _cluster(set_values)
    if refusal is None:
        validate_inference_cluster_update(old, new)
    else:
        with pytest.raises(SpecError, match=refusal):
            validate_inference_cluster_update(old, new)


def test_transition_rules_in_the_crd_are_the_ones_enforced_on_update() -> None:
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    immutable = sorted(
        path
        for path, node in iter_schema_nodes(schema)
        for rule in node.get("x-kubernetes-validations", [])
        if "oldSelf" in rule["rule"]
    )
    assert immutable == ["spec.engine.pipelineParallel", "spec.engine.tensorParallel"]
