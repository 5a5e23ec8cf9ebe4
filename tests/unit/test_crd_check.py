"""CRDs follow the chart, or the mismatch is loud (issue 32): the chart applies the CRD as a
template kept on uninstall and rollback, and an operator finding an older installed CRD
names the fields it lacks (reconcile/crd_check.py)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
import yaml

from sparkllm import __version__
from sparkllm.api.crd import build_crd
from sparkllm.keys import ANNOTATION_CRD_VERSION
from sparkllm.kube.client import KubeAPI
from sparkllm.reconcile import metrics
from sparkllm.reconcile.context import OperatorContext
from sparkllm.reconcile.crd_check import (
    crd_problem,
    extra_fields,
    missing_fields,
    newer_crd_note,
    schema_paths,
)
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


def test_a_crd_with_no_version_annotation_is_unrecorded() -> None:
    own = build_crd()
    older = _without(own, "spec", "engine", "tensorParallel")
    del older["metadata"]["annotations"]
    problem = crd_problem(older, own)
    assert problem is not None
    assert problem.startswith(
        "the installed CRD inferenceclusters.sparkllm.io (sparkllm.io/crd-version unrecorded) "
        f"is older than this operator ({__version__}): it lacks spec.engine.tensorParallel;"
    )
    unannotated = copy.deepcopy(own)
    del unannotated["metadata"]["annotations"]
    assert crd_problem(unannotated, own) is None  # the schema decides, not the annotation


def test_a_crd_not_serving_our_version_is_named_as_such() -> None:
    """It said "older than this operator: it lacks apiVersion, kind, metadata, spec,
    status" for a CRD that serves another version only."""
    own = build_crd()
    other = copy.deepcopy(own)
    other["spec"]["versions"][0]["name"] = "v1beta1"
    assert crd_problem(other, own) == (
        "the installed CRD inferenceclusters.sparkllm.io (sparkllm.io/crd-version "
        f"{__version__}) does not serve v1alpha1, the version this operator ({__version__}) "
        "reads (it serves v1beta1). Install this operator's CRD (helm upgrade applies it; "
        "or kubectl apply --server-side -f crds/)"
    )
    other["spec"]["versions"][0]["name"] = "v1alpha1"
    other["spec"]["versions"][0]["served"] = False
    assert "(it serves no version)" in (crd_problem(other, own) or "")


def test_a_newer_crd_is_no_problem_but_its_extra_fields_are_noted() -> None:
    """A CRD with fields this operator does not know (the operator rolled back, the kept
    CRD still new) was silent; an object setting one is then InvalidSpec. The log says
    which fields and why."""
    own = build_crd()
    newer = copy.deepcopy(own)
    engine = newer["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    engine["properties"]["engine"]["properties"]["speculative"] = {
        "type": "object", "properties": {"draft": {"type": "string"}},
    }  # fmt: skip
    newer["metadata"]["annotations"][ANNOTATION_CRD_VERSION] = "0.9.0"
    assert crd_problem(newer, own) is None
    assert extra_fields(newer, own) == ["spec.engine.speculative"]
    assert newer_crd_note(newer, own) == (
        "the installed CRD inferenceclusters.sparkllm.io (sparkllm.io/crd-version 0.9.0) is "
        f"newer than this operator ({__version__}): it has spec.engine.speculative, which "
        "this operator does not know; an InferenceCluster that sets one is InvalidSpec "
        "naming the field until the operator is upgraded"
    )
    assert newer_crd_note(copy.deepcopy(own), own) is None
    assert newer_crd_note(None, own) is None


@pytest.mark.needs_binary
def test_the_chart_applies_the_crd_as_a_kept_template_unless_told_not_to() -> None:
    crd = one(render_chart(), "CustomResourceDefinition")
    assert crd == yaml.safe_load((ROOT / "crds" / "sparkllm.io_inferenceclusters.yaml").read_text())
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert not find(render_chart({"crds": {"install": False}}), "CustomResourceDefinition")


class _CrdApi(KubeAPI):
    """Just the three calls the CRD warning makes (no API server: a unit test)."""

    def __init__(self, crd: JSON) -> None:  # no super(): no client is made
        self.crd = crd
        self.created: list[JSON] = []

    async def list(self, kind: Any, namespace: str | None = None, **_: Any) -> list[JSON]:
        return [self.crd] if kind.plural == "customresourcedefinitions" else []

    async def get(self, kind: Any, name: str, namespace: str | None = None) -> JSON | None:
        return {"apiVersion": "sparkllm.io/v1alpha1", "kind": "InferenceCluster",
                "metadata": {"name": name, "namespace": namespace, "uid": "u1"}}  # fmt: skip

    async def create(self, obj: Any) -> JSON | None:
        self.created.append(dict(obj))
        return dict(obj)


def test_a_crd_upgraded_after_the_start_is_no_longer_reported() -> None:
    """The Event tells the user to upgrade the CRD; after they did, objects reconciled for
    the first time still got CRDOutdated and the metric kept its count until the operator
    restarted. The CRD is read again before each warning now."""
    own = build_crd()
    api = _CrdApi(_without(own, "spec", "exposure"))
    ctx = OperatorContext()
    ctx._runtime["api"] = api
    ctx.crd_problem = "stale"
    asyncio.run(ctx._warn_crd(("llm", "one")))
    assert [e["reason"] for e in api.created] == ["CRDOutdated"]
    assert "it lacks spec.exposure;" in api.created[0]["message"]
    assert metrics.CRD_FIELDS_MISSING._value.get() == 1
    api.crd = copy.deepcopy(own)  # the user applied the new CRD
    asyncio.run(ctx._warn_crd(("llm", "two")))
    assert len(api.created) == 1
    assert ctx.crd_problem is None
    assert metrics.CRD_FIELDS_MISSING._value.get() == 0
