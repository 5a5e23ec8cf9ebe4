"""The execute step of a pass: the one place the operator writes to the Kubernetes API.

Why one writer: with every write here, "a pass with nothing to do makes no write" is a
property of the plan (``Plan.writes == 0``), the order of writes is fixed in one
function, and the write metrics cannot miss a write. It makes the writes ``decide``
listed, exactly as planned, in this order: the generated engine-key Secret (its random
value is made here, never seen by pure code), benchmark Jobs deleted then created, drain
patches on rank-0 pods, server-side applies, prunes with uid preconditions, the status,
the Events (best effort: status carries the facts; each made here with the writer's
clock and host), and the merge patch that consumes request annotations. Metrics follow:
gang restarts by cause, replicas by phase.
"""

from __future__ import annotations

import base64
import logging
import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sparkllm.api import KIND
from sparkllm.errors import ClusterAPIError
from sparkllm.kube.client import KubeAPI
from sparkllm.kube.kinds import lookup_kind
from sparkllm.reconcile import metrics
from sparkllm.reconcile.decide.actions import JSON, Plan, Removal
from sparkllm.reconcile.decide.owned import IC, POD
from sparkllm.reconcile.events import event_manifest

logger = logging.getLogger(__name__)


async def execute(api: KubeAPI, plan: Plan, *, clock: Callable[[], datetime]) -> None:
    """Make the plan's writes, in order; an empty plan makes none."""
    target = plan.target
    if target is None:
        return
    meta = target["metadata"]
    for cause in plan.gang_restarts:
        metrics.GANG_RESTARTS.labels(
            namespace=meta["namespace"], cluster=meta["name"], cause=cause
        ).inc()
    for secret in plan.secrets:
        await _create({**secret.manifest, "data": {secret.key: generate_token()}}, api=api)
    await benchmark_jobs(api, plan)
    for pod in plan.pod_patches:
        await api.merge_patch(POD, pod.name, pod.namespace, pod.patch)
        metrics.WRITES.labels(verb="patch", kind="Pod").inc()
    for removal in plan.delete_pods:  # on a lost node: no kubelet will confirm the end
        await api.delete(POD, removal.name, removal.namespace, uid=removal.uid, grace_seconds=0)
        metrics.WRITES.labels(verb="delete", kind="Pod").inc()
    for obj in plan.apply:
        await api.apply(obj)
        metrics.WRITES.labels(verb="apply", kind=obj["kind"]).inc()
    for removal in plan.prune:
        await _delete(api, removal)
    if plan.status is not None:
        await api.apply_status(IC, meta["name"], meta["namespace"], plan.status)
        metrics.WRITES.labels(verb="apply", kind="InferenceCluster/status").inc()
    await _post_events(api, plan, now=clock())
    if plan.annotations is not None:
        await api.merge_patch(IC, meta["name"], meta["namespace"], plan.annotations)
        metrics.WRITES.labels(verb="patch", kind=KIND).inc()
    if plan.replica_phases is not None:
        metrics.record_replica_phases(meta["namespace"], meta["name"], list(plan.replica_phases))
    if plan.quarantined_nodes is not None:
        gauge = metrics.QUARANTINED_NODES.labels(namespace=meta["namespace"], cluster=meta["name"])
        gauge.set(plan.quarantined_nodes)
    if plan.failovers:
        counter = metrics.FAILOVERS.labels(namespace=meta["namespace"], cluster=meta["name"])
        counter.inc(plan.failovers)


async def benchmark_jobs(api: KubeAPI, plan: Plan) -> None:
    """Delete superseded Jobs, then create the requested one (after what it needs)."""
    for removal in plan.delete_jobs:
        await _delete(api, removal)
    for obj in plan.create_jobs:
        await _create(obj, api=api)


async def _create(obj: JSON, *, api: KubeAPI) -> None:
    await api.create(obj)
    metrics.WRITES.labels(verb="create", kind=obj["kind"]).inc()


async def _delete(api: KubeAPI, removal: Removal) -> None:
    kind = lookup_kind(removal.api_version, removal.kind)
    await api.delete(kind, removal.name, removal.namespace, uid=removal.uid)
    metrics.WRITES.labels(verb="delete", kind=removal.kind).inc()


async def _post_events(api: KubeAPI, plan: Plan, *, now: datetime) -> None:
    target: Any = plan.target
    for event in plan.events:
        try:
            await api.create(event_manifest(target, event, now=now))
        except ClusterAPIError as exc:  # Events are best effort; status carries the facts
            logger.warning("could not post Event %s: %s", event.reason.value, exc)
            continue
        metrics.WRITES.labels(verb="create", kind="Event").inc()


def generate_token() -> str:
    """A fresh engine key, base64-encoded for a Secret's ``data``.

    Hex, not urlsafe base64: defence in depth. The rendered args attach the key with
    "=" (`--api-key=$(KEY)`, sglang_contract/argv.py), so a leading "-" no longer reaches
    argparse as an option; a generated key still never starts with one.
    """
    return base64.b64encode(secrets.token_hex(32).encode()).decode()
