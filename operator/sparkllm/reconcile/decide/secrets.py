"""The engine API key: referenced by the spec, or generated once and owned.

With host networking, rank 0's port is open on the node's address and no NetworkPolicy
applies to host-network pods, so rank 0 always runs with ``--api-key``. When the spec
names no Secret, the operator creates one with a random token, owned by the
InferenceCluster (garbage-collected with it). This is the one create-if-absent in the
operator: a generated value must never be re-applied, or every pass would rotate it.
The pass observes the Secret (``reads.read_engine_key``), decides here to generate it
(``generated_key_secret``: a name, never a value), and ``execute`` creates it with a
token from ``execute.generate_token``: nothing pure ever sees a secret value.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkllm.api import InferenceCluster
from sparkllm.reconcile.decide.actions import JSON, GeneratedSecret
from sparkllm.render.names import (
    COMPONENT_ENGINE,
    cluster_labels,
    engine_key_secret_name,
    owner_reference,
)
from sparkllm.render.ranks import EngineKeyRef

GENERATED_KEY = "token"


def engine_key_ref(ic: InferenceCluster) -> EngineKeyRef:
    ref = ic.spec.engine.api_key_secret_ref
    if ref is not None:
        return EngineKeyRef(secret=ref.name, key=ref.key)
    return EngineKeyRef(secret=engine_key_secret_name(ic.metadata.name), key=GENERATED_KEY)


@dataclass(frozen=True)
class EngineKeySeen:
    """The engine key as observed: its reference, whether its Secret exists, its value."""

    ref: EngineKeyRef
    exists: bool = False
    value: str | None = None  # None: the Secret or its key is missing


def generated_key_secret(ic: InferenceCluster, seen: EngineKeySeen) -> GeneratedSecret | None:
    """The Secret to generate, when the spec names none and it does not exist yet.

    A missing user-named Secret is reported, not created: the user owns it.
    """
    if seen.exists or ic.spec.engine.api_key_secret_ref is not None:
        return None
    manifest: JSON = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": seen.ref.secret,
            "namespace": ic.metadata.namespace or "default",
            "labels": cluster_labels(ic.metadata.name, COMPONENT_ENGINE),
            "ownerReferences": [owner_reference(name=ic.metadata.name, uid=ic.metadata.uid or "")],
        },
    }
    return GeneratedSecret(manifest=manifest, key=GENERATED_KEY)
