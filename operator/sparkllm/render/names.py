"""Names, labels and owner references of everything the operator creates.

One spelling of each derived name (DESIGN.md: ``N-r{r}-rank{k}``, ``N-r{r}``, ``N``), so
render, reconcile, the gateway's discovery selector and the tests all agree. The label
set is small and fixed: it is what the operator prunes by, what the router discovers by,
and what Prometheus series carry; its ``sparkllm.io/`` keys are ``sparkllm.keys``'.
"""

from __future__ import annotations

from typing import Any, Final

from sparkllm.api import API_VERSION, KIND
from sparkllm.keys import LABEL_CLUSTER, LABEL_RANK, LABEL_REPLICA

LABEL_COMPONENT: Final = "app.kubernetes.io/component"
MANAGED_BY: Final = "sparkllm-operator"
COMPONENT_ENGINE: Final = "engine"
COMPONENT_GATEWAY: Final = "gateway"


def rank_statefulset_name(cluster: str, replica: int, rank: int) -> str:
    return f"{cluster}-r{replica}-rank{rank}"


def rank_pod_name(cluster: str, replica: int, rank: int) -> str:
    """The one pod of a rank StatefulSet (ordinal 0)."""
    return f"{rank_statefulset_name(cluster, replica, rank)}-0"


def replica_service_name(cluster: str, replica: int) -> str:
    return f"{cluster}-r{replica}"


def gateway_name(cluster: str) -> str:
    return cluster


def engine_key_secret_name(cluster: str) -> str:
    """The Secret the operator generates when spec.engine.apiKeySecretRef is absent."""
    return f"{cluster}-engine-key"


# The identity the operator provisions for its own benchmark and acceptance Jobs: a key it
# generates (Secret ``N-bench-key``), which the front door accepts as this user and lets
# send what the runs need (``ignore_eos``). A ':' is in no Secret data key, so no user of
# the users' Secret can be, or shadow, this one.
BENCH_USER: Final = "sparkllm:bench"
BENCH_KEY: Final = "token"  # the key's data key in that Secret
# What the runs send beyond OpenAI's fields (sparkllm.bench: max_tokens with ignore_eos,
# for exact output lengths, as bench_serving does): granted to BENCH_USER alone.
BENCH_EXTENSIONS: Final = ("ignore_eos",)


def bench_key_secret_name(cluster: str) -> str:
    """The Secret the operator generates for its benchmark and acceptance Jobs' key."""
    return f"{cluster}-bench-key"


def cluster_selector(cluster: str) -> str:
    """Label selector of every object of one InferenceCluster (status.selector)."""
    return f"{LABEL_CLUSTER}={cluster}"


def cluster_labels(cluster: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "sparkllm",
        "app.kubernetes.io/instance": cluster,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        LABEL_COMPONENT: component,
        LABEL_CLUSTER: cluster,
    }


def replica_labels(cluster: str, replica: int) -> dict[str, str]:
    return {**cluster_labels(cluster, COMPONENT_ENGINE), LABEL_REPLICA: str(replica)}


def rank_selector_labels(cluster: str, replica: int, rank: int) -> dict[str, str]:
    """The immutable selector of a rank StatefulSet (never includes the generation)."""
    return {LABEL_CLUSTER: cluster, LABEL_REPLICA: str(replica), LABEL_RANK: str(rank)}


def rank_labels(cluster: str, replica: int, rank: int) -> dict[str, str]:
    return {**replica_labels(cluster, replica), LABEL_RANK: str(rank)}


def owner_reference(*, name: str, uid: str) -> dict[str, Any]:
    """Controller owner reference to the InferenceCluster: garbage collection does the rest."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
