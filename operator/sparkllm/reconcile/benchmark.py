"""The benchmark on demand, as a reconcile step: request annotation -> Job -> status.

``reconcile_benchmark`` reads what the pure decision (``benchmark_plan``) needs — the
cluster's benchmark Jobs and their pods, and, only before creating a Job, whether the
user's key exists — then creates or deletes Jobs, and hands the rest back to the
reconciler: the new ``status.benchmark``, the Events to post, and whether to remove the
request annotation. The reconciler writes all three in its own pass (one status write,
Events at the end), so this step adds no write of its own when nothing changed.

Why create instead of apply: a benchmark Job runs once and is never updated (its pod
template is immutable); its name is deterministic, so ``create`` answering 409 means
an earlier pass made it. Jobs are not in the reconciler's pruned kinds: a finished one
stays for ``kubectl logs`` until its TTL, and its owner reference removes it with the
InferenceCluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sparkllm.api import InferenceCluster
from sparkllm.errors import SpecError
from sparkllm.reconcile.benchmark_plan import (
    BenchmarkEvent,
    JobResult,
    in_flight,
    job_result,
    plan_benchmark,
    plan_rejected,
)
from sparkllm.reconcile.kube import JSON, KubeAPI, lookup_kind
from sparkllm.render.benchmark import (
    ANNOTATION_BENCHMARK,
    benchmark_job_name,
    benchmark_selector,
    parse_benchmark_request,
    render_benchmark_job,
)

JOB = lookup_kind("batch/v1", "Job")
POD = lookup_kind("v1", "Pod")
SECRET = lookup_kind("v1", "Secret")


@dataclass(frozen=True)
class BenchmarkOutcome:
    """What the reconciler does with the step's result."""

    status: JSON | None = None
    """The new ``status.benchmark``; None: leave it as it is."""
    events: list[BenchmarkEvent] = field(default_factory=list)
    remove_annotation: bool = False
    """The request is answered: remove ``sparkllm.io/benchmark`` (merge patch)."""

    def status_value(self, previous_status: Mapping[str, Any]) -> JSON | None:
        """``status.benchmark`` to write: the new value, else the live one (SSA drops
        fields our manager stops sending, so an unchanged value must be sent again)."""
        if self.status is not None:
            return self.status
        live = previous_status.get("benchmark")
        return dict(live) if isinstance(live, Mapping) else None


async def _job_results(api: KubeAPI, ic: InferenceCluster) -> dict[str, JobResult]:
    namespace = ic.metadata.namespace or "default"
    selector = benchmark_selector(ic.metadata.name)
    jobs = await api.list(JOB, namespace, selector=selector)
    if not jobs:
        return {}
    pods = await api.list(POD, namespace, selector=selector)
    by_owner: dict[str, list[JSON]] = {}
    for pod in pods:
        for owner in pod["metadata"].get("ownerReferences") or []:
            by_owner.setdefault(str(owner.get("uid")), []).append(pod)
    return {
        str(job["metadata"]["name"]): job_result(job, by_owner.get(job["metadata"]["uid"], []))
        for job in jobs
    }


async def _user_key_problem(api: KubeAPI, ic: InferenceCluster, user: str) -> str | None:
    secret_name = ic.spec.admission.api_keys_secret_ref.name
    secret = await api.get(SECRET, secret_name, ic.metadata.namespace or "default")
    if secret is None:
        return f"Secret {secret_name} (spec.admission.apiKeysSecretRef) does not exist"
    if user not in (secret.get("data") or {}):
        return f"user {user!r} is not a key of Secret {secret_name} (the users' keys)"
    return None


async def reconcile_benchmark(
    api: KubeAPI,
    ic: InferenceCluster,
    obj: Mapping[str, Any],
    *,
    ready: bool,
    image: str,
    now: datetime,
) -> BenchmarkOutcome:
    """Run the step: read, decide, create or delete Jobs; the caller writes the rest.

    Without a request and nothing in flight it makes no API call at all.
    """
    meta = obj["metadata"]
    previous = (obj.get("status") or {}).get("benchmark") or {}
    annotations = meta.get("annotations") or {}
    try:
        request = parse_benchmark_request(annotations)
    except SpecError as exc:
        user = str(annotations.get(ANNOTATION_BENCHMARK, ""))
        rejected = plan_rejected(user=user, message=str(exc), previous=previous)
        return BenchmarkOutcome(rejected.status, list(rejected.events), rejected.remove_annotation)
    if request is None and not in_flight(previous):
        return BenchmarkOutcome()
    generation = int(meta.get("generation") or 0)
    wanted = (
        None
        if request is None
        else benchmark_job_name(ic.metadata.name, request=request, generation=generation)
    )
    jobs = await _job_results(api, ic)
    key_problem = None
    if request is not None and wanted not in jobs and ready:
        key_problem = await _user_key_problem(api, ic, request.user)
    plan = plan_benchmark(
        request=request,
        wanted=wanted,
        jobs=jobs,
        previous=previous,
        ready=ready,
        key_problem=key_problem,
        now=now,
    )
    namespace = ic.metadata.namespace or "default"
    for victim in plan.delete:
        await api.delete(JOB, victim.name, namespace, uid=victim.uid)
    status = plan.status
    if plan.create and request is not None:
        job = render_benchmark_job(
            ic, user=request.user, scenarios=request.scenarios, image=image, generation=generation
        )
        created = await api.create(job)
        stamp = (created or {}).get("metadata", {}).get("creationTimestamp")
        if status is not None and stamp:
            status = {**status, "requestedAt": stamp}  # what later passes read from the Job
    return BenchmarkOutcome(status, list(plan.events), plan.remove_annotation)


__all__ = ["BenchmarkOutcome", "reconcile_benchmark"]
