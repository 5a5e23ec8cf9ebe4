"""The execute step of a pass: the one place the operator writes to the Kubernetes API.

Why one writer: with every write here, "a pass with nothing to do makes no write" is a
property of the plan (``Plan.writes == 0``), the order of writes is fixed in one
function, and the write metrics cannot miss a write. It makes the writes ``decide``
listed, in this order: the generated engine-key Secret (its random value is made here,
never seen by pure code), benchmark Jobs deleted then created (the new Job's
creationTimestamp becomes ``status.benchmark.requestedAt``), drain patches on rank-0
pods, server-side applies, prunes with uid preconditions, the status, the Events (best
effort: status carries the facts), and the merge patch that consumes request
annotations. Metrics follow: gang restarts by cause, replicas by phase.
"""

from __future__ import annotations

import logging
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
from sparkllm.reconcile.decide.secrets import generate_token
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
    status = await benchmark_jobs(api, plan)
    for pod in plan.pod_patches:
        await api.merge_patch(POD, pod.name, pod.namespace, pod.patch)
        metrics.WRITES.labels(verb="patch", kind="Pod").inc()
    for obj in plan.apply:
        await api.apply(obj)
        metrics.WRITES.labels(verb="apply", kind=obj["kind"]).inc()
    for removal in plan.prune:
        await _delete(api, removal)
    if status is not None:
        await api.apply_status(IC, meta["name"], meta["namespace"], status)
        metrics.WRITES.labels(verb="apply", kind="InferenceCluster/status").inc()
    await _post_events(api, plan, now=clock())
    if plan.annotations is not None:
        await api.merge_patch(IC, meta["name"], meta["namespace"], plan.annotations)
        metrics.WRITES.labels(verb="patch", kind=KIND).inc()
    if plan.replica_phases is not None:
        metrics.record_replica_phases(meta["namespace"], meta["name"], list(plan.replica_phases))


async def benchmark_jobs(api: KubeAPI, plan: Plan) -> JSON | None:
    """Delete superseded Jobs, create the requested one; the status, stamped."""
    for removal in plan.delete_jobs:
        await _delete(api, removal)
    status = plan.status
    for obj in plan.create_jobs:  # a Job after the objects it needs (its ServiceAccount)
        created = await _create(obj, api=api)
        stamp = (created or {}).get("metadata", {}).get("creationTimestamp")
        for field in ("benchmark", "acceptance"):  # the run whose Job this is
            run = (status or {}).get(field)
            ours = isinstance(run, dict) and run.get("job") == obj["metadata"]["name"]
            if status is not None and isinstance(run, dict) and ours and stamp:
                status = {**status, field: {**run, "requestedAt": stamp}}  # later passes read it
    return status


async def _create(obj: JSON, *, api: KubeAPI) -> JSON | None:
    created = await api.create(obj)
    metrics.WRITES.labels(verb="create", kind=obj["kind"]).inc()
    return created


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
