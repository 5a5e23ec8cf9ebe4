"""The acceptance checklist on demand, as a reconcile step: annotation -> Job -> status.

The benchmark's step (``reconcile.benchmark``) with the acceptance's names: the request
is ``sparkllm.io/acceptance=<user>`` (``render.acceptance``), the Job runs
``sparkllm bench --accept`` and its summary lands in ``status.acceptance`` with an Event,
``AcceptancePassed`` (Normal) or ``AcceptanceFailed`` (Warning). What it adds:

- before the Job, its ServiceAccount, Role and RoleBinding (created, 409 = there
  already; kept while the InferenceCluster exists: ``keep`` names them so the owned-kind
  prune leaves them, and their owner reference removes them with it);
- on ``sparkllm.io/acceptance-set-baseline=true``, the operator — not the Job, which may
  only read — writes the accepted baseline annotation from the figures in the summary,
  only when the run passed, and says in status which it did; the flag is consumed with
  the request, so a later run does not silently re-baseline;
- its rival is the benchmark: a request waits while a benchmark Job has not finished,
  and a benchmark asked for in the same pass goes first (``reconcile.run_exclusion``).

Pure, like the benchmark's decision: times come from the objects, never the clock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from functools import partial
from typing import Any, Final

from sparkllm.api import InferenceCluster, Reason
from sparkllm.bench.accept.regression import make_baseline
from sparkllm.keys import (
    ANNOTATION_ACCEPTANCE,
    ANNOTATION_ACCEPTANCE_SET_BASELINE,
    BASELINE_ANNOTATION,
)
from sparkllm.kube.kinds import JSON
from sparkllm.reconcile.decide.benchmark import (
    BENCHMARK_RIVAL,
    Requested,
    StepKind,
    decide_on_demand,
)
from sparkllm.reconcile.decide.benchmark_plan import OnDemand
from sparkllm.render.acceptance import (
    AcceptanceRequest,
    acceptance_job_name,
    acceptance_rbac_name,
    acceptance_selector,
    parse_acceptance_request,
    render_acceptance_job,
    render_acceptance_rbac,
)
from sparkllm.render.product_image import ProductImage

STATUS_FIELD: Final = "acceptance"


def acceptance_problems(summary: Mapping[str, Any]) -> list[str]:
    """Why a summary did not pass: each failed row with its reason (as the Job cut it)."""
    failed = [str(entry) for entry in summary.get("failed") or []]
    missing = int(summary.get("fail") or 0) - len(failed)
    return failed + ([f"{missing} more failed row(s), see the Job's log"] if missing > 0 else [])


def describe_acceptance(summary: Mapping[str, Any]) -> str:
    """Counts per verdict; not measured named as such, never folded into pass."""
    text = (
        f"{summary.get('pass', 0)} pass, {summary.get('fail', 0)} fail, "
        f"{summary.get('notMeasured', 0)} not measured"
    )
    if summary.get("notMeasured"):
        text += " (not measured is not a pass: its data source was missing)"
    return text


ACCEPTANCE: Final = OnDemand(
    noun="acceptance",
    annotation=ANNOTATION_ACCEPTANCE,
    completed=Reason.ACCEPTANCE_PASSED,
    failed=Reason.ACCEPTANCE_FAILED,
    problems=acceptance_problems,
    describe=describe_acceptance,
    waiting=Reason.ACCEPTANCE_WAITING,
)


def _with_baseline(status: JSON) -> tuple[JSON, dict[str, str | None]]:
    """A finished run that asked for the baseline: set it when it passed, say so either way."""
    summary = status.get("summary") or {}
    figures = summary.get("figures")
    if not status.get("succeeded") or not isinstance(figures, Mapping) or not figures:
        why = "the run did not pass" if not status.get("succeeded") else "no stress figures"
        return {**status, "baseline": f"not set: {why}"}, {}
    stamp = status.get("completedAt") or summary.get("endedAt")
    if not stamp:
        return {**status, "baseline": "not set: the run's end time is unknown"}, {}
    moment = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    baseline = make_baseline(figures, now=moment)
    return {**status, "baseline": f"set {baseline['setAt']}"}, {
        BASELINE_ANNOTATION: json.dumps(baseline, separators=(",", ":"), sort_keys=True)
    }


def _acceptance_request(ic: InferenceCluster, obj: Mapping[str, Any]) -> Requested | None:
    request = parse_acceptance_request(obj["metadata"].get("annotations") or {})
    if request is None:
        return None
    generation = int(obj["metadata"].get("generation") or 0)
    return Requested(
        user=request.user,
        job=acceptance_job_name(ic.metadata.name, request=request, generation=generation),
        create=lambda image, digest: _objects(
            ic, request=request, image=image, generation=generation, model_digest=digest
        ),
        consumed=(ANNOTATION_ACCEPTANCE_SET_BASELINE,),
        finished=_with_baseline if request.set_baseline else None,
    )


def _objects(
    ic: InferenceCluster,
    *,
    request: AcceptanceRequest,
    image: ProductImage,
    generation: int,
    model_digest: str | None,
) -> tuple[JSON, ...]:
    job = render_acceptance_job(
        ic, request=request, image=image, generation=generation, model_digest=model_digest
    )
    return (*render_acceptance_rbac(ic), job)


ACCEPTANCE_STEP: Final = StepKind(
    plan=ACCEPTANCE,
    status_field=STATUS_FIELD,
    selector=acceptance_selector,
    request=_acceptance_request,
    rivals=(BENCHMARK_RIVAL,),
)


decide_acceptance: Final = partial(decide_on_demand, kind=ACCEPTANCE_STEP)
"""Pure: the acceptance step's outcome."""


def acceptance_keep(ic: InferenceCluster) -> set[str]:
    """Owned objects the prune must leave: the Job's ServiceAccount, Role, RoleBinding."""
    return {acceptance_rbac_name(ic.metadata.name)}


__all__ = [
    "ACCEPTANCE",
    "ACCEPTANCE_STEP",
    "STATUS_FIELD",
    "acceptance_keep",
    "acceptance_problems",
    "decide_acceptance",
    "describe_acceptance",
]
