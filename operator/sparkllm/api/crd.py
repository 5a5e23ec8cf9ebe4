"""The InferenceCluster CustomResourceDefinition, generated from the pydantic models.

DESIGN.md: the models are the single source of truth; ``crds/sparkllm.io_inferenceclusters.yaml``
is this module's output, checked in, and ``tests/unit/test_api_crd.py`` fails when the
two drift. Regenerate with ``hack/gen-crd.sh`` (``python -m sparkllm.api.crd``).

Besides the schema the CRD carries what makes the resource pleasant to operate: the
status subresource (status is written separately from spec, so a user's apply never
clobbers it), the scale subresource (``kubectl scale icl/N --replicas=2``, and
autoscalers), printer columns for ``kubectl get icl``, the short name ``icl`` and the
category ``sparkllm`` (``kubectl get sparkllm``).
"""

from typing import Any

import yaml

from sparkllm import __version__
from sparkllm.api.meta import (
    CATEGORIES,
    CRD_NAME,
    GROUP,
    KIND,
    LIST_KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
)
from sparkllm.api.schema import JsonSchema, structural_schema
from sparkllm.api.spec import InferenceClusterSpec, ObjectMeta
from sparkllm.api.status import InferenceClusterStatus
from sparkllm.keys import ANNOTATION_CRD_VERSION

# The chart ships the CRD as a template (charts/sparkllm/templates/crds.yaml), so `helm
# upgrade` updates it; Helm must never delete it (deleting a CRD deletes every
# InferenceCluster, i.e. every model): not on uninstall, not on a rollback to a chart
# without it. The version says which sparkllm release's schema it carries (the operator
# names it when the installed CRD lacks fields it knows: reconcile/crd_check.py).
CRD_ANNOTATIONS = {"helm.sh/resource-policy": "keep", ANNOTATION_CRD_VERSION: __version__}

GENERATED_HEADER = (
    "# Generated from the pydantic models in sparkllm.api by `python -m sparkllm.api.crd`\n"
    "# (hack/gen-crd.sh). Do not edit: change the models and regenerate.\n"
)

PRINTER_COLUMNS: tuple[dict[str, str | int], ...] = (
    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas",
     "description": "Desired replicas"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas",
     "description": "Replicas serving"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase",
     "description": "Summary of the observed state"},
    # A start of many minutes, watched (kubectl get icl -w): the least advanced rank's
    # stage, shards, time against startupGraceSeconds and the last start's duration.
    {"name": "Start", "type": "string", "jsonPath": ".status.start",
     "description": "Start stage of the least advanced rank, e.g. "
                    "LoadingWeights:12/46:95s/1200s~300s; Ready:<last start, s>"},
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.servedName",
     "description": "Model name clients request"},
    {"name": "PP", "type": "integer", "jsonPath": ".spec.engine.pipelineParallel",
     "description": "Pipeline stages (nodes) per replica"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    # -o wide (priority 1): where to send requests, why it is (not) Ready, how often it
    # restarted, without reading the YAML.
    {"name": "Endpoint", "type": "string", "jsonPath": ".status.frontDoor.url", "priority": 1,
     "description": "Where clients reach the front door (status.frontDoor.url)"},
    {"name": "Reason", "type": "string", "priority": 1,
     "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
     "description": "Reason of the Ready condition"},
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts", "priority": 1,
     "description": "Gang restarts of every replica, summed"},
)  # fmt: skip

SCALE_SUBRESOURCE = {
    "specReplicasPath": ".spec.replicas",
    "statusReplicasPath": ".status.replicas",
    "labelSelectorPath": ".status.selector",
}


def build_openapi_schema() -> JsonSchema:
    """The ``openAPIV3Schema`` of the served version."""
    spec = structural_schema(InferenceClusterSpec.model_json_schema(by_alias=True))
    status = structural_schema(
        InferenceClusterStatus.model_json_schema(by_alias=True), in_status=True
    )
    name = structural_schema(ObjectMeta.model_json_schema(by_alias=True))["properties"]["name"]
    spec["description"] = (
        "spec is the desired state: one served model, as `replicas` independent replicas "
        "of `engine.tensorParallel` x `engine.pipelineParallel` DGX Spark nodes."
    )
    status["description"] = "status is the observed state, written only by the operator."
    return {
        "description": (
            "InferenceCluster serves one large language model across NVIDIA DGX Spark "
            "nodes with SGLang tensor and pipeline parallelism: each replica is one rank per "
            "node, "
            "restarted as a whole when any rank drops; a gateway in front authenticates, "
            "caps and queues requests."
        ),
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {
                "description": "apiVersion is the versioned schema of this object: "
                f"{GROUP}/{VERSION}.",
                "type": "string",
            },
            "kind": {"description": f"kind is {KIND}.", "type": "string"},
            "metadata": {"type": "object", "properties": {"name": name}},
            "spec": spec,
            "status": status,
        },
    }


def build_crd() -> dict[str, Any]:
    """The complete CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {"app.kubernetes.io/part-of": "sparkllm"},
            "annotations": dict(CRD_ANNOTATIONS),
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": LIST_KIND,
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": list(CATEGORIES),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": build_openapi_schema()},
                    "subresources": {"status": {}, "scale": dict(SCALE_SUBRESOURCE)},
                    "additionalPrinterColumns": [dict(column) for column in PRINTER_COLUMNS],
                }
            ],
        },
    }


def render_crd_yaml() -> str:
    """The CRD as the YAML checked in under ``crds/``."""
    body = yaml.safe_dump(build_crd(), sort_keys=False, width=100, allow_unicode=True)
    return GENERATED_HEADER + body


def main() -> None:
    """Print the CRD YAML (``python -m sparkllm.api.crd``)."""
    print(render_crd_yaml(), end="")


if __name__ == "__main__":
    main()
