"""The kinds a pass touches, the objects an InferenceCluster owns, what to apply and prune.

Why one module: the owned kinds are known here and nowhere else, and it is the same
three moves every pass — list each owned kind by the cluster's selector (plus nodes and
rank pods; the observe step's ``reads.read_owned``, in ``OWNED`` order), choose the
desired objects whose live copy differs (so a pass with nothing to do writes nothing),
and choose what is no longer desired, in reverse apply order and with its uid as a
precondition, so a same-named replacement made meanwhile is never the one deleted
(here, pure; ``execute`` writes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from sparkllm.kube.kinds import INFERENCE_CLUSTER, JSON, lookup_kind
from sparkllm.reconcile.decide.actions import Removal
from sparkllm.reconcile.decide.replicas import Observed
from sparkllm.render.objects import is_current

STS: Final = lookup_kind("apps/v1", "StatefulSet")
SVC: Final = lookup_kind("v1", "Service")
POD: Final = lookup_kind("v1", "Pod")
NODE: Final = lookup_kind("v1", "Node")
DEPLOY: Final = lookup_kind("apps/v1", "Deployment")
SA: Final = lookup_kind("v1", "ServiceAccount")
ROLE: Final = lookup_kind("rbac.authorization.k8s.io/v1", "Role")
ROLE_BINDING: Final = lookup_kind("rbac.authorization.k8s.io/v1", "RoleBinding")
# spec.exposure (render/exposure.py, render/inference_pool.py); the Gateway API and
# Inference Extension CRDs are optional: listed as empty where they are not installed.
INGRESS: Final = lookup_kind("networking.k8s.io/v1", "Ingress")
HTTP_ROUTE: Final = lookup_kind("gateway.networking.k8s.io/v1", "HTTPRoute")
INFERENCE_POOL: Final = lookup_kind("inference.networking.k8s.io/v1", "InferencePool")
# spec.monitoring (render/monitors.py): optional too, and the chart grants it only when
# the API is served at install time, so a list may also be refused (403): read as none,
# and said in the Monitored condition (decide/monitoring.py), never a failed pass.
POD_MONITOR: Final = lookup_kind("monitoring.coreos.com/v1", "PodMonitor")
MAY_BE_FORBIDDEN: Final = (POD_MONITOR,)
# Read and written beside the owned kinds: the object itself, its generated key Secret
# (create-if-absent, never pruned), benchmark Jobs (created, never updated; their owner
# reference removes them).
IC: Final = INFERENCE_CLUSTER
SECRET: Final = lookup_kind("v1", "Secret")
JOB: Final = lookup_kind("batch/v1", "Job")
# In apply order (a Role before the router that needs it); pruned in reverse.
OWNED: Final = (
    SA, ROLE, ROLE_BINDING, STS, SVC, DEPLOY, INGRESS, HTTP_ROUTE, INFERENCE_POOL, POD_MONITOR,
)  # fmt: skip


def empty() -> Observed:
    """No nodes, pods or owned objects: a fresh cluster (offline render), or nothing read."""
    return Observed(nodes={}, pods=[], owned={kind.kind: [] for kind in OWNED})


def to_apply(desired: Sequence[JSON], observed: Observed) -> tuple[JSON, ...]:
    """Each desired object, in order, whose live copy differs (or is missing)."""
    live = {
        (o["kind"], o["metadata"]["name"]): o for items in observed.owned.values() for o in items
    }
    return tuple(
        obj
        for obj in desired
        if not is_current(live.get((obj["kind"], obj["metadata"]["name"])), obj)
    )


def to_prune(desired: Sequence[JSON], keep: set[str], observed: Observed) -> tuple[Removal, ...]:
    """Each owned object neither desired nor named in ``keep``, in reverse apply order."""
    wanted = {(o["kind"], o["metadata"]["name"]) for o in desired}
    return tuple(
        Removal(
            api_version=kind.api_version,
            kind=kind.kind,
            name=item["metadata"]["name"],
            namespace=item["metadata"]["namespace"],
            uid=item["metadata"].get("uid"),
        )
        for kind in reversed(OWNED)
        for item in observed.owned[kind.kind]
        if (kind.kind, item["metadata"]["name"]) not in wanted
        and item["metadata"]["name"] not in keep
    )
