"""What a benchmark Job shows, and what one pass does about a request: pure.

The decision behind ``decide.benchmark`` (whose reads are observe's, ``reads.py``, and
whose Job writes ``execute`` makes), kept free of I/O and the clock so every branch is tested
with plain asserts:

- request, Job absent: create it when the cluster is Ready (status ``Running``), else
  status ``Waiting``; a user that is not a key of the users' Secret fails at once.
- request, Job running: status ``Running``; any other unfinished benchmark Job of the
  cluster is superseded (another request, or an older spec generation) and deleted —
  two benchmarks at once would measure each other.
- request, Job absent, while a run of the other kind (acceptance <-> benchmark) has a
  Job that has not finished: status ``Waiting`` naming it, one Normal Event; it starts
  by itself when that one ends (``reconcile.run_exclusion`` says what it waits for).
- request, Job finished (succeeded, or failed: ``sparkllm bench`` exits 1 when a
  scenario did not pass): the summary from the pod's termination message goes into
  status (``Succeeded``/``Failed``) with ``BenchmarkCompleted``/``BenchmarkFailed``, and
  the annotation is to be removed — the request is answered.
- no request while status shows one in flight: the user withdrew it — a running Job is
  deleted (``Cancelled``), a finished one is still reported.

Why no memory between passes: the Job's name is a hash of the request and the spec
generation, so "the Job for this request" is found by name; times come from the
objects and the pass's ``now`` (``requestedAt`` is the now of the pass that planned the
Job, written with it and kept from status after); and a status equal to the live one is
not written and posts no Event (Events only on transitions). An identical request while
its finished Job still exists (``ttlSecondsAfterFinished``: a day) is answered from that
Job; deleting the Job runs it again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final, NamedTuple, Protocol

from sparkllm.api import Reason
from sparkllm.keys import ANNOTATION_BENCHMARK
from sparkllm.reconcile.decide.job_result import (
    JobResult,
    job_result,
    parse_termination_message,
)
from sparkllm.render.objects import JSON


class BenchmarkPhase(StrEnum):
    """``status.benchmark.phase``."""

    WAITING = "Waiting"  # requested; the cluster is not Ready yet
    RUNNING = "Running"  # the Job runs
    SUCCEEDED = "Succeeded"  # every request completed, every needle found
    FAILED = "Failed"  # the run did not pass, could not start, or was refused
    CANCELLED = "Cancelled"  # the annotation was removed before the Job finished


IN_FLIGHT: Final = frozenset({BenchmarkPhase.WAITING.value, BenchmarkPhase.RUNNING.value})
TERMINAL: Final = frozenset({BenchmarkPhase.SUCCEEDED.value, BenchmarkPhase.FAILED.value})


class Requester(Protocol):
    """A request on the object: who runs it (a key of the users' Secret)."""

    @property
    def user(self) -> str: ...


class BenchmarkEvent(NamedTuple):
    """An Event for the reconciler to post about the InferenceCluster."""

    warning: bool
    reason: Reason
    message: str


@dataclass(frozen=True)
class BenchmarkPlan:
    """The pure decision of one pass."""

    status: JSON | None = None
    events: tuple[BenchmarkEvent, ...] = ()
    remove_annotation: bool = False
    create: bool = False
    delete: tuple[JobResult, ...] = ()


@dataclass(frozen=True)
class OnDemand:
    """What differs between the runs on demand a pass reports: benchmark, acceptance.

    The decision is the same for both (one Job per request, found by name; status and
    Events on transitions); the names, the Event reasons and how a summary is told are not.
    """

    noun: str
    """In messages: "benchmark", "acceptance"."""
    annotation: str
    """The request annotation, named when it is withdrawn."""
    completed: Reason
    failed: Reason
    problems: Callable[[Mapping[str, Any]], list[str]]
    """Why a summary did not pass."""
    describe: Callable[[Mapping[str, Any]], str]
    """A passed summary in one line, for the Event."""
    waiting: Reason
    """The Normal Event when a request waits for a run of the other kind."""


def _ts(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def requested_at(result: JobResult, previous: Mapping[str, Any] | None) -> str | None:
    """When the run was asked for: what status says since the pass that planned the Job
    (that pass's clock, written with the create), else the Job's creationTimestamp (a Job
    status never named)."""
    if previous and previous.get("job") == result.name and previous.get("requestedAt"):
        return str(previous["requestedAt"])
    return result.requested_at


def terminal_status(
    result: JobResult,
    *,
    kind: OnDemand | None = None,
    previous: Mapping[str, Any] | None = None,
) -> JSON:
    """``status.benchmark`` (or ``kind``'s field) for a finished Job (``previous``: the
    live value, whose ``requestedAt`` it keeps)."""
    kind = kind or BENCHMARK
    phase = BenchmarkPhase.SUCCEEDED if result.succeeded else BenchmarkPhase.FAILED
    status: JSON = {
        "job": result.name,
        "user": result.user,
        "phase": phase.value,
        "succeeded": result.succeeded,
        "requestedAt": requested_at(result, previous),
        "completedAt": result.completed_at,
    }
    if result.summary is not None:
        status["summary"] = result.summary
    problems = kind.problems(result.summary or {})
    message = "; ".join([*(["not passed: " + "; ".join(problems)] if problems else []),
                         *([result.detail] if result.detail else [])])  # fmt: skip
    if message:
        status["message"] = message
    return status


def _completion_event(
    result: JobResult, status: Mapping[str, Any], *, kind: OnDemand
) -> BenchmarkEvent:
    who = f"{kind.noun} Job {result.name} (user {result.user})"
    if result.succeeded:
        described = kind.describe(result.summary or {})
        return BenchmarkEvent(False, kind.completed, f"{who} passed: {described}")
    return BenchmarkEvent(True, kind.failed, f"{who} failed: {status.get('message')}")


def _failed(*, user: str, message: str, job: str | None = None) -> JSON:
    status: JSON = {"user": user, "phase": BenchmarkPhase.FAILED.value, "succeeded": False}
    if job is not None:
        status["job"] = job
    return {**status, "message": message}


# --- the decision ------------------------------------------------------------------------


def plan_benchmark(
    *,
    request: Requester | None,
    wanted: str | None,
    jobs: Mapping[str, JobResult],
    previous: Mapping[str, Any] | None,
    ready: bool,
    key_problem: str | None,
    now: datetime,
    kind: OnDemand | None = None,
    wait_for: str | None = None,
) -> BenchmarkPlan:
    """What to do this pass; pure. ``wanted`` is the request's Job name.

    ``key_problem`` says why the user's key cannot be used (Secret or key missing); it
    is only looked at when a Job would be created, as is ``wait_for``: the run of the
    other kind this one must not overlap (None: nothing). Events come only with a status
    that differs from ``previous`` (transitions), so a repeated pass posts nothing.
    """
    previous, kind = previous or {}, kind or BENCHMARK
    if request is None or wanted is None:
        plan = _withdrawn(jobs, previous, now=now, kind=kind)
    else:
        superseded = tuple(
            r for n, r in jobs.items() if n != wanted and not r.finished and not r.deleting
        )
        plan = replace(
            _requested(
                request.user,
                wanted,
                kind=kind,
                jobs=jobs,
                previous=previous,
                ready=ready,
                key_problem=key_problem,
                now=now,
                wait_for=wait_for,
            ),
            delete=superseded,
        )
    if plan.status is not None and plan.status == dict(previous):
        plan = replace(plan, status=None, events=())
    return plan


def _requested(
    user: str,
    wanted: str,
    *,
    kind: OnDemand,
    jobs: Mapping[str, JobResult],
    previous: Mapping[str, Any],
    ready: bool,
    key_problem: str | None,
    now: datetime,
    wait_for: str | None,
) -> BenchmarkPlan:
    result = jobs.get(wanted)
    if result is not None and result.finished:
        status = terminal_status(result, kind=kind, previous=previous)
        return BenchmarkPlan(
            status=status,
            events=(_completion_event(result, status, kind=kind),),
            remove_annotation=True,
        )
    if result is not None and result.deleting:  # cancelled a moment ago; asked for again
        return BenchmarkPlan(status=_waiting(wanted, user, f"Job {wanted} to be deleted"))
    if result is not None:
        return BenchmarkPlan(status=_running(result.name, user, requested_at(result, previous)))
    if previous.get("job") == wanted and previous.get("phase") == BenchmarkPhase.RUNNING:
        message = f"{kind.noun} Job {wanted} disappeared before it finished"
        return BenchmarkPlan(
            status={**previous, **_failed(user=user, message=message, job=wanted)},
            events=(BenchmarkEvent(True, kind.failed, message),),
            remove_annotation=True,
        )
    if not ready:
        return BenchmarkPlan(status=_waiting(wanted, user, "the InferenceCluster to be Ready"))
    if key_problem is not None:
        message = f"{kind.noun} not started: {key_problem}"
        return BenchmarkPlan(
            status=_failed(user=user, message=message),
            events=(BenchmarkEvent(True, kind.failed, message),),
            remove_annotation=True,
        )
    if wait_for is not None:
        return _waiting_for_rival(wanted, user, wait_for, kind=kind)
    return BenchmarkPlan(status=_running(wanted, user, _ts(now)), create=True)


def _waiting_for_rival(wanted: str, user: str, rival: str, *, kind: OnDemand) -> BenchmarkPlan:
    why = "two runs at once would measure each other; this one starts when that one ends"
    status = _waiting(wanted, user, f"{rival}: {why}")
    message = f"{kind.noun} Job {wanted} (user {user}) waits for {rival}: {why}"
    return BenchmarkPlan(status=status, events=(BenchmarkEvent(False, kind.waiting, message),))


def _withdrawn(
    jobs: Mapping[str, JobResult], previous: Mapping[str, Any], *, now: datetime, kind: OnDemand
) -> BenchmarkPlan:
    """No request: finish reporting, or cancel, what status still shows in flight."""
    if previous.get("phase") not in IN_FLIGHT:
        return BenchmarkPlan()
    result = jobs.get(str(previous.get("job")))
    cancelled = {
        **previous,
        "phase": BenchmarkPhase.CANCELLED.value,
        "completedAt": _ts(now),
        "message": f"annotation {kind.annotation} removed before the {kind.noun} finished",
    }
    if previous.get("phase") == BenchmarkPhase.WAITING or result is None or result.deleting:
        return BenchmarkPlan(status=cancelled)
    if result.finished:
        status = terminal_status(result, kind=kind, previous=previous)
        return BenchmarkPlan(status=status, events=(_completion_event(result, status, kind=kind),))
    return BenchmarkPlan(status=cancelled, delete=(result,))


def _waiting(job: str, user: str, what: str) -> JSON:
    return {"job": job, "user": user, "phase": BenchmarkPhase.WAITING.value,
            "message": f"waiting for {what}"}  # fmt: skip


def _running(job: str, user: str, requested_at: str | None) -> JSON:
    status: JSON = {"job": job, "user": user, "phase": BenchmarkPhase.RUNNING.value}
    if requested_at is not None:
        status["requestedAt"] = requested_at
    return status


def plan_rejected(
    *, user: str, message: str, previous: Mapping[str, Any] | None, kind: OnDemand | None = None
) -> BenchmarkPlan:
    """An invalid request (the annotations say why): fail it and consume it."""
    plan = BenchmarkPlan(
        status=_failed(user=user, message=message),
        events=(BenchmarkEvent(True, (kind or BENCHMARK).failed, message),),
        remove_annotation=True,
    )
    return replace(plan, status=None, events=()) if plan.status == dict(previous or {}) else plan


BENCHMARK: Final = OnDemand(
    noun="benchmark",
    annotation=ANNOTATION_BENCHMARK,
    completed=Reason.BENCHMARK_COMPLETED,
    failed=Reason.BENCHMARK_FAILED,
    problems=summary_problems,
    describe=describe_summary,
    waiting=Reason.BENCHMARK_WAITING,
)


def in_flight(previous: Mapping[str, Any] | None) -> bool:
    """Whether ``status.benchmark`` shows a request not yet answered."""
    return (previous or {}).get("phase") in IN_FLIGHT


__all__ = [
    "BENCHMARK",
    "IN_FLIGHT",
    "TERMINAL",
    "BenchmarkEvent",
    "BenchmarkPhase",
    "BenchmarkPlan",
    "JobResult",
    "OnDemand",
    "describe_summary",
    "in_flight",
    "job_result",
    "parse_termination_message",
    "plan_benchmark",
    "plan_rejected",
    "summary_problems",
    "terminal_status",
]
