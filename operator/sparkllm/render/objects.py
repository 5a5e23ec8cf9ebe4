"""Kubernetes objects from templates: jinja2 lays out, Python decides.

Templates live in ``templates/`` and receive only computed values, each passed through
``tojson`` (so a value can never break the YAML) and parsed back with ``yaml.safe_load``.
``StrictUndefined`` turns a missing value into an error instead of an empty field. Each
object is stamped with a hash of itself (``sparkllm.io/desired-hash``) so reconcile can
tell, without a write, whether the live object already is what we want.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any

import jinja2
import yaml

from sparkllm.keys import ANNOTATION_HASH

JSON = dict[str, Any]


# libyaml's safe loader when PyYAML has it (the same YAML, parsed in C): a pass renders
# every desired object, and parsing dominates its time.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("sparkllm.render", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # YAML, not HTML; every value goes through tojson
        keep_trailing_newline=True,
    )


def render_template(template: str, **values: Any) -> JSON:
    """Render ``templates/<template>`` with ``values`` and parse the YAML result."""
    text = _environment().get_template(template).render(**values)
    obj: JSON = yaml.load(text, Loader=_LOADER)
    return obj


def desired_hash(obj: JSON) -> str:
    """A stable digest of an object as we would apply it (without its own hash)."""
    clean: JSON = json.loads(json.dumps(obj))
    clean.get("metadata", {}).get("annotations", {}).pop(ANNOTATION_HASH, None)
    digest = hashlib.sha256(json.dumps(clean, sort_keys=True).encode()).hexdigest()
    return digest[:16]


def template_hash(template: JSON, *, ignore_label: str) -> str:
    """Digest of a pod template, ignoring one label (the restart generation)."""
    clean: JSON = json.loads(json.dumps(template))
    clean.get("metadata", {}).get("labels", {}).pop(ignore_label, None)
    return hashlib.sha256(json.dumps(clean, sort_keys=True).encode()).hexdigest()[:16]


def stamp_hash(obj: JSON) -> JSON:
    """Return ``obj`` with its desired-hash annotation set."""
    stamped: JSON = json.loads(json.dumps(obj))
    stamped["metadata"].setdefault("annotations", {})[ANNOTATION_HASH] = desired_hash(obj)
    return stamped


def is_current(live: JSON | None, desired: JSON) -> bool:
    """True when the live object was applied from exactly this desired object."""
    if live is None:
        return False
    live_hash = (live.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_HASH)
    want = desired["metadata"].get("annotations", {}).get(ANNOTATION_HASH)
    return live_hash is not None and live_hash == want
