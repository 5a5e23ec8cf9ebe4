"""What a benchmark Job shows, and what one pass does about a request: pure.

The decision behind ``reconcile.benchmark`` (whose reads are part of observe and whose
Job writes ``execute`` makes), kept free of I/O and the clock so every branch is tested
with plain asserts:

- request, Job absent: create it when the cluster is Ready (status ``Running``), else
  status ``Waiting``; a user that is not a key of the users' Secret fails at once.
- request, Job running: status ``Running``; any other unfinished benchmark Job of the
  cluster is superseded (another request, or an older spec generation) and deleted —
  two benchmarks at once would measure each other.
- request, Job finished (succeeded, or failed: ``sparkllm bench`` exits 1 when a
  scenario did not pass): the summary from the pod's termination message goes into
  status (``Succeeded``/``Failed``) with ``BenchmarkCompleted``/``BenchmarkFailed``, and
  the annotation is to be removed — the request is answered.
- no request while status shows one in flight: the user withdrew it — a running Job is
  deleted (``Cancelled``), a finished one is still reported.

Why no memory between passes: the Job's name is a hash of the request and the spec
generation, so "the Job for this request" is found by name; times come from the
objects, not the clock; and a status equal to the live one is not written and posts no
Event (Events only on transitions). An identical request while its finished Job still
exists (``ttlSecondsAfterFinished``: a day) is answered from that Job; deleting the Job
runs it again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final, NamedTuple

from sparkllm.api import Reason
from sparkllm.render.benchmark import (
    ANNOTATION_BENCHMARK,
    ANNOTATION_BENCHMARK_USER,
    BENCH_CONTAINER,
    BenchmarkRequest,
)
from sparkllm.render.objects import JSON

MESSAGE_LIMIT: Final = 512  # of a termination message that is not a summary
# A Job's verdict: the terminal conditions, and (1.31+) the ones that precede them.
_JOB_SUCCEEDED: Final = ("Complete", "SuccessCriteriaMet")
_JOB_DONE: Final = (*_JOB_SUCCEEDED, "Failed", "FailureTarget")


class BenchmarkPhase(StrEnum):
    """``status.benchmark.phase``."""

    WAITING = "Waiting"  # requested; the cluster is not Ready yet
    RUNNING = "Running"  # the Job runs
    SUCCEEDED = "Succeeded"  # every request completed, every needle found
    FAILED = "Failed"  # the run did not pass, could not start, or was refused
    CANCELLED = "Cancelled"  # the annotation was removed before the Job finished


IN_FLIGHT: Final = frozenset({BenchmarkPhase.WAITING.value, BenchmarkPhase.RUNNING.value})


class BenchmarkEvent(NamedTuple):
    """An Event for the reconciler to post about the InferenceCluster."""

    warning: bool
    reason: Reason
    message: str


@dataclass(frozen=True)
class JobResult:
    """What one benchmark Job and its pod show."""

    name: str
    uid: str
    user: str
    requested_at: str | None
    finished: bool = False
    succeeded: bool = False
    completed_at: str | None = None
    summary: JSON | None = None
    detail: str = ""  # why it failed, when the summary does not say
    deleting: bool = False


@dataclass(frozen=True)
class BenchmarkPlan:
    """The pure decision of one pass."""

    status: JSON | None = None
    events: tuple[BenchmarkEvent, ...] = ()
    remove_annotation: bool = False
    create: bool = False
    delete: tuple[JobResult, ...] = ()


def _ts(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- reading a Job ---------------------------------------------------------------------


def _terminated(pods: Sequence[Mapping[str, Any]]) -> tuple[JSON | None, str | None]:
    """The bench container's ``state.terminated`` and the pod phase (latest pod first)."""
    for pod in sorted(pods, key=lambda p: str(p["metadata"].get("creationTimestamp", "")))[::-1]:
        status = pod.get("status") or {}
        for container in status.get("containerStatuses") or []:
            if container.get("name") == BENCH_CONTAINER:
                terminated = (container.get("state") or {}).get("terminated")
                if terminated:
                    return dict(terminated), status.get("phase")
    return None, None


def parse_termination_message(text: str) -> tuple[JSON | None, str]:
    """(the summary, "") when ``text`` is the JSON summary, else (None, a short excerpt)."""
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return parsed, ""
    excerpt = " ".join(text.split())
    return None, excerpt if len(excerpt) <= MESSAGE_LIMIT else excerpt[-MESSAGE_LIMIT:]


def job_result(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> JobResult:
    """The Job's outcome, from its conditions and its pod's termination message.

    Finished once the Job says so, or once its only pod terminated (one attempt:
    ``backoffLimit: 0``), whichever the pass sees first; times come from the objects,
    never the clock, so every later pass derives the same status.
    """
    meta = job["metadata"]
    status = job.get("status") or {}
    true = {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}
    done = next((true[kind] for kind in _JOB_DONE if kind in true), None)
    terminated, pod_phase = _terminated(pods)
    base = JobResult(
        name=str(meta["name"]),
        uid=str(meta.get("uid", "")),
        user=str((meta.get("annotations") or {}).get(ANNOTATION_BENCHMARK_USER, "")),
        requested_at=meta.get("creationTimestamp"),
        deleting=bool(meta.get("deletionTimestamp")),
    )
    pod_done = terminated is not None and pod_phase in ("Succeeded", "Failed")
    if done is None and not pod_done:
        return base
    # The Job's word when it has spoken; before that, the one attempt's pod phase.
    succeeded = done.get("type") in _JOB_SUCCEEDED if done else pod_phase == "Succeeded"
    summary, excerpt = parse_termination_message(str((terminated or {}).get("message") or ""))
    reasons = []
    if terminated is not None and terminated.get("exitCode"):
        reasons.append(f"exit code {terminated['exitCode']}")
    if done is not None and not succeeded and done.get("reason"):
        reasons.append(f"{done.get('reason')}: {done.get('message', '')}".rstrip(": "))
    if excerpt:
        reasons.append(excerpt)
    if summary is None and not excerpt:
        reasons.append("no summary in the pod's termination message")
    return replace(
        base,
        finished=True,
        succeeded=succeeded,
        completed_at=(terminated or {}).get("finishedAt")
        or (done or {}).get("lastTransitionTime")
        or status.get("completionTime"),
        summary=summary,
        detail="" if succeeded and summary is not None else "; ".join(reasons),
    )


# --- status and messages ---------------------------------------------------------------


def summary_problems(summary: Mapping[str, Any]) -> list[str]:
    """Why a summary did not pass: failed requests and missed needles, per scenario."""
    problems = []
    for scenario in summary.get("scenarios") or []:
        name = scenario.get("name", "?")
        if scenario.get("errors"):
            problems.append(
                f"{name}: {scenario['errors']} of {scenario.get('requests', '?')} requests failed"
            )
        found = str(scenario.get("needlesFound") or "")
        passed, _, total = found.partition("/")
        if found and passed != total:
            problems.append(f"{name}: needles found {found}")
    return problems


def describe_summary(summary: Mapping[str, Any]) -> str:
    """One line per scenario: completed, TTFT p95, TPOT p95, output tokens per second."""
    parts = []
    for scenario in summary.get("scenarios") or []:
        ttft = (scenario.get("ttftMs") or {}).get("p95")
        tpot = (scenario.get("tpotMs") or {}).get("p95")
        parts.append(
            f"{scenario.get('name', '?')}: {scenario.get('completed', '?')}/"
            f"{scenario.get('requests', '?')} done, TTFT p95 {ttft} ms, TPOT p95 {tpot} ms, "
            f"{scenario.get('outputTokensPerSecond', '?')} tok/s"
        )
    return "; ".join(parts)


def terminal_status(result: JobResult) -> JSON:
    """``status.benchmark`` for a finished Job."""
    phase = BenchmarkPhase.SUCCEEDED if result.succeeded else BenchmarkPhase.FAILED
    status: JSON = {
        "job": result.name,
        "user": result.user,
        "phase": phase.value,
        "succeeded": result.succeeded,
        "requestedAt": result.requested_at,
        "completedAt": result.completed_at,
    }
    if result.summary is not None:
        status["summary"] = result.summary
    problems = summary_problems(result.summary or {})
    message = "; ".join([*(["not passed: " + "; ".join(problems)] if problems else []),
                         *([result.detail] if result.detail else [])])  # fmt: skip
    if message:
        status["message"] = message
    return status


def _completion_event(result: JobResult, status: Mapping[str, Any]) -> BenchmarkEvent:
    who = f"benchmark Job {result.name} (user {result.user})"
    if result.succeeded:
        described = describe_summary(result.summary or {})
        return BenchmarkEvent(False, Reason.BENCHMARK_COMPLETED, f"{who} passed: {described}")
    return BenchmarkEvent(True, Reason.BENCHMARK_FAILED, f"{who} failed: {status.get('message')}")


def _failed(*, user: str, message: str, job: str | None = None) -> JSON:
    status: JSON = {"user": user, "phase": BenchmarkPhase.FAILED.value, "succeeded": False}
    if job is not None:
        status["job"] = job
    return {**status, "message": message}


# --- the decision ------------------------------------------------------------------------


def plan_benchmark(
    *,
    request: BenchmarkRequest | None,
    wanted: str | None,
    jobs: Mapping[str, JobResult],
    previous: Mapping[str, Any] | None,
    ready: bool,
    key_problem: str | None,
    now: datetime,
) -> BenchmarkPlan:
    """What to do this pass; pure. ``wanted`` is the request's Job name.

    ``key_problem`` says why the user's key cannot be used (Secret or key missing); it
    is only looked at when a Job would be created. Events come only with a status that
    differs from ``previous`` (transitions), so a repeated pass posts nothing.
    """
    previous = previous or {}
    if request is None or wanted is None:
        plan = _withdrawn(jobs, previous, now=now)
    else:
        superseded = tuple(
            r for n, r in jobs.items() if n != wanted and not r.finished and not r.deleting
        )
        plan = replace(
            _requested(
                request,
                wanted,
                jobs=jobs,
                previous=previous,
                ready=ready,
                key_problem=key_problem,
                now=now,
            ),
            delete=superseded,
        )
    if plan.status is not None and plan.status == dict(previous):
        plan = replace(plan, status=None, events=())
    return plan


def _requested(
    request: BenchmarkRequest,
    wanted: str,
    *,
    jobs: Mapping[str, JobResult],
    previous: Mapping[str, Any],
    ready: bool,
    key_problem: str | None,
    now: datetime,
) -> BenchmarkPlan:
    result = jobs.get(wanted)
    if result is not None and result.finished:
        status = terminal_status(result)
        return BenchmarkPlan(
            status=status,
            events=(_completion_event(result, status),),
            remove_annotation=True,
        )
    if result is not None and result.deleting:  # cancelled a moment ago; asked for again
        return BenchmarkPlan(status=_waiting(wanted, request.user, f"Job {wanted} to be deleted"))
    if result is not None:
        return BenchmarkPlan(status=_running(result.name, request.user, result.requested_at))
    if previous.get("job") == wanted and previous.get("phase") == BenchmarkPhase.RUNNING:
        message = f"benchmark Job {wanted} disappeared before it finished"
        return BenchmarkPlan(
            status={**previous, **_failed(user=request.user, message=message, job=wanted)},
            events=(BenchmarkEvent(True, Reason.BENCHMARK_FAILED, message),),
            remove_annotation=True,
        )
    if not ready:
        return BenchmarkPlan(
            status=_waiting(wanted, request.user, "the InferenceCluster to be Ready")
        )
    if key_problem is not None:
        message = f"benchmark not started: {key_problem}"
        return BenchmarkPlan(
            status=_failed(user=request.user, message=message),
            events=(BenchmarkEvent(True, Reason.BENCHMARK_FAILED, message),),
            remove_annotation=True,
        )
    return BenchmarkPlan(status=_running(wanted, request.user, _ts(now)), create=True)


def _withdrawn(
    jobs: Mapping[str, JobResult], previous: Mapping[str, Any], *, now: datetime
) -> BenchmarkPlan:
    """No request: finish reporting, or cancel, what status still shows in flight."""
    if previous.get("phase") not in IN_FLIGHT:
        return BenchmarkPlan()
    result = jobs.get(str(previous.get("job")))
    cancelled = {
        **previous,
        "phase": BenchmarkPhase.CANCELLED.value,
        "completedAt": _ts(now),
        "message": f"annotation {ANNOTATION_BENCHMARK} removed before the benchmark finished",
    }
    if previous.get("phase") == BenchmarkPhase.WAITING or result is None or result.deleting:
        return BenchmarkPlan(status=cancelled)
    if result.finished:
        status = terminal_status(result)
        return BenchmarkPlan(status=status, events=(_completion_event(result, status),))
    return BenchmarkPlan(status=cancelled, delete=(result,))


def _waiting(job: str, user: str, what: str) -> JSON:
    return {"job": job, "user": user, "phase": BenchmarkPhase.WAITING.value,
            "message": f"waiting for {what}"}  # fmt: skip


def _running(job: str, user: str, requested_at: str | None) -> JSON:
    status: JSON = {"job": job, "user": user, "phase": BenchmarkPhase.RUNNING.value}
    if requested_at is not None:
        status["requestedAt"] = requested_at
    return status


def plan_rejected(*, user: str, message: str, previous: Mapping[str, Any] | None) -> BenchmarkPlan:
    """An invalid request (the annotations say why): fail it and consume it."""
    plan = BenchmarkPlan(
        status=_failed(user=user, message=message),
        events=(BenchmarkEvent(True, Reason.BENCHMARK_FAILED, message),),
        remove_annotation=True,
    )
    return replace(plan, status=None, events=()) if plan.status == dict(previous or {}) else plan


def in_flight(previous: Mapping[str, Any] | None) -> bool:
    """Whether ``status.benchmark`` shows a request not yet answered."""
    return (previous or {}).get("phase") in IN_FLIGHT


__all__ = [
    "IN_FLIGHT",
    "BenchmarkEvent",
    "BenchmarkPhase",
    "BenchmarkPlan",
    "JobResult",
    "describe_summary",
    "in_flight",
    "job_result",
    "parse_termination_message",
    "plan_benchmark",
    "plan_rejected",
    "summary_problems",
    "terminal_status",
]
