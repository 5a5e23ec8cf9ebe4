"""The benchmark on demand, as a reconcile step: request annotation -> Job -> status.

``read_benchmark`` (observe) reads what the pure decision (``benchmark_plan``) needs —
the cluster's benchmark Jobs and their pods, and, only when a Job may be created, the
names of the users' keys. ``decide_benchmark`` (pure) turns that into the Jobs to create
or delete, the new ``status.benchmark``, the Events to post, and whether to remove the
request annotation; ``execute`` writes them within the pass's one status write, Events
at the end, so this step adds no write of its own when nothing changed.

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
from sparkllm.reconcile.actions import Removal
from sparkllm.reconcile.benchmark_plan import (
    BenchmarkEvent,
    JobResult,
    in_flight,
    job_result,
    plan_benchmark,
    plan_rejected,
)
from sparkllm.reconcile.kube import JSON, KubeAPI
from sparkllm.reconcile.owned import JOB, POD, SECRET
from sparkllm.render.benchmark import (
    ANNOTATION_BENCHMARK,
    BenchmarkRequest,
    benchmark_job_name,
    benchmark_selector,
    parse_benchmark_request,
    render_benchmark_job,
)


@dataclass(frozen=True)
class BenchmarkOutcome:
    """What the reconciler does with the step's result."""

    status: JSON | None = None
    """The new ``status.benchmark``; None: leave it as it is."""
    events: list[BenchmarkEvent] = field(default_factory=list)
    remove_annotation: bool = False
    """The request is answered: remove ``sparkllm.io/benchmark`` (merge patch)."""
    create_jobs: tuple[JSON, ...] = ()
    """At most one Job to create; its creationTimestamp becomes ``requestedAt``."""
    delete_jobs: tuple[Removal, ...] = ()

    def status_value(self, previous_status: Mapping[str, Any]) -> JSON | None:
        """``status.benchmark`` to write: the new value, else the live one (SSA drops
        fields our manager stops sending, so an unchanged value must be sent again)."""
        if self.status is not None:
            return self.status
        live = previous_status.get("benchmark")
        return dict(live) if isinstance(live, Mapping) else None


@dataclass(frozen=True)
class BenchmarkSeen:
    """What the observe step read for the benchmark: Jobs by name, the users' key names."""

    jobs: Mapping[str, JobResult] = field(default_factory=dict)
    user_keys: frozenset[str] | None = None
    """Keys of the users' Secret, read only when a Job may be created; None: missing."""


def _request(
    ic: InferenceCluster, obj: Mapping[str, Any]
) -> tuple[BenchmarkRequest | None, str | None]:
    """The request on the object and its Job's name (SpecError: the request is invalid)."""
    request = parse_benchmark_request(obj["metadata"].get("annotations") or {})
    if request is None:
        return None, None
    generation = int(obj["metadata"].get("generation") or 0)
    return request, benchmark_job_name(ic.metadata.name, request=request, generation=generation)


async def read_benchmark(
    api: KubeAPI, ic: InferenceCluster, obj: Mapping[str, Any]
) -> BenchmarkSeen:
    """Observe what the decision needs; without a request and nothing in flight, nothing."""
    try:
        request, wanted = _request(ic, obj)
    except SpecError:
        return BenchmarkSeen()
    if request is None and not in_flight((obj.get("status") or {}).get("benchmark")):
        return BenchmarkSeen()
    jobs = await _job_results(api, ic)
    if request is None or wanted in jobs:
        return BenchmarkSeen(jobs=jobs)
    name = ic.spec.admission.api_keys_secret_ref.name
    secret = await api.get(SECRET, name, ic.metadata.namespace or "default")
    keys = None if secret is None else frozenset((secret.get("data") or {}).keys())
    return BenchmarkSeen(jobs=jobs, user_keys=keys)


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


def _user_key_problem(ic: InferenceCluster, keys: frozenset[str] | None, user: str) -> str | None:
    secret_name = ic.spec.admission.api_keys_secret_ref.name
    if keys is None:
        return f"Secret {secret_name} (spec.admission.apiKeysSecretRef) does not exist"
    if user not in keys:
        return f"user {user!r} is not a key of Secret {secret_name} (the users' keys)"
    return None


def decide_benchmark(
    ic: InferenceCluster,
    obj: Mapping[str, Any],
    seen: BenchmarkSeen,
    *,
    ready: bool,
    image: str,
    now: datetime,
) -> BenchmarkOutcome:
    """Pure: the step's status, Events, annotation removal, Jobs to create and delete."""
    previous = (obj.get("status") or {}).get("benchmark") or {}
    try:
        request, wanted = _request(ic, obj)
    except SpecError as exc:
        user = str((obj["metadata"].get("annotations") or {}).get(ANNOTATION_BENCHMARK, ""))
        rejected = plan_rejected(user=user, message=str(exc), previous=previous)
        return BenchmarkOutcome(rejected.status, list(rejected.events), rejected.remove_annotation)
    if request is None and not in_flight(previous):
        return BenchmarkOutcome()
    key_problem = None
    if request is not None and wanted not in seen.jobs and ready:
        key_problem = _user_key_problem(ic, seen.user_keys, request.user)
    plan = plan_benchmark(
        request=request,
        wanted=wanted,
        jobs=seen.jobs,
        previous=previous,
        ready=ready,
        key_problem=key_problem,
        now=now,
    )
    namespace = ic.metadata.namespace or "default"
    delete = tuple(
        Removal(api_version="batch/v1", kind="Job", name=v.name, namespace=namespace, uid=v.uid)
        for v in plan.delete
    )
    create: tuple[JSON, ...] = ()
    if plan.create and request is not None:
        generation = int(obj["metadata"].get("generation") or 0)
        create = (
            render_benchmark_job(
                ic, user=request.user, scenarios=request.scenarios, image=image,
                generation=generation,
            ),
        )  # fmt: skip
    return BenchmarkOutcome(plan.status, list(plan.events), plan.remove_annotation, create, delete)


__all__ = ["BenchmarkOutcome", "BenchmarkSeen", "decide_benchmark", "read_benchmark"]
