"""The keys the operator generates: the engine API key (unless the spec names one) and the
key of its own benchmark and acceptance Jobs.

With host networking, rank 0's port is open on the node's address and no NetworkPolicy
applies to host-network pods, so rank 0 always runs with ``--api-key``. When the spec
names no Secret, the operator creates one with a random token, owned by the
InferenceCluster (garbage-collected with it). This is the one create-if-absent in the
operator: a generated value must never be re-applied, or every pass would rotate it.
The pass observes the Secret (``reads.read_engine_key``), decides here to generate it
(``generated_key_secret``: a name, never a value), and ``execute`` creates it with a
token from ``execute.generate_token``: nothing pure ever sees a secret value.

The Jobs' key (``N-bench-key``, always generated, owned the same way) is the identity the
front door knows as ``sparkllm:bench`` (``render.names.BENCH_USER``; the gateway mounts it
beside the users' keys): the runs the operator makes present it, so they need no user's
key and no user needs their extensions. The pass observes only whether it exists
(``reads.read_bench_key``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkllm.api import InferenceCluster
from sparkllm.reconcile.decide.actions import JSON, GeneratedSecret
from sparkllm.render.names import (
    BENCH_KEY,
    BENCH_USER,
    COMPONENT_ENGINE,
    COMPONENT_GATEWAY,
    bench_key_secret_name,
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
    manifest = _owned_secret(ic, seen.ref.secret, component=COMPONENT_ENGINE)
    return GeneratedSecret(manifest=manifest, key=GENERATED_KEY)


def generated_bench_key(ic: InferenceCluster, *, exists: bool | None) -> GeneratedSecret | None:
    """The Jobs' key Secret to generate when it was seen missing (``exists`` False; None:
    not read, so nothing is decided). The gateway mounts it: generated with the rest."""
    if exists is not False:
        return None
    manifest = _owned_secret(
        ic, bench_key_secret_name(ic.metadata.name), component=COMPONENT_GATEWAY
    )
    holds = f"the API key of the operator's benchmark and acceptance Jobs (user {BENCH_USER})"
    return GeneratedSecret(manifest=manifest, key=BENCH_KEY, holds=holds)


def _owned_secret(ic: InferenceCluster, name: str, *, component: str) -> JSON:
    """An Opaque Secret without data, labelled and owned by the InferenceCluster."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": ic.metadata.namespace or "default",
            "labels": cluster_labels(ic.metadata.name, component),
            "ownerReferences": [owner_reference(name=ic.metadata.name, uid=ic.metadata.uid or "")],
        },
    }
