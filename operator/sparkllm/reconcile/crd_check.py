"""Is the installed InferenceCluster CRD as new as this operator? Said loudly when not.

Why: the API server prunes every field its CRD's schema does not know, silently, on every
write. An operator upgraded without its CRD (Helm never upgraded ``crds/``; a GitOps tree
that pins the old CRD) would then read a spec whose new fields are gone and act on their
defaults, and nothing would say so (issue 32). So at start the operator compares the
installed CRD's schema with its own (``api/crd.py``: every property path under ``spec``
and ``status``), and when the installed one lacks any it logs a warning naming them and
the CRD's ``sparkllm.io/crd-version``, sets ``sparkllm_crd_fields_missing``, and posts a
Warning Event ``CRDOutdated`` on each InferenceCluster it reconciles (once per object and
operator start). It goes on serving: what the installed schema keeps is served as before.

The comparison is pure (:func:`crd_problem`); :func:`check_installed_crd` reads the CRD
(the chart's RBAC lets the operator list CRDs: kopf watches them).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from sparkllm import __version__
from sparkllm.api.crd import build_crd
from sparkllm.api.meta import CRD_NAME, VERSION
from sparkllm.keys import ANNOTATION_CRD_VERSION
from sparkllm.kube.client import KubeAPI
from sparkllm.kube.kinds import Kind
from sparkllm.reconcile import metrics

logger = logging.getLogger("sparkllm.reconcile")

CRD_KIND: Final = Kind(
    "apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False
)
_SHOWN: Final = 8  # the message names this many missing fields, then counts the rest


def _schema(crd: Mapping[str, Any]) -> Mapping[str, Any]:
    for version in crd.get("spec", {}).get("versions") or []:
        if version.get("name") == VERSION:
            return dict(version.get("schema", {}).get("openAPIV3Schema") or {})
    return {}


def schema_paths(schema: Mapping[str, Any], prefix: str = "") -> set[str]:
    """Every property path of a structural schema (``spec.engine.image``; ``[]`` for the
    items of an array)."""
    paths: set[str] = set()
    for name, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}.{name}" if prefix else str(name)
        paths.add(path)
        paths |= schema_paths(sub, path)
    items = schema.get("items")
    if isinstance(items, Mapping):
        paths |= schema_paths(items, f"{prefix}[]")
    return paths


def missing_fields(installed: Mapping[str, Any], own: Mapping[str, Any]) -> list[str]:
    """The paths of ``own``'s schema that ``installed`` lacks, outermost only, sorted."""
    have = schema_paths(_schema(installed))
    lacking = sorted(p for p in schema_paths(_schema(own)) if p not in have)
    return [
        p
        for p in lacking
        if not any(p.startswith(f"{q}.") or p.startswith(f"{q}[]") for q in lacking if q != p)
    ]


def crd_problem(installed: Mapping[str, Any] | None, own: Mapping[str, Any]) -> str | None:
    """What is wrong with the installed CRD for this operator, or None."""
    if installed is None:
        return f"the CRD {CRD_NAME} is not installed"
    missing = missing_fields(installed, own)
    if not missing:
        return None
    annotations = installed.get("metadata", {}).get("annotations") or {}
    version = annotations.get(ANNOTATION_CRD_VERSION, "unrecorded")
    named = ", ".join(missing[:_SHOWN])
    more = f" and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else ""
    return (
        f"the installed CRD {CRD_NAME} ({ANNOTATION_CRD_VERSION} {version}) is older than "
        f"this operator ({__version__}): it lacks {named}{more}; the API server drops these "
        "fields from every InferenceCluster, so they act as unset. Upgrade the CRD "
        "(helm upgrade applies it; or kubectl apply --server-side -f crds/)"
    )


async def check_installed_crd(api: KubeAPI) -> str | None:
    """Read the installed CRD, log and count what it lacks; the problem, or None."""
    crds = await api.list(CRD_KIND)
    installed = next((c for c in crds if c.get("metadata", {}).get("name") == CRD_NAME), None)
    problem = crd_problem(installed, build_crd())
    missing = 0 if installed is None else len(missing_fields(installed, build_crd()))
    metrics.CRD_FIELDS_MISSING.set(missing)
    if problem is not None:
        logger.warning("%s", problem)
    return problem
