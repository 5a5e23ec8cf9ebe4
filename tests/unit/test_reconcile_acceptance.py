"""The acceptance step of a pass: annotation -> Job -> status.acceptance + Event + baseline.

The shared decision is pinned by the benchmark's tests; these pin what acceptance adds:
its RBAC is created before its Job and never pruned, the summary's counts and failed
rows make the Event, the operator (not the Job) sets the baseline — only from a passed
run, only when asked — and every request annotation it answered is removed.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sparkllm.api import Reason, validate_inference_cluster
from sparkllm.keys import (
    ANNOTATION_ACCEPTANCE,
    ANNOTATION_ACCEPTANCE_OPTIONS,
    ANNOTATION_ACCEPTANCE_SET_BASELINE,
    BASELINE_ANNOTATION,
)
from sparkllm.kube.kinds import JSON
from sparkllm.reconcile.decide import decide as decide_pass
from sparkllm.reconcile.decide import owned
from sparkllm.reconcile.decide.acceptance import (
    acceptance_keep,
    acceptance_problems,
    decide_acceptance,
    describe_acceptance,
)
from sparkllm.reconcile.decide.benchmark import BenchmarkOutcome, BenchmarkSeen
from sparkllm.reconcile.decide.job_result import job_result
from sparkllm.reconcile.decide.observation import Observation
from sparkllm.render.acceptance import (
    AcceptanceRequest,
    acceptance_job_name,
    parse_acceptance_request,
    render_acceptance_rbac,
)
from sparkllm.render.product_image import ProductImage
from tests.unit.reconcile_fixtures import GATEWAY_IMAGE, serving, with_obj, with_status
from tests.unit.test_reconcile_benchmark import COMPLETE, CREATED, FAILED, FINISHED, job, pod
from tests.unit.test_reconcile_benchmark import the_cluster as benchmark_cluster

NOW = datetime(2026, 7, 1, 12, 0, 0, tzinfo=UTC)
ASKED = {ANNOTATION_ACCEPTANCE: "alice"}
FIGURES = {"scale8": {"ttftP95Ms": 9.5, "outputTokensPerS": 120.0}}
PASSED = {
    "passed": True, "startedAt": CREATED, "endedAt": FINISHED, "pass": 10, "fail": 0,
    "notMeasured": 7, "verdicts": {"functional/streaming": "pass"}, "failed": [],
    "figures": FIGURES,
}  # fmt: skip
NOT_PASSED = {
    **PASSED, "passed": False, "pass": 9, "fail": 1,
    "verdicts": {"functional/streaming": "fail"},
    "failed": ["functional/streaming: expected exactly one [DONE], got 0"],
}  # fmt: skip


def the_cluster(annotations: dict[str, str], status: JSON | None = None) -> JSON:
    """The benchmark tests' InferenceCluster, with ``status.acceptance``."""
    return {**benchmark_cluster(annotations), "status": {"acceptance": status} if status else {}}


def wanted(annotations: dict[str, str]) -> str:
    request = parse_acceptance_request(annotations)
    assert request is not None
    return acceptance_job_name("llm", request=request, generation=2)


def finished(name: str, summary: JSON, *, ok: bool) -> BenchmarkSeen:
    the_job = job(name, COMPLETE if ok else FAILED)
    the_pod = pod("Succeeded" if ok else "Failed", exit_code=0 if ok else 1,
                  message=json.dumps(summary))  # fmt: skip
    return BenchmarkSeen(jobs={name: job_result(the_job, [the_pod])})


def decide(obj: JSON, seen: BenchmarkSeen, *, ready: bool = True) -> BenchmarkOutcome:
    ic = validate_inference_cluster(obj)
    return decide_acceptance(ic, obj, seen, ready=ready, image=ProductImage("img:1"), now=NOW)


def test_a_request_creates_the_rbac_then_the_job() -> None:
    outcome = decide(the_cluster(ASKED), BenchmarkSeen(user_keys=frozenset({"alice"})))
    kinds = [(o["kind"], o["metadata"]["name"]) for o in outcome.create_jobs]
    assert kinds == [
        ("ServiceAccount", "llm-acceptance"), ("Role", "llm-acceptance"),
        ("RoleBinding", "llm-acceptance"), ("Job", wanted(ASKED)),
    ]  # fmt: skip
    assert outcome.status_field == "acceptance"
    assert outcome.status == {
        "job": wanted(ASKED), "user": "alice", "phase": "Running",
        "requestedAt": "2026-07-01T12:00:00Z",
    }  # fmt: skip
    assert outcome.events == []
    assert outcome.annotation_patch == {}


def test_the_rbac_is_kept_from_the_prune() -> None:
    ic = validate_inference_cluster(the_cluster({}))
    rbac = [{"kind": "Role", "metadata": {"name": "llm-acceptance", "namespace": "ns"}}]
    observed = owned.empty()
    observed.owned["Role"].extend(rbac)
    assert owned.to_prune([], acceptance_keep(ic), observed) == ()
    assert len(owned.to_prune([], set(), observed)) == 1


def test_not_ready_waits_and_says_so() -> None:
    outcome = decide(the_cluster(ASKED), BenchmarkSeen(), ready=False)
    assert outcome.status is not None
    assert outcome.status["phase"] == "Waiting"
    assert outcome.status["message"] == "waiting for the InferenceCluster to be Ready"
    assert outcome.create_jobs == ()


def test_a_passed_run_lands_in_status_with_a_normal_event() -> None:
    outcome = decide(the_cluster(ASKED), finished(wanted(ASKED), PASSED, ok=True))
    assert outcome.status is not None
    assert (outcome.status["phase"], outcome.status["succeeded"]) == ("Succeeded", True)
    assert outcome.status["summary"] == PASSED
    assert "baseline" not in outcome.status
    (event,) = outcome.events
    assert (event.warning, event.reason) == (False, Reason.ACCEPTANCE_PASSED)
    assert event.message.endswith(
        "passed: 10 pass, 0 fail, 7 not measured "
        "(not measured is not a pass: its data source was missing)"
    )
    assert outcome.annotation_patch == {
        ANNOTATION_ACCEPTANCE: None, ANNOTATION_ACCEPTANCE_SET_BASELINE: None,
    }  # fmt: skip


def test_a_failed_row_makes_a_warning_naming_it() -> None:
    outcome = decide(the_cluster(ASKED), finished(wanted(ASKED), NOT_PASSED, ok=False))
    assert outcome.status is not None
    assert outcome.status["phase"] == "Failed"
    assert outcome.status["message"].startswith(
        "not passed: functional/streaming: expected exactly one [DONE], got 0; exit code 1"
    )
    (event,) = outcome.events
    assert (event.warning, event.reason) == (True, Reason.ACCEPTANCE_FAILED)
    assert "functional/streaming: expected exactly one [DONE], got 0" in event.message


def test_the_operator_sets_the_baseline_from_a_passed_run_on_request() -> None:
    asked = {**ASKED, ANNOTATION_ACCEPTANCE_SET_BASELINE: "true"}
    outcome = decide(the_cluster(asked), finished(wanted(asked), PASSED, ok=True))
    assert outcome.status is not None
    assert outcome.status["baseline"] == f"set {FINISHED}"
    baseline = json.loads(str(outcome.annotation_patch[BASELINE_ANNOTATION]))
    assert baseline == {"setAt": FINISHED, "scenarios": FIGURES}
    assert outcome.annotation_patch[ANNOTATION_ACCEPTANCE_SET_BASELINE] is None
    # The next pass (annotations consumed) reports nothing again and writes no baseline.
    again = decide(the_cluster({}, outcome.status), finished(wanted(asked), PASSED, ok=True))
    assert again == BenchmarkOutcome(status_field="acceptance")
    # Nor does a pass that still sees the request (its removal not yet visible).
    repeat = decide(the_cluster(asked, outcome.status), finished(wanted(asked), PASSED, ok=True))
    assert (repeat.status, repeat.events) == (None, [])
    assert BASELINE_ANNOTATION not in repeat.annotation_patch


def test_a_failed_run_never_becomes_the_baseline() -> None:
    asked = {**ASKED, ANNOTATION_ACCEPTANCE_SET_BASELINE: "true"}
    outcome = decide(the_cluster(asked), finished(wanted(asked), NOT_PASSED, ok=False))
    assert outcome.status is not None
    assert outcome.status["baseline"] == "not set: the run did not pass"
    assert BASELINE_ANNOTATION not in outcome.annotation_patch


def test_an_invalid_option_fails_at_once_and_is_consumed() -> None:
    asked = {**ASKED, ANNOTATION_ACCEPTANCE_OPTIONS: "soak=5"}
    outcome = decide(the_cluster(asked), BenchmarkSeen())
    assert outcome.status is not None
    assert outcome.status["phase"] == "Failed"
    assert "'soak=5' is not name=value of a known option" in outcome.status["message"]
    (event,) = outcome.events
    assert event.reason is Reason.ACCEPTANCE_FAILED
    assert outcome.annotation_patch == {ANNOTATION_ACCEPTANCE: None}
    assert outcome.create_jobs == ()


def test_withdrawing_a_running_acceptance_cancels_it() -> None:
    name = wanted(ASKED)
    running = {"job": name, "user": "alice", "phase": "Running", "requestedAt": CREATED}
    seen = BenchmarkSeen(jobs={name: job_result(job(name), [pod()])})
    outcome = decide(the_cluster({}, running), seen)
    assert outcome.status is not None
    assert outcome.status["phase"] == "Cancelled"
    assert outcome.status["message"] == (
        f"annotation {ANNOTATION_ACCEPTANCE} removed before the acceptance finished"
    )
    assert [r.name for r in outcome.delete_jobs] == [name]


def test_a_job_that_disappears_while_running_fails_clearly() -> None:
    name = wanted(ASKED)
    running = {"job": name, "user": "alice", "phase": "Running", "requestedAt": CREATED}
    outcome = decide(the_cluster(ASKED, running), BenchmarkSeen())
    assert outcome.status is not None
    assert outcome.status["message"] == f"acceptance Job {name} disappeared before it finished"
    assert outcome.events[0].reason is Reason.ACCEPTANCE_FAILED


def test_problems_and_description_of_a_summary() -> None:
    assert acceptance_problems(PASSED) == []
    assert acceptance_problems({**NOT_PASSED, "fail": 3}) == [
        "functional/streaming: expected exactly one [DONE], got 0",
        "2 more failed row(s), see the Job's log",
    ]
    summary: dict[str, Any] = {"pass": 17, "fail": 0, "notMeasured": 0}
    assert describe_acceptance(summary) == "17 pass, 0 fail, 0 not measured"


# --- inside a whole pass ----------------------------------------------------------------


def _asked(obs: Observation, annotations: dict[str, str], seen: BenchmarkSeen) -> Observation:
    assert obs.obj is not None
    meta = {**obs.obj["metadata"], "annotations": annotations}
    return replace(with_obj(obs, {**obs.obj, "metadata": meta}), acceptance=seen)


def test_a_pass_creates_the_job_and_keeps_the_benchmark_status() -> None:
    obs = serving()
    assert obs.obj is not None
    live_benchmark = {"job": "llm-bench-x", "user": "alice", "phase": "Succeeded"}
    obs = with_status(obs, {**obs.obj["status"], "benchmark": live_benchmark})
    plan = decide_pass(
        _asked(obs, ASKED, BenchmarkSeen(user_keys=frozenset({"alice"}))),
        gateway_image=GATEWAY_IMAGE,
    )
    assert [o["kind"] for o in plan.create_jobs] == ["ServiceAccount", "Role", "RoleBinding", "Job"]
    assert plan.status is not None
    assert plan.status["acceptance"]["phase"] == "Running"
    assert plan.status["benchmark"] == live_benchmark  # sent again: SSA would drop it
    job = plan.create_jobs[-1]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == GATEWAY_IMAGE.reference  # the operator's own image


def test_a_pass_reports_the_result_and_writes_the_baseline_it_was_asked_for() -> None:
    asked = {**ASKED, ANNOTATION_ACCEPTANCE_SET_BASELINE: "true"}
    name = acceptance_job_name("llm", request=AcceptanceRequest("alice", set_baseline=True),
                               generation=1)  # fmt: skip
    plan = decide_pass(
        _asked(serving(), asked, finished(name, PASSED, ok=True)), gateway_image=GATEWAY_IMAGE
    )
    assert plan.status is not None
    assert plan.status["acceptance"]["phase"] == "Succeeded"
    assert [e.reason for e in plan.events] == [Reason.ACCEPTANCE_PASSED]
    assert plan.annotations is not None
    patch = plan.annotations["metadata"]["annotations"]
    assert patch[ANNOTATION_ACCEPTANCE] is None
    assert patch[ANNOTATION_ACCEPTANCE_SET_BASELINE] is None
    assert json.loads(patch[BASELINE_ANNOTATION])["scenarios"] == FIGURES


def test_a_pass_leaves_the_jobs_rbac_in_place() -> None:
    obs = serving()
    assert obs.obj is not None
    ic = validate_inference_cluster(obs.obj)
    rbac = [
        {**o, "metadata": {**o["metadata"], "uid": "u-rbac"}} for o in render_acceptance_rbac(ic)
    ]
    observed = obs.observed
    for obj in rbac:
        observed.owned[obj["kind"]].append(obj)
    plan = decide_pass(replace(obs, observed=observed), gateway_image=GATEWAY_IMAGE)
    assert all(r.name != "llm-acceptance" for r in plan.prune)
