"""The benchmark step: what a Job shows, what a pass decides, and that idle is silent.

The decision (``benchmark_plan``) is pure and tested branch by branch as a table. The
step (``read_benchmark``, ``decide_benchmark``, then the Job writes of ``execute``) is
run against a small in-memory API that records every call, to pin the claims that cost
writes: no call at all when nothing is asked, one create per request, and nothing
written on the pass after.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, NamedTuple, cast

import pytest

from sparkllm.api import Reason, validate_inference_cluster
from sparkllm.keys import ANNOTATION_BENCHMARK, ANNOTATION_BENCHMARK_USER
from sparkllm.kube.client import KubeAPI
from sparkllm.kube.kinds import JSON, Kind
from sparkllm.reconcile.decide.actions import Plan
from sparkllm.reconcile.decide.benchmark import BenchmarkOutcome, decide_benchmark
from sparkllm.reconcile.decide.benchmark_plan import (
    BenchmarkPlan,
    JobResult,
    describe_summary,
    job_result,
    parse_termination_message,
    plan_benchmark,
    plan_rejected,
    summary_problems,
    terminal_status,
)
from sparkllm.reconcile.execute import benchmark_jobs
from sparkllm.reconcile.reads import read_benchmark
from sparkllm.render.benchmark import BenchmarkRequest, benchmark_job_name
from sparkllm.render.product_image import ProductImage

NOW = datetime(2026, 7, 1, 12, 0, 0, tzinfo=UTC)
CREATED, FINISHED, CONDITION_TIME = (
    "2026-07-01T11:00:00Z",
    "2026-07-01T11:05:00Z",
    "2026-07-01T11:05:02Z",
)
ALICE = BenchmarkRequest("alice", ("short-c1",))
WANTED = "llm-bench-aaaaaaaa"
SHORT = {
    "name": "short-c1", "requests": 10, "completed": 10, "errors": 0,
    "ttftMs": {"p50": 6.1, "p95": 7.0, "p99": 7.2}, "tpotMs": {"p50": 1.1, "p95": 1.3, "p99": 1.4},
    "outputTokensPerSecond": 812.5,
}  # fmt: skip
NIAH = {"name": "niah", "requests": 6, "completed": 6, "errors": 0, "needlesFound": "0/6"}
PASSED = {"passed": True, "tokenCounting": "tokenizer", "scenarios": [SHORT]}
NOT_PASSED = {"passed": False, "tokenCounting": "tokenizer", "scenarios": [SHORT, NIAH]}


def job(name: str = WANTED, *conditions: tuple[str, str], deleting: bool = False) -> JSON:
    meta: JSON = {
        "name": name, "uid": f"uid-{name}", "creationTimestamp": CREATED,
        "annotations": {ANNOTATION_BENCHMARK_USER: "alice"},
    }  # fmt: skip
    if deleting:
        meta["deletionTimestamp"] = NOW.isoformat()
    return {
        "metadata": meta,
        "status": {
            "conditions": [
                {"type": kind, "status": "True", "reason": reason, "message": f"{reason} says so",
                 "lastTransitionTime": CONDITION_TIME}
                for kind, reason in conditions
            ]
        },
    }  # fmt: skip


def pod(phase: str = "Running", *, exit_code: int | None = None, message: str = "") -> JSON:
    state: JSON = {"running": {"startedAt": CREATED}}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "message": message, "finishedAt": FINISHED}}
    status = {"phase": phase, "containerStatuses": [{"name": "bench", "state": state}]}
    return {"metadata": {"name": "p", "creationTimestamp": CREATED}, "status": status}


COMPLETE = ("Complete", "Completed")
FAILED = ("Failed", "BackoffLimitExceeded")
DEADLINE = ("Failed", "DeadlineExceeded")


# --- what a Job shows -----------------------------------------------------------------


class Shows(NamedTuple):
    finished: bool
    succeeded: bool
    summary: JSON | None
    detail: str  # a part of JobResult.detail ("": none)
    completed_at: str | None


@pytest.mark.parametrize(
    ("the_job", "pods", "expected"),
    [
        (job(), [pod()], Shows(False, False, None, "", None)),
        (job(), [], Shows(False, False, None, "", None)),
        (job(WANTED, COMPLETE), [pod("Succeeded", exit_code=0, message=json.dumps(PASSED))],
         Shows(True, True, PASSED, "", FINISHED)),
        # the pod is done before the Job controller says so: one attempt, so it is over
        (job(), [pod("Succeeded", exit_code=0, message=json.dumps(PASSED))],
         Shows(True, True, PASSED, "", FINISHED)),
        # exit 1: the run did not pass, the summary says what
        (job(WANTED, FAILED), [pod("Failed", exit_code=1, message=json.dumps(NOT_PASSED))],
         Shows(True, False, NOT_PASSED, "exit code 1", FINISHED)),
        # exit 2 (could not start): the log's tail instead of a summary
        (job(WANTED, FAILED), [pod("Failed", exit_code=2, message="sparkllm bench: error: 401\n")],
         Shows(True, False, None, "sparkllm bench: error: 401", FINISHED)),
        # the deadline killed it: no pod left, the Job's condition is all there is
        (job(WANTED, DEADLINE), [], Shows(True, False, None, "DeadlineExceeded", CONDITION_TIME)),
    ],
)  # fmt: skip
def test_job_result(the_job: JSON, pods: list[JSON], expected: Shows) -> None:
    result = job_result(the_job, pods)
    assert (result.name, result.user, result.requested_at) == (WANTED, "alice", CREATED)
    shown = Shows(
        result.finished, result.succeeded, result.summary, expected.detail, result.completed_at
    )
    assert shown == expected
    assert expected.detail in result.detail
    assert bool(expected.detail) == bool(result.detail)


def test_termination_message_is_summary_or_excerpt() -> None:
    assert parse_termination_message(json.dumps(PASSED)) == (PASSED, "")
    assert parse_termination_message("[1, 2]") == (None, "[1, 2]")  # JSON, not a summary
    summary, excerpt = parse_termination_message("x\n" * 2000)
    assert summary is None
    assert len(excerpt) == 512


def test_summary_problems_and_description() -> None:
    assert summary_problems(PASSED) == []
    assert summary_problems(NOT_PASSED) == ["niah: needles found 0/6"]
    failing = {"scenarios": [{**SHORT, "errors": 3}]}
    assert summary_problems(failing) == ["short-c1: 3 of 10 requests failed"]
    assert describe_summary(PASSED) == (
        "short-c1: 10/10 done, TTFT p95 7.0 ms, TPOT p95 1.3 ms, 812.5 tok/s"
    )


def test_terminal_status_carries_summary_and_why() -> None:
    done = job_result(
        job(WANTED, FAILED), [pod("Failed", exit_code=1, message=json.dumps(NOT_PASSED))]
    )
    status = terminal_status(done)
    assert status == {
        "job": WANTED, "user": "alice", "phase": "Failed", "succeeded": False,
        "requestedAt": CREATED, "completedAt": FINISHED, "summary": NOT_PASSED,
        "message": "not passed: niah: needles found 0/6; exit code 1; "
                   "BackoffLimitExceeded: BackoffLimitExceeded says so",
    }  # fmt: skip


# --- the decision ---------------------------------------------------------------------


def running(name: str = WANTED) -> JobResult:
    return job_result(job(name), [pod()])


def succeeded(name: str = WANTED) -> JobResult:
    return job_result(
        job(name, COMPLETE), [pod("Succeeded", exit_code=0, message=json.dumps(PASSED))]
    )


def plan(
    *,
    request: BenchmarkRequest | None = ALICE,
    jobs: Sequence[JobResult] = (),
    previous: Mapping[str, Any] | None = None,
    ready: bool = True,
    key_problem: str | None = None,
) -> BenchmarkPlan:
    return plan_benchmark(
        request=request,
        wanted=WANTED if request else None,
        jobs={j.name: j for j in jobs},
        previous=previous,
        ready=ready,
        key_problem=key_problem,
        now=NOW,
    )


RUNNING_STATUS = {"job": WANTED, "user": "alice", "phase": "Running", "requestedAt": CREATED}
CREATING_STATUS = {**RUNNING_STATUS, "requestedAt": "2026-07-01T12:00:00Z"}
DONE_STATUS = terminal_status(succeeded())
COMPLETED_EVENT = (False, Reason.BENCHMARK_COMPLETED)
FAILED_EVENT = (True, Reason.BENCHMARK_FAILED)


class Decides(NamedTuple):
    status: JSON | None
    events: list[tuple[bool, Reason]]
    remove_annotation: bool
    create: bool
    delete: list[str]


CANCELLED_MESSAGE = f"annotation {ANNOTATION_BENCHMARK} removed before the benchmark finished"


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param({"ready": False},
                     Decides({"job": WANTED, "user": "alice", "phase": "Waiting",
                              "message": "waiting for the InferenceCluster to be Ready"},
                             [], False, False, []),
                     id="not ready: wait"),
        pytest.param({}, Decides(CREATING_STATUS, [], False, True, []), id="ready: create"),
        pytest.param({"key_problem": "user 'alice' is not a key"},
                     Decides({"user": "alice", "phase": "Failed", "succeeded": False,
                              "message": "benchmark not started: user 'alice' is not a key"},
                             [FAILED_EVENT], True, False, []),
                     id="unknown user: fail at once"),
        pytest.param({"jobs": [running()]}, Decides(RUNNING_STATUS, [], False, False, []),
                     id="running"),
        pytest.param({"jobs": [running()], "previous": RUNNING_STATUS},
                     Decides(None, [], False, False, []), id="running as status says: no write"),
        pytest.param({"jobs": [succeeded()], "previous": RUNNING_STATUS},
                     Decides(DONE_STATUS, [COMPLETED_EVENT], True, False, []),
                     id="finished: report and consume the request"),
        pytest.param({"jobs": [succeeded()], "previous": DONE_STATUS},
                     Decides(None, [], True, False, []),
                     id="finished and reported (annotation removal failed): no write, no Event"),
        pytest.param({"previous": RUNNING_STATUS},
                     Decides({**RUNNING_STATUS, "phase": "Failed", "succeeded": False,
                              "message": f"benchmark Job {WANTED} disappeared before it finished"},
                             [FAILED_EVENT], True, False, []),
                     id="its Job vanished mid-run"),
        pytest.param({"previous": DONE_STATUS}, Decides(CREATING_STATUS, [], False, True, []),
                     id="reported, Job deleted, asked again: run again"),
        pytest.param({"jobs": [job_result(job(WANTED, deleting=True), [pod()])]},
                     Decides({"job": WANTED, "user": "alice", "phase": "Waiting",
                              "message": f"waiting for Job {WANTED} to be deleted"},
                             [], False, False, []),
                     id="asked again while the cancelled Job is being deleted"),
        pytest.param({"jobs": [running("llm-bench-old"), succeeded("llm-bench-done"),
                               job_result(job("llm-bench-going", deleting=True), [pod()])]},
                     Decides(CREATING_STATUS, [], False, True, ["llm-bench-old"]),
                     id="another request's running Job is superseded"),
        pytest.param({"request": None, "jobs": [running()], "previous": RUNNING_STATUS},
                     Decides({**RUNNING_STATUS, "phase": "Cancelled",
                              "completedAt": "2026-07-01T12:00:00Z", "message": CANCELLED_MESSAGE},
                             [], False, False, [WANTED]),
                     id="withdrawn while running: cancel"),
        pytest.param({"request": None, "jobs": [succeeded()], "previous": RUNNING_STATUS},
                     Decides(DONE_STATUS, [COMPLETED_EVENT], False, False, []),
                     id="withdrawn as it finished: still reported"),
        pytest.param({"request": None,
                      "previous": {"job": WANTED, "user": "alice", "phase": "Waiting"}},
                     Decides({"job": WANTED, "user": "alice", "phase": "Cancelled",
                              "completedAt": "2026-07-01T12:00:00Z", "message": CANCELLED_MESSAGE},
                             [], False, False, []),
                     id="withdrawn while waiting"),
        pytest.param({"request": None, "previous": DONE_STATUS},
                     Decides(None, [], False, False, []), id="nothing asked, nothing in flight"),
    ],
)  # fmt: skip
def test_plan(kwargs: dict[str, Any], expected: Decides) -> None:
    decided = plan(**kwargs)
    assert (
        Decides(
            status=decided.status,
            events=[(e.warning, e.reason) for e in decided.events],
            remove_annotation=decided.remove_annotation,
            create=decided.create,
            delete=[victim.name for victim in decided.delete],
        )
        == expected
    )


def test_completion_events_say_what_happened() -> None:
    (passed,) = plan(jobs=[succeeded()]).events
    assert passed.message == (
        f"benchmark Job {WANTED} (user alice) passed: "
        "short-c1: 10/10 done, TTFT p95 7.0 ms, TPOT p95 1.3 ms, 812.5 tok/s"
    )
    not_passed = job_result(
        job(WANTED, FAILED), [pod("Failed", exit_code=1, message=json.dumps(NOT_PASSED))]
    )
    (failed,) = plan(jobs=[not_passed]).events
    assert failed.warning
    assert "niah: needles found 0/6" in failed.message


def test_an_invalid_request_fails_once() -> None:
    first = plan_rejected(user="a b", message="bad user", previous=None)
    assert first.status == {
        "user": "a b",
        "phase": "Failed",
        "succeeded": False,
        "message": "bad user",
    }
    assert [(e.warning, e.reason) for e in first.events] == [FAILED_EVENT]
    again = plan_rejected(user="a b", message="bad user", previous=first.status)
    assert (again.status, again.events, again.remove_annotation) == (None, (), True)


def test_the_status_to_write_keeps_the_live_one() -> None:
    live = {"benchmark": DONE_STATUS}
    assert BenchmarkOutcome().status_value(live) == DONE_STATUS  # SSA would drop it otherwise
    assert BenchmarkOutcome(status=RUNNING_STATUS).status_value(live) == RUNNING_STATUS
    assert BenchmarkOutcome().status_value({}) is None


# --- the shell against a recording API -------------------------------------------------


class RecordingAPI:
    """Just the KubeAPI calls the step makes, in memory; every call is recorded."""

    def __init__(self, *, secret_data: dict[str, str]) -> None:
        self.calls: list[tuple[str, str]] = []
        self.jobs: dict[str, JSON] = {}
        self.secret = {"metadata": {"name": "keys"}, "data": secret_data}

    async def list(
        self, kind: Kind, namespace: str | None = None, *, selector: str | None = None
    ) -> list[JSON]:
        self.calls.append(("list", kind.kind))
        assert selector == "sparkllm.io/cluster=llm,app.kubernetes.io/component=benchmark"
        return list(self.jobs.values()) if kind.kind == "Job" else []

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JSON | None:
        self.calls.append(("get", f"{kind.kind}/{name}"))
        return self.secret if name == "keys" else None

    async def create(self, obj: Mapping[str, Any]) -> JSON | None:
        self.calls.append(("create", f"{obj['kind']}/{obj['metadata']['name']}"))
        created = json.loads(json.dumps(obj))
        created["metadata"] |= {"uid": "u-1", "creationTimestamp": CREATED}
        self.jobs[created["metadata"]["name"]] = created
        return created

    async def delete(self, kind: Kind, name: str, namespace: str | None = None, **_: Any) -> bool:
        self.calls.append(("delete", f"{kind.kind}/{name}"))
        return self.jobs.pop(name, None) is not None


def the_cluster(annotations: dict[str, str], status: JSON | None = None) -> JSON:
    return {
        "apiVersion": "sparkllm.io/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": "llm", "namespace": "ns", "uid": "u", "generation": 2,
                     "annotations": annotations},
        "spec": {
            "model": {"path": "/models/m", "servedName": "m"},
            "engine": {"image": "nvcr.io/nvidia/sglang:26.07-py3", "pipelineParallel": 3},
            "admission": {"apiKeysSecretRef": {"name": "keys"}},
            "placement": {"nodeGroups": [["a", "b", "c"]]},
        },
        "status": {"benchmark": status} if status else {},
    }  # fmt: skip


def step(api: RecordingAPI, obj: JSON, *, ready: bool = True) -> BenchmarkOutcome:
    """Observe, decide, and make the step's Job writes (the status is the planned one)."""
    ic = validate_inference_cluster(obj)
    seen = asyncio.run(read_benchmark(cast(KubeAPI, api), ic, obj))
    outcome = decide_benchmark(ic, obj, seen, ready=ready, image=ProductImage("img:1"), now=NOW)
    plan = Plan(
        target=obj,
        delete_jobs=outcome.delete_jobs,
        create_jobs=outcome.create_jobs,
        status=None if outcome.status is None else {"benchmark": outcome.status},
    )
    asyncio.run(benchmark_jobs(cast(KubeAPI, api), plan))
    return replace(outcome, create_jobs=(), delete_jobs=())


def test_nothing_asked_means_no_api_call() -> None:
    api = RecordingAPI(secret_data={"alice": "a2V5"})
    assert step(api, the_cluster({})) == BenchmarkOutcome()
    assert step(api, the_cluster({}, DONE_STATUS)) == BenchmarkOutcome()
    assert api.calls == []


def test_one_create_per_request_and_a_silent_pass_after() -> None:
    api = RecordingAPI(secret_data={"alice": "a2V5"})
    asked = {ANNOTATION_BENCHMARK: "alice"}
    name = benchmark_job_name("llm", request=BenchmarkRequest("alice"), generation=2)
    first = step(api, the_cluster(asked))
    assert api.calls == [("list", "Job"), ("get", "Secret/keys"), ("create", f"Job/{name}")]
    assert first.status == {
        "job": name,
        "user": "alice",
        "phase": "Running",
        "requestedAt": "2026-07-01T12:00:00Z",  # the pass's now, planned with the create
    }
    api.calls.clear()
    second = step(api, the_cluster(asked, first.status))
    assert [verb for verb, _ in api.calls] == ["list", "list"]  # Jobs, their pods: reads only
    assert second == BenchmarkOutcome()


def test_a_user_without_a_key_gets_no_job() -> None:
    api = RecordingAPI(secret_data={"bob": "a2V5"})
    outcome = step(api, the_cluster({ANNOTATION_BENCHMARK: "alice"}))
    assert not [call for call in api.calls if call[0] == "create"]
    assert outcome.remove_annotation
    assert "is not a key of Secret keys" in str((outcome.status or {}).get("message"))
