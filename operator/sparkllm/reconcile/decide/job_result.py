"""What a Job run on demand shows: its verdict, times and the summary its pod left.

Split from the decision (``benchmark_plan``) because reading a Job is the same for every
run on demand — the benchmark and the acceptance checklist both run ``sparkllm bench``
as one pod, one attempt, the summary in the container's termination message — while
what a pass does about it differs. Pure: objects in, a ``JobResult`` out; times come
from the objects, never the clock, so every later pass derives the same status.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from sparkllm.keys import ANNOTATION_BENCHMARK_USER
from sparkllm.render.benchmark import BENCH_CONTAINER
from sparkllm.render.objects import JSON

MESSAGE_LIMIT: Final = 512  # of a termination message that is not a summary
# A Job's verdict: the terminal conditions, and (1.31+) the ones that precede them.
_JOB_SUCCEEDED: Final = ("Complete", "SuccessCriteriaMet")
_JOB_DONE: Final = (*_JOB_SUCCEEDED, "Failed", "FailureTarget")


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


__all__ = ["MESSAGE_LIMIT", "JobResult", "job_result", "parse_termination_message"]
