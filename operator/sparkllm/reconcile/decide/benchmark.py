"""Runs on demand, as a reconcile step: request annotation -> Job -> status.

Two kinds share it (``StepKind``): the benchmark (here) and the acceptance checklist
(``reconcile.acceptance``), each the other's rival: a request of one waits while the other
has a Job that has not finished (``run_exclusion``). ``reads.read_on_demand`` (observe)
reads what the pure decision (``benchmark_plan``) needs — the kind's Jobs and their pods,
and, only when a Job may be created, the names of the users' keys. ``decide_on_demand``
(pure) turns that into the objects to create (the Job, after what it needs) or Jobs to
delete, the new ``status.<field>``, the Events to post, and the annotations to remove (the
request) or set (an accepted baseline); ``execute`` writes them within the pass's one status
write, Events at the end, so this step adds no write of its own when nothing changed.

Why create instead of apply: a benchmark Job runs once and is never updated (its pod
template is immutable); its name is deterministic, so ``create`` answering 409 means
an earlier pass made it. Jobs are not in the reconciler's pruned kinds: a finished one
stays for ``kubectl logs`` until its TTL, and its owner reference removes it with the
InferenceCluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final

from sparkllm.api import InferenceCluster
from sparkllm.errors import SpecError
from sparkllm.keys import ANNOTATION_ACCEPTANCE, ANNOTATION_BENCHMARK
from sparkllm.kube.kinds import JSON
from sparkllm.reconcile.decide.actions import Removal
from sparkllm.reconcile.decide.benchmark_plan import (
    BENCHMARK,
    TERMINAL,
    BenchmarkEvent,
    BenchmarkPlan,
    JobResult,
    OnDemand,
    in_flight,
    plan_benchmark,
    plan_rejected,
)
from sparkllm.reconcile.decide.run_exclusion import Rival, rival_wait
from sparkllm.render.acceptance import acceptance_selector
from sparkllm.render.benchmark import (
    benchmark_job_name,
    benchmark_selector,
    parse_benchmark_request,
    render_benchmark_job,
)
from sparkllm.render.product_image import ProductImage


@dataclass(frozen=True)
class BenchmarkOutcome:
    """What the reconciler does with the step's result (benchmark or acceptance)."""

    status: JSON | None = None
    """The new ``status.<field>``; None: leave it as it is."""
    events: list[BenchmarkEvent] = field(default_factory=list)
    remove_annotation: bool = False
    """The request is answered: remove its annotation (merge patch)."""
    create_jobs: tuple[JSON, ...] = ()
    """The objects to create, the Job last (``status`` says when: ``requestedAt``, now)."""
    delete_jobs: tuple[Removal, ...] = ()
    status_field: str = "benchmark"
    """The status field the step owns."""
    annotation_patch: Mapping[str, str | None] = field(default_factory=dict)
    """Annotations to set (a value) or remove (None) on the InferenceCluster."""

    def status_value(self, previous_status: Mapping[str, Any]) -> JSON | None:
        """``status.<field>`` to write: the new value, else the live one (SSA drops
        fields our manager stops sending, so an unchanged value must be sent again)."""
        if self.status is not None:
            return self.status
        live = previous_status.get(self.status_field)
        return dict(live) if isinstance(live, Mapping) else None


@dataclass(frozen=True)
class BenchmarkSeen:
    """What the observe step read for one kind of run: Jobs by name, the users' key names."""

    jobs: Mapping[str, JobResult] = field(default_factory=dict)
    user_keys: frozenset[str] | None = None
    """Keys of the users' Secret, read only when a Job may be created; None: missing."""
    rival_jobs: Mapping[str, Mapping[str, JobResult]] = field(default_factory=dict)
    """The rivals' Jobs by name, by rival noun; read only when a Job may be created and
    the rival is active (its request on the object, or its status in flight)."""


@dataclass(frozen=True)
class Requested:
    """A valid request on the object: who runs it, its Job, and what it creates."""

    user: str
    job: str
    create: Callable[[ProductImage, str | None], tuple[JSON, ...]]
    """The objects to create for an image and the model copy's digest, the Job last."""
    consumed: tuple[str, ...] = ()
    """Annotations answered with the request, beside the request annotation."""
    finished: Callable[[JSON], tuple[JSON, Mapping[str, str | None]]] | None = None
    """A terminal status -> (the status to write, annotations to set): e.g. a baseline."""


@dataclass(frozen=True)
class StepKind:
    """One kind of run on demand, as a reconcile step."""

    plan: OnDemand
    status_field: str
    """``status.<status_field>``."""
    selector: Callable[[str], str]
    """Cluster name -> the label selector of its Jobs and their pods."""
    request: Callable[[InferenceCluster, Mapping[str, Any]], Requested | None]
    """The request on the object (SpecError: invalid)."""
    rivals: tuple[Rival, ...] = ()
    """Runs this one must not overlap: it waits while one of theirs is unfinished."""


def _benchmark_request(ic: InferenceCluster, obj: Mapping[str, Any]) -> Requested | None:
    request = parse_benchmark_request(obj["metadata"].get("annotations") or {})
    if request is None:
        return None
    generation = int(obj["metadata"].get("generation") or 0)

    def create(image: ProductImage, model_digest: str | None) -> tuple[JSON, ...]:
        job = render_benchmark_job(
            ic, user=request.user, scenarios=request.scenarios, image=image,
            generation=generation, model_digest=model_digest,
        )  # fmt: skip
        return (job,)

    name = benchmark_job_name(ic.metadata.name, request=request, generation=generation)
    return Requested(user=request.user, job=name, create=create)


BENCHMARK_STEP: Final = StepKind(
    plan=BENCHMARK,
    status_field="benchmark",
    selector=benchmark_selector,
    request=_benchmark_request,
    rivals=(
        Rival(
            noun="acceptance",
            selector=acceptance_selector,
            status_field="acceptance",
            annotation=ANNOTATION_ACCEPTANCE,
        ),
    ),
)
BENCHMARK_RIVAL: Final = Rival(
    noun="benchmark",
    selector=benchmark_selector,
    status_field="benchmark",
    annotation=ANNOTATION_BENCHMARK,
    goes_first=_benchmark_request,
)
"""The benchmark as the acceptance's rival: a benchmark asked for in the same pass goes first."""


def _user_key_problem(ic: InferenceCluster, keys: frozenset[str] | None, user: str) -> str | None:
    secret_name = ic.spec.admission.api_keys_secret_ref.name
    if keys is None:
        return f"Secret {secret_name} (spec.admission.apiKeysSecretRef) does not exist"
    if user not in keys:
        return f"user {user!r} is not a key of Secret {secret_name} (the users' keys)"
    return None


def decide_on_demand(
    ic: InferenceCluster,
    obj: Mapping[str, Any],
    seen: BenchmarkSeen,
    *,
    kind: StepKind,
    ready: bool,
    image: ProductImage,
    now: datetime,
    model_digest: str | None = None,
) -> BenchmarkOutcome:
    """Pure: the step's status, Events, annotations, objects to create and Jobs to delete;
    ``model_digest``: the staged copy a Job mounts (spec.model.source: the gateway's)."""
    previous = (obj.get("status") or {}).get(kind.status_field) or {}
    try:
        request = kind.request(ic, obj)
    except SpecError as exc:
        user = str((obj["metadata"].get("annotations") or {}).get(kind.plan.annotation, ""))
        rejected = plan_rejected(user=user, message=str(exc), previous=previous, kind=kind.plan)
        return _outcome(kind, rejected, request=None, previous=previous)
    if request is None and not in_flight(previous):
        return BenchmarkOutcome(status_field=kind.status_field)
    key_problem = wait_for = None
    if request is not None and request.job not in seen.jobs and ready:
        key_problem = _user_key_problem(ic, seen.user_keys, request.user)
        wait_for = rival_wait(kind.rivals, ic=ic, obj=obj, jobs=seen.rival_jobs)
    plan = plan_benchmark(
        request=request,
        wanted=None if request is None else request.job,
        jobs=seen.jobs,
        previous=previous,
        ready=ready,
        key_problem=key_problem,
        now=now,
        kind=kind.plan,
        wait_for=wait_for,
    )
    namespace = ic.metadata.namespace or "default"
    delete = tuple(
        Removal(api_version="batch/v1", kind="Job", name=v.name, namespace=namespace, uid=v.uid)
        for v in plan.delete
    )
    create = request.create(image, model_digest) if plan.create and request is not None else ()
    outcome = _outcome(kind, plan, request=request, previous=previous)
    return replace(outcome, create_jobs=create, delete_jobs=delete)


def _outcome(
    kind: StepKind,
    plan: BenchmarkPlan,
    *,
    request: Requested | None,
    previous: Mapping[str, Any],
) -> BenchmarkOutcome:
    """The plan as an outcome: annotations consumed, and the request's finishing touch."""
    status, events = plan.status, list(plan.events)
    patch: dict[str, str | None] = {}
    if plan.remove_annotation:
        patch = dict.fromkeys((kind.plan.annotation, *(request.consumed if request else ())))
    terminal = status is not None and status.get("phase") in TERMINAL
    if terminal and request is not None and request.finished is not None:
        assert status is not None
        status, extra = request.finished(status)
        if status == dict(previous):
            status, events = None, []  # reported already
        else:
            patch.update(extra)
    return BenchmarkOutcome(
        status=status,
        events=events,
        remove_annotation=plan.remove_annotation,
        status_field=kind.status_field,
        annotation_patch=patch,
    )


def decide_benchmark(
    ic: InferenceCluster,
    obj: Mapping[str, Any],
    seen: BenchmarkSeen,
    *,
    ready: bool,
    image: ProductImage,
    now: datetime,
    model_digest: str | None = None,
) -> BenchmarkOutcome:
    """Pure: the benchmark step's outcome."""
    return decide_on_demand(
        ic, obj, seen, kind=BENCHMARK_STEP, ready=ready, image=image, now=now,
        model_digest=model_digest,
    )  # fmt: skip


__all__ = [
    "BENCHMARK_RIVAL",
    "BENCHMARK_STEP",
    "BenchmarkOutcome",
    "BenchmarkSeen",
    "Requested",
    "StepKind",
    "decide_benchmark",
    "decide_on_demand",
]
