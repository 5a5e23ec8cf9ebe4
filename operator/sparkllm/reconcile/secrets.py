"""The engine API key: referenced by the spec, or generated once and owned.

With host networking, rank 0's port is open on the node's address and no NetworkPolicy
applies to host-network pods, so rank 0 always runs with ``--api-key``. When the spec
names no Secret, the operator creates one with a random token, owned by the
InferenceCluster (garbage-collected with it). This is the one create-if-absent in the
operator: a generated value must never be re-applied, or every pass would rotate it.
"""

from __future__ import annotations

import base64
import secrets

from sparkllm.api import InferenceCluster
from sparkllm.reconcile.kube import KubeAPI, lookup_kind
from sparkllm.render.names import (
    COMPONENT_ENGINE,
    cluster_labels,
    engine_key_secret_name,
    owner_reference,
)
from sparkllm.render.ranks import EngineKeyRef

SECRET = lookup_kind("v1", "Secret")
GENERATED_KEY = "token"


def engine_key_ref(ic: InferenceCluster) -> EngineKeyRef:
    ref = ic.spec.engine.api_key_secret_ref
    if ref is not None:
        return EngineKeyRef(secret=ref.name, key=ref.key)
    return EngineKeyRef(secret=engine_key_secret_name(ic.metadata.name), key=GENERATED_KEY)


async def ensure_engine_key(api: KubeAPI, ic: InferenceCluster) -> tuple[EngineKeyRef, str | None]:
    """The key's reference and value (None when its Secret or key does not exist).

    Generates the Secret when the spec names none and it does not exist yet. A missing
    user-named Secret is reported, not created: the user owns it.
    """
    ref = engine_key_ref(ic)
    namespace = ic.metadata.namespace or "default"
    live = await api.get(SECRET, ref.secret, namespace)
    if live is not None:
        encoded = (live.get("data") or {}).get(ref.key)
        return ref, base64.b64decode(encoded).decode() if encoded else None
    if ic.spec.engine.api_key_secret_ref is not None:
        return ref, None
    # Hex, not urlsafe base64: defence in depth. The rendered args attach the key with
    # "=" (`--api-key=$(KEY)`, render/argv.py), so a leading "-" no longer reaches
    # argparse as an option; a generated key still never starts with one.
    value = secrets.token_hex(32)
    token = base64.b64encode(value.encode()).decode()
    await api.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": ref.secret,
                "namespace": namespace,
                "labels": cluster_labels(ic.metadata.name, COMPONENT_ENGINE),
                "ownerReferences": [
                    owner_reference(name=ic.metadata.name, uid=ic.metadata.uid or "")
                ],
            },
            "data": {GENERATED_KEY: token},
        }
    )
    return ref, value
