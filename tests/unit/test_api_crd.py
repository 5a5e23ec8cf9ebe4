"""The generated CRD: checked in without drift, structural, documented, bounded for CEL."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
import yaml

from sparkllm.api.crd import build_crd, render_crd_yaml
from sparkllm.api.schema import iter_schema_nodes
from tests.fixtures.invalid import REPO_ROOT

CRD_FILE = REPO_ROOT / "crds" / "sparkllm.io_inferenceclusters.yaml"
CRD = build_crd()
VERSION = CRD["spec"]["versions"][0]
SCHEMA: dict[str, Any] = VERSION["schema"]["openAPIV3Schema"]
NODES = iter_schema_nodes(SCHEMA)
SPEC_NODES = [(path, node) for path, node in NODES if path.startswith("spec")]


def test_checked_in_crd_matches_the_models() -> None:
    assert CRD_FILE.read_text() == render_crd_yaml(), (
        "crds/ drifted from sparkllm.api: run hack/gen-crd.sh"
    )


def test_module_entry_point_prints_the_crd() -> None:
    result = subprocess.run(
        [sys.executable, "-W", "error", "-m", "sparkllm.api.crd"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert result.stdout == render_crd_yaml()
    assert yaml.safe_load(result.stdout) == CRD


def test_names_scope_and_version() -> None:
    assert CRD["metadata"]["name"] == "inferenceclusters.sparkllm.io"
    assert CRD["spec"]["group"] == "sparkllm.io"
    assert CRD["spec"]["scope"] == "Namespaced"
    assert CRD["spec"]["names"] == {
        "kind": "InferenceCluster",
        "listKind": "InferenceClusterList",
        "plural": "inferenceclusters",
        "singular": "inferencecluster",
        "shortNames": ["icl"],
        "categories": ["sparkllm"],
    }
    assert [v["name"] for v in CRD["spec"]["versions"]] == ["v1alpha1"]
    assert VERSION["served"] is True
    assert VERSION["storage"] is True


def test_subresources() -> None:
    assert VERSION["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }


def test_printer_columns() -> None:
    """kubectl get icl shows the first seven (Start: a start you can watch); -o wide
    (priority 1) adds where the front door is, why Ready is what it is, and the restarts."""
    columns = [
        (c["name"], c["jsonPath"], c.get("priority", 0))
        for c in VERSION["additionalPrinterColumns"]
    ]
    assert columns == [
        ("Replicas", ".spec.replicas", 0),
        ("Ready", ".status.readyReplicas", 0),
        ("Phase", ".status.phase", 0),
        ("Start", ".status.start", 0),
        ("Model", ".spec.model.servedName", 0),
        ("PP", ".spec.engine.pipelineParallel", 0),
        ("Age", ".metadata.creationTimestamp", 0),
        ("Endpoint", ".status.frontDoor.url", 1),
        ("Reason", '.status.conditions[?(@.type=="Ready")].reason', 1),
        ("Restarts", ".status.restarts", 1),
    ]
    for column in VERSION["additionalPrinterColumns"]:
        # A filter selects list items: the field is then one of the items'.
        path = re.sub(r"\[\?\(.*?\)\]", "/items", column["jsonPath"]).lstrip(".")
        if not path.startswith("metadata"):
            assert _node_at(path.replace(".", "/"))["type"] == column["type"]


def _node_at(slash_path: str) -> dict[str, Any]:
    node = SCHEMA
    for key in slash_path.split("/"):
        node = node[key] if key == "items" else node["properties"][key]
    return node


@pytest.mark.parametrize("path", [path or "<root>" for path, _ in NODES])
def test_every_node_is_structural(path: str) -> None:
    node = dict(NODES)["" if path == "<root>" else path]
    assert "type" in node
    forbidden = {"$ref", "$defs", "anyOf", "allOf", "oneOf", "not", "title", "nullable"}
    assert not forbidden & set(node)
    assert node.get("additionalProperties") is not False
    assert not ("properties" in node and "additionalProperties" in node)


def _properties(nodes: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (f"{path}.{name}", name, child)
        for path, node in nodes
        for name, child in node.get("properties", {}).items()
    ]


SPEC_PROPERTIES = _properties([(p, n) for p, n in NODES if p.startswith(("spec", "status"))])


@pytest.mark.parametrize(
    ("name", "node"),
    [(name, node) for _, name, node in SPEC_PROPERTIES],
    ids=[path for path, _, _ in SPEC_PROPERTIES],
)
def test_every_field_description_starts_with_its_name(name: str, node: dict[str, Any]) -> None:
    assert node["description"].startswith(f"{name} ")


SPEC_ONLY = [(path, name, node) for path, name, node in SPEC_PROPERTIES if path.startswith("spec")]


@pytest.mark.parametrize(
    "node", [node for _, _, node in SPEC_ONLY], ids=[path for path, _, _ in SPEC_ONLY]
)
def test_spec_field_description_states_its_default_or_that_it_is_required(
    node: dict[str, Any],
) -> None:
    text = node["description"]
    if "default" in node:
        assert "Default" in text
    else:
        assert "Required" in text or "Optional" in text


@pytest.mark.parametrize(
    ("path", "node"),
    [(p, n) for p, n in SPEC_NODES if n["type"] in ("array", "string")],
    ids=[p for p, n in SPEC_NODES if n["type"] in ("array", "string")],
)
def test_spec_lists_and_strings_are_bounded_for_cel_cost(path: str, node: dict[str, Any]) -> None:
    # The API server refuses a CRD whose CEL rules have an unbounded estimated cost.
    if node["type"] == "array":
        assert "maxItems" in node, path
    else:
        assert "maxLength" in node or "enum" in node, path


def test_status_has_no_defaults() -> None:
    assert not [path for path, node in NODES if path.startswith("status") and "default" in node]


def test_cel_rules_are_well_formed() -> None:
    rules = [rule for _, node in NODES for rule in node.get("x-kubernetes-validations", [])]
    assert len(rules) >= 14
    for rule in rules:
        assert rule["message"]
        assert rule["rule"]
        assert rule["reason"] in {"FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired"}
        if "oldSelf" in rule["rule"]:
            assert rule["rule"] == "self == oldSelf"


def test_object_defaults_are_minimal() -> None:
    spec = SCHEMA["properties"]["spec"]["properties"]
    assert spec["network"]["default"] == {}
    assert spec["restartPolicy"]["default"] == {}
    assert spec["monitoring"]["default"] == {}
    assert spec["placement"]["default"] == {"nodeGroupLabel": "sparkllm.io/node-group"}


def test_metadata_restricts_only_the_name() -> None:
    metadata = SCHEMA["properties"]["metadata"]
    assert set(metadata["properties"]) == {"name"}
    assert metadata["properties"]["name"]["maxLength"] == 40


def test_gen_crd_script_writes_the_checked_in_file() -> None:
    script = (REPO_ROOT / "hack" / "gen-crd.sh").read_text()
    assert "python -m sparkllm.api.crd > crds/sparkllm.io_inferenceclusters.yaml" in script
