"""Is the installed InferenceCluster CRD as new as this operator? Said loudly when not.

Why: the API server prunes every field its CRD's schema does not know, silently, on every
write. An operator upgraded without its CRD (Helm never upgraded ``crds/``; a GitOps tree
that pins the old CRD) would then read a spec whose new fields are gone and act on their
defaults, and nothing would say so (issue 32). So at start the operator compares the
installed CRD's schema with its own (``api/crd.py``: every property path under ``spec``
and ``status``), and when the installed one lacks any it logs a warning naming them and
the CRD's ``sparkllm.io/crd-version``, sets ``sparkllm_crd_fields_missing``, and posts a
Warning Event ``CRDOutdated`` on each InferenceCluster it reconciles (once per object and
operator start; the CRD is read again before each, so an upgraded one stops them). It
goes on serving: what the installed schema keeps is served as before.
A CRD that does not serve this operator's API version is named as such (not as "lacking"
every field). A CRD NEWER than the operator (rolled back while the kept CRD stays new)
only gets a log warning naming the fields this operator does not know: objects that do
not set them are served as before, and one that does is InvalidSpec naming the field.

The comparison is pure (:func:`crd_problem`); :func:`check_installed_crd` reads the CRD
(the chart's RBAC lets the operator list CRDs: kopf watches them).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
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


def _served(crd: Mapping[str, Any]) -> list[str]:
    """The API versions the CRD serves, in its order."""
    versions = crd.get("spec", {}).get("versions") or []
    return [str(v.get("name")) for v in versions if v.get("served")]


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


def extra_fields(installed: Mapping[str, Any], own: Mapping[str, Any]) -> list[str]:
    """The paths the installed CRD has and this operator does not know, outermost only:
    a newer CRD (an operator rolled back while the CRD, kept, stays new)."""
    return missing_fields(own, installed)


def _crd_version(installed: Mapping[str, Any]) -> str:
    annotations = installed.get("metadata", {}).get("annotations") or {}
    return str(annotations.get(ANNOTATION_CRD_VERSION, "unrecorded"))


def _listed(fields: Sequence[str]) -> str:
    """The first few field paths, and how many more: one line of a log or an Event."""
    more = f" and {len(fields) - _SHOWN} more" if len(fields) > _SHOWN else ""
    return ", ".join(fields[:_SHOWN]) + more


def newer_crd_note(installed: Mapping[str, Any] | None, own: Mapping[str, Any]) -> str | None:
    """The log's words when the installed CRD has fields this operator does not know: the
    API server keeps them, and this operator refuses an object that sets one (InvalidSpec
    naming the field: "Extra inputs are not permitted")."""
    extra = [] if installed is None else extra_fields(installed, own)
    if not extra:
        return None
    return (
        f"the installed CRD {CRD_NAME} ({ANNOTATION_CRD_VERSION} {_crd_version(installed or {})}) "
        f"is newer than this operator ({__version__}): it has {_listed(extra)}, which this "
        "operator does not know; an InferenceCluster that sets one is InvalidSpec naming "
        "the field until the operator is upgraded"
    )


def crd_problem(installed: Mapping[str, Any] | None, own: Mapping[str, Any]) -> str | None:
    """What is wrong with the installed CRD for this operator, or None."""
    if installed is None:
        return f"the CRD {CRD_NAME} is not installed"
    version = _crd_version(installed)
    if VERSION not in _served(installed):
        serves = ", ".join(_served(installed)) or "no version"
        return (
            f"the installed CRD {CRD_NAME} ({ANNOTATION_CRD_VERSION} {version}) does not "
            f"serve {VERSION}, the version this operator ({__version__}) reads (it serves "
            f"{serves}). Install this operator's CRD (helm upgrade applies it; or kubectl "
            "apply --server-side -f crds/)"
        )
    missing = missing_fields(installed, own)
    if not missing:
        return None
    return (
        f"the installed CRD {CRD_NAME} ({ANNOTATION_CRD_VERSION} {version}) is older than "
        f"this operator ({__version__}): it lacks {_listed(missing)}; the API server drops these "
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
    note = newer_crd_note(installed, build_crd())
    if note is not None:
        logger.warning("%s", note)
    return problem
