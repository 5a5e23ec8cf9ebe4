"""Pure parts of the dev cluster: node shapes, pinned versions, stage file."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import yaml

from sparkllm_dev.devcluster.nodes import node_manifest, spark_nodes
from sparkllm_dev.devcluster.paths import K8S_VERSION

ROOT = Path(__file__).resolve().parents[3]


def test_six_nodes_in_two_groups_on_loopback() -> None:
    nodes = spark_nodes()
    assert [(n.name, n.group, n.rank, n.ip) for n in nodes] == [
        ("spark-a0", "a", 0, "127.0.0.11"),
        ("spark-a1", "a", 1, "127.0.0.12"),
        ("spark-a2", "a", 2, "127.0.0.13"),
        ("spark-b0", "b", 0, "127.0.0.21"),
        ("spark-b1", "b", 1, "127.0.0.22"),
        ("spark-b2", "b", 2, "127.0.0.23"),
    ]


def test_node_manifest_is_a_spark() -> None:
    node = node_manifest(spark_nodes()[4])
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["metadata"]["labels"]["sparkllm.io/node-group"] == "b"
    assert node["metadata"]["labels"]["sparkllm.io/rank"] == "1"
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"
    assert node["status"]["capacity"]["memory"] == "128Gi"
    assert node["status"]["addresses"][0] == {"type": "InternalIP", "address": "127.0.0.22"}
    assert "taints" not in node["spec"]


def test_build_script_pins_the_same_kubernetes_version() -> None:
    script = (ROOT / "hack" / "build-binaries.sh").read_text()
    match = re.search(r'K8S_VERSION="\$\{K8S_VERSION:-(v[0-9.]+)\}"', script)
    assert match is not None
    assert match.group(1) == K8S_VERSION


def test_stage_file_has_full_lifecycle_and_faults() -> None:
    text = resources.files("sparkllm_dev.devcluster").joinpath("stages.yaml").read_text()
    names = {doc["metadata"]["name"] for doc in yaml.safe_load_all(text)}
    assert {
        "node-initialize",
        "node-heartbeat-with-lease",
        "node-not-ready",
        "pod-ready",
        "pod-delete",
        "pod-container-failed",
        "pod-container-restart",
    } <= names
