"""`kubectl apply -k manifests/...`: accepted by the real API server, same objects as the chart.

Each kustomize tree (base, overlays/dev, overlays/ha) is built with kubectl's built-in
kustomize and compared object by object with ``helm template`` of the chart under the
equivalent values — the two install paths cannot drift apart. Then each is applied with a
server-side dry run (full admission and validation, nothing persisted) into the test's
namespace: the trees create the namespaces sparkllm-system and llm, which a shared
cluster's tests must not own, so a small wrapping kustomization moves everything into the
test namespace and drops the Namespace objects.
"""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm_dev.devcluster import DevCluster
from sparkllm_dev.testing import ROOT
from tests.unit.test_chart_render import render_chart, require_binary

pytestmark = pytest.mark.cluster

Obj = dict[str, Any]
Key = tuple[str, str, str]
OVERLAYS = {
    "base": {},
    "overlays/dev": {"watchNamespaces": ["llm"], "operator": {"verbose": True}},
    "overlays/ha": {"replicas": 2},
}
# Only kustomize has these: the chart gets its namespace from `helm install -n` and its
# CRDs from crds/ (checked byte for byte by tests/unit/test_chart_crds.py).
KUSTOMIZE_ONLY = {"Namespace", "CustomResourceDefinition"}
TOOL_LABEL = "app.kubernetes.io/managed-by"


def kustomize(path: Path) -> list[Obj]:
    kubectl = require_binary("kubectl")
    out = subprocess.run(
        [str(kubectl), "kustomize", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def comparable(objs: list[Obj]) -> dict[Key, Obj]:
    """Objects by (kind, namespace, name), without the installer's own label."""
    out: dict[Key, Obj] = {}
    for obj in copy.deepcopy(objs):
        if obj["kind"] in KUSTOMIZE_ONLY:
            continue
        labels = obj["metadata"].get("labels") or {}
        labels.pop(TOOL_LABEL, None)
        template = obj.get("spec", {}).get("template", {}).get("metadata", {})
        (template.get("labels") or {}).pop(TOOL_LABEL, None)
        meta = obj["metadata"]
        out[(obj["kind"], meta.get("namespace", ""), meta["name"])] = obj
    return out


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_kustomize_matches_the_chart(overlay: str) -> None:
    built = kustomize(ROOT / "manifests" / overlay)
    chart = comparable(render_chart(OVERLAYS[overlay]))
    ours = comparable(built)
    assert sorted(ours) == sorted(chart)
    for key, obj in chart.items():
        assert ours[key] == obj, f"{key} differs between kustomize and the chart"
    for obj in built:
        assert obj["metadata"].get("labels", {}).get(TOOL_LABEL) == "kustomize"
    crds = {o["metadata"]["name"] for o in built if o["kind"] == "CustomResourceDefinition"}
    assert "inferenceclusters.sparkllm.io" in crds
    assert ("kopfpeerings.kopf.dev" in crds) == (overlay == "overlays/ha")


def test_base_is_rendered_from_the_chart() -> None:
    result = subprocess.run(
        ["bash", str(ROOT / "hack" / "render-manifests.sh"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"HELM": str(require_binary("helm")), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_apply_k_is_accepted_by_the_api_server(
    overlay: str, devcluster: DevCluster, namespace: str, tmp_path: Path
) -> None:
    devcluster.kubectl(
        "apply",
        "--server-side",
        "-f",
        str(ROOT / "charts" / "sparkllm" / "crds" / "kopf.dev_peerings.yaml"),
    )  # fmt: skip  (a dry run cannot create a kind and its first object at once)
    devcluster.wait_established("clusterkopfpeerings.kopf.dev")
    namespaces = [o["metadata"]["name"] for o in kustomize(ROOT / "manifests" / overlay)
                  if o["kind"] == "Namespace"]  # fmt: skip
    wrapper = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(ROOT / "manifests" / overlay, tmp_path)],
        "namespace": namespace,
        "patches": [
            {"patch": yaml.safe_dump(
                {"$patch": "delete", "apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": ns}})}
            for ns in namespaces
        ],
    }  # fmt: skip
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(wrapper))
    result = devcluster.kubectl(
        "apply", "--server-side", "--dry-run=server", "--force-conflicts",
        "--field-manager=sparkllm-kustomize-test", "-k", str(tmp_path),
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    applied = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    expected = len(kustomize(tmp_path))
    assert len(applied) == expected, result.stdout
    assert any("statefulset.apps/sparkllm-operator" in line for line in applied)
