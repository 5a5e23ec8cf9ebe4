"""What a rank pod records about its own making, so an upgrade restarts no engine by itself.

Why: the operator restarts a replica whose pods were made from another template than the
one it renders now. One hash over the whole template cannot say WHY they differ, and a new
operator version (its own image in the init containers, a changed launcher) made every
running replica "outdated" — every operator upgrade was a gang restart of every replica,
reported as "spec changed" (issue 32). So every rank pod template carries, besides the
whole-template hash (``sparkllm.io/template-hash``):

- ``sparkllm.io/template-parts``: a short digest per section of the template — the parts
  that make the engine process (the engine container without its probes; the pod spec:
  node, network, security, the volumes the engine mounts) and the parts that do not (init
  containers and the volumes only they mount, probes, labels, image pull secrets) — so
  what changed can be named;
- ``sparkllm.io/spec-hash``: a digest of the user's spec sections that shape a rank pod
  (model, engine, network, the startup grace), so a user's change is told from the
  operator's own. With ``spec.model.source`` the source counts as the digest of the copy
  the replica runs (render/model_layout.py): a new revision changes no replica's hash
  until that replica's group holds the new copy, and then rolls it (one at a time);
- ``sparkllm.io/model-digest`` (with a source, once the copy is staged): that digest,
  so the roll's cause names the old and the new copy;
- ``sparkllm.io/operator-version``: the operator version that rendered it (its image's tag,
  the chart's appVersion unless ``image.tag``/``image.digest`` says otherwise).

Pure: reconcile/decide/upgrade.py compares these against the current rendering.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sparkllm import __version__
from sparkllm.api import InferenceClusterSpec
from sparkllm.keys import (
    ANNOTATION_MODEL_DIGEST,
    ANNOTATION_OPERATOR_VERSION,
    ANNOTATION_SPEC_HASH,
    ANNOTATION_TEMPLATE_HASH,
    ANNOTATION_TEMPLATE_PARTS,
    LABEL_GENERATION,
    LABEL_SERVING,
)
from sparkllm.render.objects import JSON, template_hash
from sparkllm.render.product_image import ProductImage

_PROBES: Final = ("startupProbe", "readinessProbe", "livenessProbe")
# Section -> what it is called in the condition; the first two make the engine process.
SECTIONS: Final[dict[str, str]] = {
    "engine": "engine container",
    "pod": "pod spec (node, network, volumes the engine mounts)",
    "init": "init containers",
    "probes": "probes",
    "labels": "labels",
    "pull": "image pull secrets",
}
ENGINE_SECTIONS: Final = frozenset({"engine", "pod"})


def _digest(value: Any, size: int = 16) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:size]


def template_sections(template: Mapping[str, Any]) -> dict[str, Any]:
    """The pod template cut into the sections of :data:`SECTIONS`."""
    spec: Mapping[str, Any] = template["spec"]
    containers = spec.get("containers") or []
    mounted = {m["name"] for c in containers for m in c.get("volumeMounts") or []}
    volumes = spec.get("volumes") or []
    skip = {"containers", "initContainers", "imagePullSecrets", "volumes"}
    pod = {k: v for k, v in spec.items() if k not in skip}
    pod["volumes"] = [v for v in volumes if v["name"] in mounted]
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    for moving in (LABEL_GENERATION, LABEL_SERVING):  # a restart's and a drain's, not a change
        labels.pop(moving, None)
    return {
        "engine": [{k: v for k, v in c.items() if k not in _PROBES} for c in containers],
        "pod": pod,
        "init": {
            "initContainers": spec.get("initContainers") or [],
            "volumes": [v for v in volumes if v["name"] not in mounted],
        },
        "probes": [{k: c[k] for k in _PROBES if k in c} for c in containers],
        "labels": labels,
        "pull": spec.get("imagePullSecrets") or [],
    }


def spec_digest(spec: InferenceClusterSpec, *, model_digest: str | None = None) -> str:
    """The user's spec sections that shape a rank pod (not replicas, admission, gateway,
    exposure, monitoring, placement, the restart budget: no rank pod carries them).

    Only what differs from the defaults counts: a new operator version that adds a field
    with a default changes its own rendering, not the user's spec, so it waits as an
    operator update instead of rolling as a spec change. A version must NOT change an
    existing field's default: the API server stores the CRD's defaults in every object,
    so an object keeps the old default's value, which then differs from the new default
    and counts as the user's; every replica would roll as "spec changed" on the upgrade.
    (Changing a default is a new field, or a documented spec migration.)"""
    data = spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    shaping = {k: data.get(k) for k in ("model", "engine", "network")}
    model = shaping["model"]
    if model_digest is not None and isinstance(model, dict) and "source" in model:
        shaping["model"] = {**model, "source": model_digest}  # the copy it runs (above)
    shaping["startupGraceSeconds"] = (data.get("restartPolicy") or {}).get("startupGraceSeconds")
    return _digest(shaping)


def operator_version(image: ProductImage) -> str:
    """The operator's version as rank pods record it: its image's tag, else its package
    version and the digest's first hex digits."""
    name, _, digest = image.reference.partition("@")
    tag = name.rsplit("/", 1)[-1].partition(":")[2]
    if tag:
        return tag
    return f"{__version__}@{digest.partition(':')[2][:12]}"


def stamp(
    template: JSON,
    *,
    spec: InferenceClusterSpec,
    image: ProductImage,
    model_digest: str | None = None,
    staged: bool = False,
) -> dict[str, str]:
    """The annotations a rank pod template carries (its metadata has no others);
    ``model_digest`` the copy it mounts (a source only), recorded once ``staged``."""
    parts = ",".join(f"{k}={_digest(v, 8)}" for k, v in template_sections(template).items())
    stamped = {
        ANNOTATION_TEMPLATE_HASH: template_hash(template, ignore_label=LABEL_GENERATION),
        ANNOTATION_TEMPLATE_PARTS: parts,
        ANNOTATION_SPEC_HASH: spec_digest(spec, model_digest=model_digest),
        ANNOTATION_OPERATOR_VERSION: operator_version(image),
    }
    if staged and model_digest is not None:
        stamped[ANNOTATION_MODEL_DIGEST] = model_digest
    return stamped


@dataclass(frozen=True)
class Stamp:
    """A pod's (or a desired template's) stamp, read back; ``None``: not recorded (a pod
    made by an operator before the stamp existed)."""

    template: str | None
    parts: dict[str, str]
    spec: str | None
    version: str | None
    model: str | None = None  # the staged copy's digest (spec.model.source only)

    @classmethod
    def of(cls, annotations: Mapping[str, Any] | None) -> Stamp:
        got = annotations or {}

        def text(key: str) -> str | None:
            value = got.get(key)
            return None if value is None else str(value)

        parts = dict(
            p.split("=", 1) for p in (text(ANNOTATION_TEMPLATE_PARTS) or "").split(",") if "=" in p
        )
        return cls(
            template=text(ANNOTATION_TEMPLATE_HASH),
            parts=parts,
            spec=text(ANNOTATION_SPEC_HASH),
            version=text(ANNOTATION_OPERATOR_VERSION),
            model=text(ANNOTATION_MODEL_DIGEST),
        )

    def changed(self, want: Stamp) -> tuple[str, ...]:
        """The sections (keys of :data:`SECTIONS`) that differ from ``want``; every one
        when this stamp has no parts recorded."""
        return tuple(s for s in SECTIONS if self.parts.get(s) != want.parts.get(s))
