"""The operator's own Prometheus metrics (``sparkllm_`` prefix, small fixed label sets).

Served by ``sparkllm run`` on its metrics port. Series of a deleted InferenceCluster are
removed (``forget_cluster``), so dashboards do not show ghosts.
"""

from __future__ import annotations

import contextlib
from typing import Final

from prometheus_client import Counter, Gauge, Histogram

from sparkllm.api import Phase

RECONCILE_SECONDS: Final = Histogram(
    "sparkllm_reconcile_duration_seconds",
    "Time of one reconcile pass of an InferenceCluster.",
    ["result"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
RECONCILE_ERRORS: Final = Counter(
    "sparkllm_reconcile_errors_total",
    "Reconcile passes that failed, by error class.",
    ["error"],
)
REPLICAS: Final = Gauge(
    "sparkllm_replicas",
    "Replicas of an InferenceCluster by phase.",
    ["namespace", "cluster", "phase"],
)
CRD_FIELDS_MISSING: Final = Gauge(
    "sparkllm_crd_fields_missing",
    "Fields of this operator's InferenceCluster schema the installed CRD lacks (0: current).",
)
GANG_RESTARTS: Final = Counter(
    "sparkllm_gang_restarts_total",
    "Whole-replica restarts, by cause.",
    ["namespace", "cluster", "cause"],
)
QUARANTINED_NODES: Final = Gauge(
    "sparkllm_quarantined_nodes",
    "Nodes an InferenceCluster places no replica on (status.quarantine).",
    ["namespace", "cluster"],
)
FAILOVERS: Final = Counter(
    "sparkllm_node_failovers_total",
    "Replicas moved to a spare node group after a node of their group failed.",
    ["namespace", "cluster"],
)
WRITES: Final = Counter(
    "sparkllm_api_writes_total",
    "Writes the operator made to the Kubernetes API, by verb and kind.",
    ["verb", "kind"],
)


def record_replica_phases(namespace: str, cluster: str, phases: list[Phase]) -> None:
    for phase in Phase:
        count = sum(1 for p in phases if p is phase)
        REPLICAS.labels(namespace=namespace, cluster=cluster, phase=phase.value).set(count)


def forget_cluster(namespace: str, cluster: str) -> None:
    """Drop every series that names this InferenceCluster."""
    for phase in Phase:
        with contextlib.suppress(KeyError):
            REPLICAS.remove(namespace, cluster, phase.value)
    for series in (QUARANTINED_NODES, FAILOVERS):
        with contextlib.suppress(KeyError):
            series.remove(namespace, cluster)
    for labels in list(GANG_RESTARTS._metrics):  # prometheus-client has no prefix removal
        if labels[:2] == (namespace, cluster):
            GANG_RESTARTS.remove(*labels)
