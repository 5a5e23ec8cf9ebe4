"""CRDs follow the chart, or the mismatch is loud (issue 32): the chart applies the CRD as a
template kept on uninstall and rollback, and an operator finding an older installed CRD
names the fields it lacks (reconcile/crd_check.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from sparkllm import __version__
from sparkllm.api.crd import build_crd
from sparkllm.keys import ANNOTATION_CRD_VERSION
from sparkllm.reconcile.crd_check import crd_problem, missing_fields, schema_paths
from tests.unit.test_chart_render import ROOT, find, one, render_chart

JSON = dict[str, Any]


def _without(crd: JSON, *path: str) -> JSON:
    """A copy of ``crd`` whose schema lacks the property at ``path`` (an older CRD)."""
    older = copy.deepcopy(crd)
    node = older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for name in path[:-1]:
        node = node["properties"][name]
    del node["properties"][path[-1]]
    return older


def test_the_generated_crd_carries_keep_and_its_version() -> None:
    annotations = build_crd()["metadata"]["annotations"]
    assert annotations == {"helm.sh/resource-policy": "keep", ANNOTATION_CRD_VERSION: __version__}


def test_the_same_crd_is_no_problem() -> None:
    own = build_crd()
    assert crd_problem(copy.deepcopy(own), own) is None
    assert {"spec.engine.image", "status.conditions[].type"} <= schema_paths(
        own["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    )


def test_an_older_crd_is_named_with_the_fields_it_lacks() -> None:
    own = build_crd()
    older = _without(_without(own, "spec", "engine", "image"), "spec", "restartPolicy")
    older["metadata"]["annotations"][ANNOTATION_CRD_VERSION] = "0.0.9"
    assert missing_fields(older, own) == ["spec.engine.image", "spec.restartPolicy"]
    problem = crd_problem(older, own)
    assert problem is not None
    assert problem.startswith(
        "the installed CRD inferenceclusters.sparkllm.io (sparkllm.io/crd-version 0.0.9) is "
        f"older than this operator ({__version__}): it lacks spec.engine.image, "
        "spec.restartPolicy; the API server drops these fields"
    )
    assert crd_problem(None, own) == "the CRD inferenceclusters.sparkllm.io is not installed"


@pytest.mark.needs_binary
def test_the_chart_applies_the_crd_as_a_kept_template_unless_told_not_to() -> None:
    crd = one(render_chart(), "CustomResourceDefinition")
    assert crd == yaml.safe_load((ROOT / "crds" / "sparkllm.io_inferenceclusters.yaml").read_text())
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert not find(render_chart({"crds": {"install": False}}), "CustomResourceDefinition")
