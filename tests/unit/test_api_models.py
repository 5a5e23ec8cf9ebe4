"""The models themselves: defaults (SEEDS.md), aliases, immutability, status, vocabularies."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from pydantic import ValidationError

from sparkllm.api import (
    ConditionType,
    EngineSpec,
    InferenceCluster,
    InferenceClusterStatus,
    NetworkSpec,
    ObjectMeta,
    Phase,
    Reason,
    validate_inference_cluster,
)
from sparkllm.api.crd import build_crd
from sparkllm.api.status import REASON_PATTERN, ClusterPhaseName, PhaseName
from tests.fixtures.invalid import REPO_ROOT

MINIMAL: dict[str, Any] = {
    "apiVersion": "sparkllm.io/v1alpha1",
    "kind": "InferenceCluster",
    "metadata": {"name": "minimal"},
    "spec": {
        "model": {"path": "/models/m", "servedName": "m"},
        "engine": {"image": "nvcr.io/nvidia/sglang:26.07-py3"},
        "admission": {"apiKeysSecretRef": {"name": "keys"}},
    },
}
SAMPLES = sorted((REPO_ROOT / "manifests" / "samples").glob("*.yaml"))

# (manifest path, default) -- the documents' deployment (SEEDS.md) and DESIGN.md.
DEFAULTS: list[tuple[str, Any]] = [
    ("replicas", 1),
    ("model.numLayers", 43),
    ("model.expectedShards", 46),
    ("engine.pipelineParallel", 3),
    ("engine.tensorParallel", 1),
    ("engine.memFractionStatic", 0.57),
    ("engine.contextLength", 12288),
    ("engine.chunkedPrefillSize", 4096),
    ("engine.cudaGraphMaxBatchSize", 4),
    ("engine.maxRunningRequests", 8),
    ("engine.extraArgs", []),
    ("engine.env", []),
    ("admission.maxInputTokens", 8192),
    ("admission.maxTokensPolicy", "clamp"),
    ("admission.maxConcurrentRequests", 8),
    ("placement", {"nodeGroupLabel": "sparkllm.io/node-group"}),
    ("network.hostNetwork", True),
    ("network.socketInterface", "enP7s7"),
    ("network.ibHCAs", ["rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1"]),
    ("network.ibGIDIndex", 3),
    ("network.topology", "ring"),
    ("network.distInitPort", 5000),
    ("restartPolicy.startupGraceSeconds", 1800),
    ("restartPolicy.backoffSeconds", [10, 30, 60, 300]),
    ("restartPolicy.maxRestartsPerHour", 6),
    ("monitoring.serviceMonitor", True),
    ("monitoring.interval", "15s"),
]


def _at(document: dict[str, Any], dotted: str) -> Any:
    value: Any = document
    for key in dotted.split("."):
        value = value[key]
    return value


@pytest.mark.parametrize(("path", "default"), DEFAULTS, ids=[path for path, _ in DEFAULTS])
def test_defaults_are_the_documents(path: str, default: Any) -> None:
    spec = validate_inference_cluster(MINIMAL).to_manifest()["spec"]
    assert _at(spec, path) == default


def _apply_schema_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """Default like the API server: top-down, a defaulted object gets its fields defaulted."""
    if isinstance(value, dict) and "properties" in schema:
        out = dict(value)
        for name, child in schema["properties"].items():
            if name not in out and "default" in child:
                out[name] = child["default"]
            if name in out:
                out[name] = _apply_schema_defaults(out[name], child)
        return out
    if isinstance(value, list) and "items" in schema:
        return [_apply_schema_defaults(item, schema["items"]) for item in value]
    return value


@pytest.mark.parametrize(
    "manifest",
    [MINIMAL, *(yaml.safe_load(path.read_text()) for path in SAMPLES)],
    ids=["minimal", *(path.stem for path in SAMPLES)],
)
def test_schema_defaults_equal_model_defaults(manifest: dict[str, Any]) -> None:
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    by_schema = _apply_schema_defaults(manifest["spec"], schema["properties"]["spec"])
    by_model = validate_inference_cluster(manifest).to_manifest()["spec"]
    assert by_schema == by_model


@pytest.mark.parametrize("sample", SAMPLES, ids=[path.stem for path in SAMPLES])
def test_manifest_round_trips_through_the_model(sample: Path) -> None:
    first = validate_inference_cluster(yaml.safe_load(sample.read_text()))
    again = validate_inference_cluster(first.to_manifest())
    assert again == first


def test_wire_names_are_camel_case_with_the_documented_exceptions() -> None:
    network = NetworkSpec().to_wire()
    assert "ibHCAs" in network
    assert "ibGIDIndex" in network
    keys = _all_keys(
        validate_inference_cluster(yaml.safe_load(SAMPLES[0].read_text())).to_manifest()
    )
    assert not [key for key in keys if "_" in key]


def _all_keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value).union(*(_all_keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_all_keys(v) for v in value))
    return set()


def test_models_accept_python_names_and_wire_names() -> None:
    by_name = EngineSpec(image="nvcr.io/nvidia/sglang:26.07-py3", pipeline_parallel=2)
    by_alias = EngineSpec.model_validate(
        {"image": "nvcr.io/nvidia/sglang:26.07-py3", "pipelineParallel": 2}
    )
    assert by_name == by_alias
    assert by_name.pipeline_parallel == 2


def test_models_are_frozen() -> None:
    engine = EngineSpec(image="nvcr.io/nvidia/sglang:26.07-py3")
    with pytest.raises(ValidationError, match="frozen"):
        engine.pipeline_parallel = 4  # type: ignore[misc]


def test_object_meta_ignores_server_fields() -> None:
    meta = ObjectMeta.model_validate(
        {"name": "x", "resourceVersion": "7", "managedFields": [], "uid": "u", "generation": 3}
    )
    assert (meta.name, meta.uid, meta.generation) == ("x", "u", 3)


def test_object_read_from_the_server_validates_with_status() -> None:
    stored = {
        **MINIMAL,
        "metadata": {"name": "minimal", "namespace": "llm", "generation": 3, "uid": "abc"},
        "status": {
            "observedGeneration": 3,
            "phase": "Ready",
            "replicas": 1,
            "readyReplicas": 1,
            "selector": "sparkllm.io/cluster=minimal",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "AllReplicasReady",
                    "message": "1/1 replicas serve",
                    "observedGeneration": 3,
                    "lastTransitionTime": "2026-08-15T10:00:00Z",
                }
            ],
            "replicaStatuses": [
                {
                    "index": 0,
                    "nodes": ["spark-a0", "spark-a1", "spark-a2"],
                    "phase": "Ready",
                    "readyRanks": 3,
                    "restarts": 2,
                    "generation": 2,
                    "lastRestart": {
                        "time": "2026-08-15T09:00:00Z",
                        "reason": "rank 1 container exited (code 137, OOMKilled)",
                    },
                    "endpoint": "http://127.0.0.10:30000",
                }
            ],
            "benchmark": {"scenarios": {"4k": {"p95_ttft_ms": 29180.0}}},
        },
    }
    cluster = validate_inference_cluster(stored)
    assert cluster.status is not None
    condition = cluster.status.conditions[0]
    assert condition.last_transition_time == datetime(2026, 8, 15, 10, tzinfo=UTC)
    wire = cluster.status.to_wire()
    assert wire["conditions"][0]["lastTransitionTime"] == "2026-08-15T10:00:00Z"
    assert wire["replicaStatuses"][0]["lastRestart"]["reason"].startswith("rank 1")
    assert "status" not in cluster.to_manifest()


def test_condition_reason_must_be_camel_case() -> None:
    with pytest.raises(ValidationError, match="reason"):
        InferenceClusterStatus.model_validate(
            {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "all replicas ready",
                        "lastTransitionTime": "2026-08-15T10:00:00Z",
                    }
                ]
            }
        )


def test_condition_types_are_the_documented_fourteen() -> None:
    # Exposed (issue 21): spec.exposure's optional APIs, reported once one was missing.
    # Monitored: spec.monitoring's PodMonitors, or why there are none.
    # UpdatePending (issue 32): an operator update the running rank pods wait for.
    # LaunchChecked, ImagesConsistent (issue 27): the image's own SGLang judged each rank's
    # command line; every rank of a replica runs one digest and version.
    # MemoryVerified (issue 28): the memory preflight right before each engine starts.
    # ModelStaged (issue 31): every group holds a verified copy of spec.model.source.
    assert [c.value for c in ConditionType] == [
        "Ready", "Progressing", "Degraded", "ModelVerified", "ConfigApplied", "CapacityPlanned",
        "NetworkVerified", "MemoryVerified", "Exposed", "Monitored", "UpdatePending",
        "LaunchChecked", "ImagesConsistent", "ModelStaged",
    ]  # fmt: skip


def test_phase_enum_and_literal_agree() -> None:
    # Stopped (spec.replicas 0, issue 16) is the object's phase only: a replica that
    # exists is never stopped.
    assert [p.value for p in Phase] == list(get_args(ClusterPhaseName))
    assert [p.value for p in Phase] == [
        "Pending", "Starting", "Ready", "Degraded", "Restarting", "Failed", "Stopped",
    ]  # fmt: skip
    assert list(get_args(PhaseName)) == [p.value for p in Phase if p is not Phase.STOPPED]


def test_reasons_are_unique_camel_case_words() -> None:
    values = [reason.value for reason in Reason]
    assert len(set(values)) == len(values)
    assert all(re.fullmatch(r"[A-Z][A-Za-z0-9]+", value) for value in values)
    assert all(re.search(REASON_PATTERN, value) for value in values)
    assert Reason.INSUFFICIENT_NODE_GROUPS.value == "InsufficientNodeGroups"  # named in DESIGN.md


def test_model_is_the_top_level_object() -> None:
    cluster = validate_inference_cluster(MINIMAL)
    assert isinstance(cluster, InferenceCluster)
    assert cluster.api_version == "sparkllm.io/v1alpha1"
    assert cluster.kind == "InferenceCluster"
