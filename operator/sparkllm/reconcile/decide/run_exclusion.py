"""One run on demand at a time per InferenceCluster: a benchmark and an acceptance never overlap.

Why: both send load through the same front door to the same engines and measure latency
and throughput. Run together, each measures the other's load as the engine's slowness
(TTFT under Scale8 plus the benchmark's C8 is neither figure), and the acceptance would
set or compare a baseline on numbers that mean nothing. Within one kind this was already
so (a newer request supersedes a running one); across kinds it is this module.

What a user meets: the second request **waits** — ``status.<field>.phase: Waiting``, the
message naming the other run's Job and user, one Normal Event (``BenchmarkWaiting`` /
``AcceptanceWaiting``) — and starts by itself in the pass that sees the other Job finish
(its end is an event on the InferenceCluster: the other step writes its status and
removes its annotation). Waiting rather than refusing: the user asked for both and gets
both, one after the other, without annotating again; withdrawing the annotation while it
waits cancels it as any waiting request.

The tie-break in one pass: when both are asked for and neither Job exists yet, the
benchmark goes first — a fixed order, so every pass decides the same way. The
acceptance step's rival carries the benchmark's request (``goes_first``), so the
acceptance waits for the Job the benchmark is creating, by its name, before it exists.

Pure: what a step must read about its rivals (``rival_active``) and what it waits for
(``rival_wait``) come from the object and the Jobs read, never from the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sparkllm.api import InferenceCluster
from sparkllm.errors import SpecError
from sparkllm.reconcile.decide.benchmark_plan import JobResult, in_flight


class Pending(Protocol):
    """A rival's valid request: who runs it, and its Job's name."""

    @property
    def user(self) -> str: ...

    @property
    def job(self) -> str: ...


@dataclass(frozen=True)
class Rival:
    """Another kind of run on demand that must not run at the same time."""

    noun: str
    """In messages: "benchmark", "acceptance"."""
    selector: Callable[[str], str]
    """Cluster name -> the label selector of its Jobs and their pods."""
    status_field: str
    annotation: str
    """Its request annotation."""
    goes_first: Callable[[InferenceCluster, Mapping[str, Any]], Pending | None] | None = None
    """Set when its request, not yet a Job, goes before ours (the tie-break in one pass)."""


def rival_active(rival: Rival, obj: Mapping[str, Any]) -> bool:
    """Whether ``rival`` may have a Job that has not finished: its request is on the object,
    or its status shows one in flight. Otherwise its Jobs need not be read."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return rival.annotation in annotations or in_flight(
        (obj.get("status") or {}).get(rival.status_field)
    )


def _busy(noun: str, job: str, user: str, *, deleting: bool = False) -> str:
    going = "to be deleted" if deleting else "to finish"
    return f"the {noun} Job {job} (user {user}) {going}"


def rival_wait(
    rivals: Sequence[Rival],
    *,
    ic: InferenceCluster,
    obj: Mapping[str, Any],
    jobs: Mapping[str, Mapping[str, JobResult]],
) -> str | None:
    """What a new run must wait for (for "waiting for ..."), or None: it may start.

    ``jobs``: each rival's Jobs by name, keyed by the rival's noun. A rival Job that has
    not finished — still running, or being deleted (its pod may still send load) —
    blocks; so does a rival request that goes first and whose Job is not finished yet.
    """
    for rival in rivals:
        theirs = jobs.get(rival.noun) or {}
        for name in sorted(theirs):
            if not theirs[name].finished:
                result = theirs[name]
                return _busy(rival.noun, result.name, result.user, deleting=result.deleting)
        if rival.goes_first is None:
            continue
        try:
            pending = rival.goes_first(ic, obj)
        except SpecError:
            continue  # an invalid request is refused this pass; it makes no Job
        if pending is not None and pending.job not in theirs:
            return _busy(rival.noun, pending.job, pending.user)
    return None


__all__ = ["Pending", "Rival", "rival_active", "rival_wait"]
