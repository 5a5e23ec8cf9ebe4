"""A benchmark and an acceptance run never overlap (issue 19): the second one waits.

The pure part (``rival_wait``, ``rival_active``) as a table; then both steps' decisions
(``decide_benchmark``, ``decide_acceptance``) over passes: waiting with a status and one
Normal Event, silent while nothing changes, starting by itself when the other ends; the
benchmark first when both are asked for in one pass; a whole pass creating only one
Job; and the reads, made only when a Job may be created and the rival is active.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from sparkllm.api import Reason, validate_inference_cluster
from sparkllm.keys import ANNOTATION_ACCEPTANCE, ANNOTATION_BENCHMARK
from sparkllm.kube.client import KubeAPI
from sparkllm.kube.kinds import JSON, Kind
from sparkllm.reconcile.decide import decide as decide_pass
from sparkllm.reconcile.decide.acceptance import ACCEPTANCE_STEP, decide_acceptance
from sparkllm.reconcile.decide.benchmark import (
    BENCHMARK_RIVAL,
    BENCHMARK_STEP,
    BenchmarkOutcome,
    BenchmarkSeen,
    decide_benchmark,
)
from sparkllm.reconcile.decide.benchmark_plan import JobResult, job_result
from sparkllm.reconcile.decide.observation import Observation
from sparkllm.reconcile.decide.run_exclusion import rival_active, rival_wait
from sparkllm.reconcile.reads import read_on_demand
from sparkllm.render.acceptance import acceptance_job_name, parse_acceptance_request
from sparkllm.render.benchmark import BenchmarkRequest, benchmark_job_name
from sparkllm.render.product_image import ProductImage
from tests.unit.reconcile_fixtures import GATEWAY_IMAGE, serving, with_obj
from tests.unit.test_reconcile_benchmark import COMPLETE, job, pod, the_cluster

NOW = datetime(2026, 7, 1, 12, 0, 0, tzinfo=UTC)
BENCH_JOB = benchmark_job_name("llm", request=BenchmarkRequest("alice"), generation=2)
_ACCEPTANCE = parse_acceptance_request({ANNOTATION_ACCEPTANCE: "alice"})
assert _ACCEPTANCE is not None
ACCEPT_JOB = acceptance_job_name("llm", request=_ACCEPTANCE, generation=2)
WHY = "two runs at once would measure each other; this one starts when that one ends"
KEYS = frozenset({"alice"})


def running(name: str) -> JobResult:
    return job_result(job(name), [pod()])


def done(name: str) -> JobResult:
    return job_result(job(name, COMPLETE), [pod("Succeeded", exit_code=0, message="{}")])


def going(name: str) -> JobResult:
    return job_result(job(name, deleting=True), [pod()])


def obj_with(annotations: dict[str, str], **status: JSON) -> JSON:
    return {**the_cluster(annotations), "status": status}


# --- the pure part ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "theirs", "expected"),
    [
        pytest.param({}, {}, None, id="no benchmark at all"),
        pytest.param({}, {BENCH_JOB: running(BENCH_JOB)},
                     f"the benchmark Job {BENCH_JOB} (user alice) to finish", id="one running"),
        pytest.param({}, {BENCH_JOB: done(BENCH_JOB)}, None, id="one finished"),
        pytest.param({}, {BENCH_JOB: going(BENCH_JOB)},
                     f"the benchmark Job {BENCH_JOB} (user alice) to be deleted",
                     id="one being deleted: its pod may still send load"),
        pytest.param({ANNOTATION_BENCHMARK: "alice"}, {},
                     f"the benchmark Job {BENCH_JOB} (user alice) to finish",
                     id="asked for in the same pass: the benchmark goes first"),
        pytest.param({ANNOTATION_BENCHMARK: "alice"}, {BENCH_JOB: done(BENCH_JOB)}, None,
                     id="asked for, and its Job finished: it is being answered"),
        pytest.param({ANNOTATION_BENCHMARK: "alice", "sparkllm.io/benchmark-scenarios": "x"},
                     {}, None, id="an invalid benchmark request makes no Job"),
    ],
)  # fmt: skip
def test_what_an_acceptance_waits_for(
    annotations: dict[str, str], theirs: dict[str, JobResult], expected: str | None
) -> None:
    obj = obj_with({ANNOTATION_ACCEPTANCE: "alice", **annotations})
    ic = validate_inference_cluster(obj)
    jobs = {"benchmark": theirs}
    assert rival_wait(ACCEPTANCE_STEP.rivals, ic=ic, obj=obj, jobs=jobs) == expected


def test_a_benchmark_does_not_wait_for_an_acceptance_request_without_a_job() -> None:
    """The tie-break is one-way: a pending acceptance request does not hold a benchmark."""
    obj = obj_with({ANNOTATION_ACCEPTANCE: "alice", ANNOTATION_BENCHMARK: "alice"})
    ic = validate_inference_cluster(obj)
    assert rival_wait(BENCHMARK_STEP.rivals, ic=ic, obj=obj, jobs={}) is None
    busy = {"acceptance": {ACCEPT_JOB: running(ACCEPT_JOB)}}
    expected = f"the acceptance Job {ACCEPT_JOB} (user alice) to finish"
    assert rival_wait(BENCHMARK_STEP.rivals, ic=ic, obj=obj, jobs=busy) == expected


def test_a_rival_is_active_by_its_request_or_its_status_in_flight() -> None:
    assert not rival_active(BENCHMARK_RIVAL, obj_with({}))
    assert rival_active(BENCHMARK_RIVAL, obj_with({ANNOTATION_BENCHMARK: "bob"}))
    assert rival_active(BENCHMARK_RIVAL, obj_with({}, benchmark={"phase": "Running"}))
    assert rival_active(BENCHMARK_RIVAL, obj_with({}, benchmark={"phase": "Waiting"}))
    assert not rival_active(BENCHMARK_RIVAL, obj_with({}, benchmark={"phase": "Succeeded"}))


# --- the steps' decisions over passes -------------------------------------------------


def bench_pass(obj: JSON, seen: BenchmarkSeen) -> BenchmarkOutcome:
    ic = validate_inference_cluster(obj)
    return decide_benchmark(ic, obj, seen, ready=True, image=ProductImage("img:1"), now=NOW)


def accept_pass(obj: JSON, seen: BenchmarkSeen) -> BenchmarkOutcome:
    ic = validate_inference_cluster(obj)
    return decide_acceptance(ic, obj, seen, ready=True, image=ProductImage("img:1"), now=NOW)


def test_a_benchmark_waits_for_a_running_acceptance_then_starts_by_itself() -> None:
    asked = {ANNOTATION_BENCHMARK: "alice"}
    accepting = {"job": ACCEPT_JOB, "user": "alice", "phase": "Running"}
    obj = obj_with(asked, acceptance=accepting)
    busy = {"acceptance": {ACCEPT_JOB: running(ACCEPT_JOB)}}
    first = bench_pass(obj, BenchmarkSeen(user_keys=KEYS, rival_jobs=busy))
    message = f"waiting for the acceptance Job {ACCEPT_JOB} (user alice) to finish: {WHY}"
    assert first.status == {"job": BENCH_JOB, "user": "alice", "phase": "Waiting",
                            "message": message}  # fmt: skip
    assert first.create_jobs == ()
    assert not first.remove_annotation  # still asked for: it is not dropped
    (event,) = first.events
    assert (event.warning, event.reason) == (False, Reason.BENCHMARK_WAITING)
    assert event.message == (
        f"benchmark Job {BENCH_JOB} (user alice) waits for the acceptance Job {ACCEPT_JOB} "
        f"(user alice) to finish: {WHY}"
    )
    print(f"status.benchmark.message: {message}")
    # The next pass, the acceptance still running: nothing to write, no second Event.
    obj = obj_with(asked, acceptance=accepting, benchmark=first.status or {})
    again = bench_pass(obj, BenchmarkSeen(user_keys=KEYS, rival_jobs=busy))
    assert (again.status, again.events, again.create_jobs) == (None, [], ())
    # The acceptance Job finished: the benchmark starts in that same pass.
    ended = {"acceptance": {ACCEPT_JOB: done(ACCEPT_JOB)}}
    started = bench_pass(obj, BenchmarkSeen(user_keys=KEYS, rival_jobs=ended))
    assert started.status is not None
    assert started.status["phase"] == "Running"
    assert [o["metadata"]["name"] for o in started.create_jobs] == [BENCH_JOB]


def test_both_asked_in_one_pass_the_benchmark_first_and_one_event() -> None:
    asked = {ANNOTATION_BENCHMARK: "alice", ANNOTATION_ACCEPTANCE: "alice"}
    obj = obj_with(asked)
    bench = bench_pass(obj, BenchmarkSeen(user_keys=KEYS, rival_jobs={"acceptance": {}}))
    accept = accept_pass(obj, BenchmarkSeen(user_keys=KEYS, rival_jobs={"benchmark": {}}))
    assert [o["metadata"]["name"] for o in bench.create_jobs] == [BENCH_JOB]
    assert accept.create_jobs == ()
    assert accept.status is not None
    assert accept.status["phase"] == "Waiting"
    assert accept.status["message"].startswith(
        f"waiting for the benchmark Job {BENCH_JOB} (user alice) to finish: "
    )
    assert [e.reason for e in accept.events] == [Reason.ACCEPTANCE_WAITING]
    # Next pass the benchmark's Job exists: the same wait, named the same, so no new Event.
    obj = obj_with(asked, benchmark=bench.status or {}, acceptance=accept.status)
    busy = {"benchmark": {BENCH_JOB: running(BENCH_JOB)}}
    later = accept_pass(obj, BenchmarkSeen(user_keys=KEYS, rival_jobs=busy))
    assert (later.status, later.events, later.create_jobs) == (None, [], ())


def test_a_user_without_a_key_is_refused_at_once_not_after_the_wait() -> None:
    obj = obj_with({ANNOTATION_BENCHMARK: "mallory"})
    busy = {"acceptance": {ACCEPT_JOB: running(ACCEPT_JOB)}}
    outcome = bench_pass(obj, BenchmarkSeen(user_keys=KEYS, rival_jobs=busy))
    assert outcome.status is not None
    assert outcome.status["phase"] == "Failed"
    assert "is not a key of Secret keys" in outcome.status["message"]
    assert outcome.remove_annotation


def test_withdrawn_while_waiting_is_cancelled() -> None:
    waiting = {"job": BENCH_JOB, "user": "alice", "phase": "Waiting", "message": "m"}
    obj = obj_with({}, benchmark=waiting)
    outcome = bench_pass(obj, BenchmarkSeen())
    assert outcome.status is not None
    assert outcome.status["phase"] == "Cancelled"
    assert outcome.delete_jobs == ()


def test_a_whole_pass_creates_only_the_benchmark_job() -> None:
    obs = serving()
    assert obs.obj is not None
    both = {ANNOTATION_BENCHMARK: "alice", ANNOTATION_ACCEPTANCE: "alice"}
    meta = {**obs.obj["metadata"], "annotations": both}
    obs = with_obj(obs, {**obs.obj, "metadata": meta})
    seen = BenchmarkSeen(user_keys=KEYS)
    obs = cast(Observation, replace(obs, benchmark=seen, acceptance=seen))
    plan = decide_pass(obs, gateway_image=GATEWAY_IMAGE)
    assert [o["kind"] for o in plan.create_jobs] == ["Job"]
    assert plan.create_jobs[0]["metadata"]["labels"]["app.kubernetes.io/component"] == "benchmark"
    assert plan.status is not None
    assert plan.status["benchmark"]["phase"] == "Running"
    assert plan.status["acceptance"]["phase"] == "Waiting"
    waits = [e for e in plan.events if e.reason == Reason.ACCEPTANCE_WAITING]
    assert len(waits) == 1
    assert not waits[0].warning


# --- the reads ----------------------------------------------------------------------------


class JobsAPI:
    """Jobs and pods by label selector, in memory; every list records its selector."""

    def __init__(self, jobs: Mapping[str, list[JSON]]) -> None:
        self.jobs, self.lists = jobs, list[str]()

    async def list(
        self, kind: Kind, namespace: str | None = None, *, selector: str | None = None
    ) -> list[JSON]:
        self.lists.append(f"{kind.kind} {selector}")
        component = (selector or "").rpartition("=")[2]
        return self.jobs.get(component, []) if kind.kind == "Job" else []

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JSON | None:
        return {"metadata": {"name": name}, "data": {"alice": "a2V5"}}


def read(api: JobsAPI, obj: JSON, *, benchmark: bool) -> BenchmarkSeen:
    ic = validate_inference_cluster(obj)
    kind = BENCHMARK_STEP if benchmark else ACCEPTANCE_STEP
    return asyncio.run(read_on_demand(cast(KubeAPI, api), ic, obj, kind=kind))


def test_rival_jobs_are_read_only_when_the_rival_is_active() -> None:
    accept_job: dict[str, Any] = job(ACCEPT_JOB)
    api = JobsAPI({"acceptance": [accept_job]})
    quiet = read(api, obj_with({ANNOTATION_BENCHMARK: "alice"}), benchmark=True)
    assert quiet.rival_jobs == {}
    assert api.lists == ["Job sparkllm.io/cluster=llm,app.kubernetes.io/component=benchmark"]
    api.lists.clear()
    accepting = {"job": ACCEPT_JOB, "user": "alice", "phase": "Running"}
    seen = read(api, obj_with({ANNOTATION_BENCHMARK: "alice"}, acceptance=accepting),
                benchmark=True)  # fmt: skip
    assert list(seen.rival_jobs["acceptance"]) == [ACCEPT_JOB]
    assert "Job sparkllm.io/cluster=llm,app.kubernetes.io/component=acceptance" in api.lists
    assert json.dumps(sorted(seen.user_keys or ())) == '["alice"]'
