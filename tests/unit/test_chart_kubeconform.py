"""Every object the chart and the kustomize trees produce passes kubeconform, strict, offline.

Schemas, all local (no network): Kubernetes v1.36 (the dev cluster's minor) from the PyPI
package kubernetes-validate (``hack/fetch-kube-schemas.sh`` makes them loadable by
kubeconform), and the CRDs' own schemas — InferenceCluster and kopf's peering kinds —
converted here from their ``openAPIV3Schema`` the way openapi2jsonschema does (objects closed with
``additionalProperties: false`` unless they preserve unknown fields). The samples in
``manifests/samples/`` are validated against the InferenceCluster schema too.

PodMonitor, ServiceMonitor and PrometheusRule are validated against the Prometheus
Operator's own CRDs at a pinned version (from the Go module proxy, fetched by
``hack/setup-test-tools.sh`` into the cache), converted the same way; none is skipped.
tests/integration/test_monitoring_crds.py has the API server accept them too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm_dev.devcluster.paths import cache_root
from tests.unit.test_chart_render import (
    ALL_MONITORING,
    HA_TWO_NAMESPACES,
    MONITORING_API,
    ROOT,
    render_chart,
    require_binary,
)
from tests.unit.tooling import filled

pytestmark = pytest.mark.needs_binary  # kubeconform, helm, kubectl and the schemas
SCHEMA_VERSION = "v1.36.0"  # = hack/fetch-kube-schemas.sh
MONITORING_KINDS = ("PodMonitor", "ServiceMonitor", "PrometheusRule")
PROMETHEUS_OPERATOR_VERSION = "v0.85.0"  # = hack/setup-test-tools.sh
CRD_FILES = (
    *sorted((ROOT / "crds").glob("*.yaml")),
    ROOT / "charts" / "sparkllm" / "crds" / "kopf.dev_peerings.yaml",
)


def monitoring_crd_files() -> list[Path]:
    """The Prometheus Operator's ServiceMonitor/PodMonitor/PrometheusRule CRDs, or skip/fail."""
    path = cache_root() / "prometheus-operator-crds" / PROMETHEUS_OPERATOR_VERSION
    return sorted(filled(path, marker=".complete").glob("monitoring.coreos.com_*.yaml"))


def kube_schema_dir() -> Path:
    """The v1.36 strict schemas: kubernetes-validate's (rewritten) cache, or skip / fail."""
    path = cache_root() / "kubernetes-json-schema" / f"{SCHEMA_VERSION}-local-strict"
    return filled(path, marker="deployment-apps-v1.json", how="run `make binaries`")


def _strict(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_json_schemas(crd: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(relative path, JSON schema) per served version of a CRD, kubeconform's layout."""
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    for version in crd["spec"]["versions"]:
        schema = _strict(version["schema"]["openAPIV3Schema"])
        properties = schema.setdefault("properties", {})
        properties["apiVersion"] = {"type": "string", "enum": [f"{group}/{version['name']}"]}
        properties["kind"] = {"type": "string", "enum": [kind]}
        properties["metadata"] = {"type": "object"}  # ObjectMeta: the API server's own
        schema["additionalProperties"] = False
        yield f"{group}/{kind.lower()}_{version['name']}.json", schema


@pytest.fixture(scope="module")
def crd_schema_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        for path in (*CRD_FILES, *monitoring_crd_files()):
            for crd in yaml.safe_load_all(path.read_text()):
                for relative, schema in crd_json_schemas(crd):
                    target = Path(tmp) / relative
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(json.dumps(schema))
        yield Path(tmp)


def kubeconform(documents: Sequence[Mapping[str, Any]], crd_dir: Path) -> tuple[int, str]:
    """Run kubeconform (strict) on the documents; (exit code, output)."""
    binary = require_binary(
        "kubeconform",
        how="GOBIN=<bin dir> go install github.com/yannh/kubeconform/cmd/kubeconform@v0.8.0",
    )
    kube = kube_schema_dir()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        fh.write(yaml.safe_dump_all(list(documents)))
    try:
        result = subprocess.run(
            [
                str(binary),
                "-strict",
                "-summary",
                "-kubernetes-version",
                SCHEMA_VERSION.lstrip("v"),
                "-schema-location",
                f"{kube.parent}/{{{{.NormalizedKubernetesVersion}}}}-local{{{{.StrictSuffix}}}}"
                "/{{.ResourceKind}}{{.KindSuffix}}.json",
                "-schema-location",
                f"{crd_dir}/{{{{.Group}}}}/{{{{.ResourceKind}}}}_{{{{.ResourceAPIVersion}}}}.json",
                fh.name,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.unlink(fh.name)
    return result.returncode, result.stdout + result.stderr


def summary(output: str) -> dict[str, int]:
    match = re.search(r"Valid: (\d+), Invalid: (\d+), Errors: (\d+), Skipped: (\d+)", output)
    assert match, output
    valid, invalid, errors, skipped = map(int, match.groups())
    return {"valid": valid, "invalid": invalid, "errors": errors, "skipped": skipped}


def kustomize(overlay: str) -> list[dict[str, Any]]:
    kubectl = require_binary("kubectl")
    out = subprocess.run(
        [str(kubectl), "kustomize", str(ROOT / "manifests" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


VALUE_SETS = {
    "defaults": {},
    "ha-namespaced": HA_TWO_NAMESPACES,
    "ha-all-namespaces": {"replicas": 2},
    "monitoring": {**ALL_MONITORING, "watchNamespaces": ["llm"]},
    "everything": {
        **ALL_MONITORING,
        **HA_TWO_NAMESPACES,
        "operator": {
            "verbose": True,
            "metricsPort": 9090,
            "healthPort": 9091,
            "extraArgs": ["--resync-seconds=30"],
            "env": [{"name": "X", "value": "1"}],
        },
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "priorityClassName": "high",
    },
}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_chart_render_is_schema_valid(name: str, crd_schema_dir: Path) -> None:
    docs = render_chart(VALUE_SETS[name], api_versions=MONITORING_API)
    code, output = kubeconform(docs, crd_schema_dir)
    assert code == 0, output
    counts = summary(output)
    assert counts == {"valid": len(docs), "invalid": 0, "errors": 0, "skipped": 0}


@pytest.mark.parametrize("overlay", ["base", "overlays/dev", "overlays/ha"])
def test_kustomize_build_is_schema_valid(overlay: str, crd_schema_dir: Path) -> None:
    docs = kustomize(overlay)
    code, output = kubeconform(docs, crd_schema_dir)
    assert code == 0, output
    assert summary(output)["valid"] == len(docs)


def test_samples_are_valid_inference_clusters(crd_schema_dir: Path) -> None:
    docs = [
        d
        for path in sorted((ROOT / "manifests" / "samples").glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text())
        if d
    ]
    assert {d["kind"] for d in docs} == {"InferenceCluster"}
    code, output = kubeconform(docs, crd_schema_dir)
    assert code == 0, output
    assert summary(output)["valid"] == len(docs)


@pytest.mark.parametrize(
    ("mutate", "complaint"),
    [
        (lambda d: d["spec"]["template"]["spec"]["containers"][0].update(bogus=1), "bogus"),
        (lambda d: d["spec"].update(replicas="two"), "replicas"),
    ],
    ids=["unknown-field", "wrong-type"],
)
def test_a_broken_object_is_caught(mutate: Any, complaint: str, crd_schema_dir: Path) -> None:
    """Control: strict mode really rejects what the API server would."""
    docs = render_chart()
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    mutate(sts)
    code, output = kubeconform([sts], crd_schema_dir)
    assert code != 0
    assert complaint in output


def test_a_broken_inference_cluster_is_caught(crd_schema_dir: Path) -> None:
    """Control: the CRD schema is really used (an unknown spec field fails)."""
    sample = yaml.safe_load((ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml").read_text())
    sample["spec"]["engine"]["pipelineParalel"] = 3
    code, output = kubeconform([sample], crd_schema_dir)
    assert code != 0
    assert "pipelineParalel" in output


@pytest.mark.parametrize("kind", MONITORING_KINDS)
def test_a_broken_monitoring_object_is_caught(kind: str, crd_schema_dir: Path) -> None:
    """Control: the Prometheus Operator's schemas are really used (unknown field fails)."""
    docs = render_chart({**ALL_MONITORING, "watchNamespaces": ["llm"]}, api_versions=MONITORING_API)
    obj = next(d for d in docs if d["kind"] == kind)
    code, output = kubeconform([obj], crd_schema_dir)
    assert code == 0, output
    obj["spec"]["scrapeEverything"] = True
    code, output = kubeconform([obj], crd_schema_dir)
    assert code != 0
    assert "scrapeEverything" in output
