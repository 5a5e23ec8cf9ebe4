"""A staging Job as one pass reads it: outcome, role, node, and its pod's latest record
(a clean Job's: the bytes its ``cleaned`` line says it freed).

Why apart from ``decide/staging.py``: this is the reading of raw objects (the Job, its
pods, the tail of its pod's log) into one frozen fact, pure and tested on its own, as
``job_result`` is for the benchmark's Jobs; ``reads.read_staging`` fetches what it needs.

Progress comes from the pod's log, read through the API server (its last lines), not from
the termination message: the message exists only once the container ended, and the
status should show bytes, rate and ETA while it runs. At the end the log is still there
(the pod stays with its Job); when it cannot be read, the termination message (policy
``FallbackToLogsOnError``: the log's tail on a failure) is read the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from sparkllm.keys import (
    ANNOTATION_STAGING_NODE,
    LABEL_STAGING_DIGEST,
    LABEL_STAGING_REPLICA,
    LABEL_STAGING_ROLE,
)
from sparkllm.reconcile.decide.actions import Removal
from sparkllm.render.model_staging import ROLES, STAGING_CONTAINER, Role
from sparkllm.staging.progress import ProgressRecord, read_record

Outcome = Literal["running", "succeeded", "failed"]
LOG_TAIL_LINES: Final = 20  # the last record and the stderr line after a failure
LOG_LIMIT_BYTES: Final = 16 * 1024
SERVING_EVENT: Final = '"event": "serving"'
CLEANED_EVENT: Final = "cleaned"  # a clean Job's one line: what it removed, bytes freed
_SUCCEEDED: Final = ("Complete", "SuccessCriteriaMet")
_FAILED: Final = ("Failed", "FailureTarget")


@dataclass(frozen=True)
class StagingJob:
    """One staging Job as read: its labels' facts, its outcome, its latest record."""

    name: str
    namespace: str
    uid: str
    digest: str
    role: Role
    replica: int
    node: str
    outcome: Outcome
    deleting: bool = False
    record: ProgressRecord | None = None  # the last progress record of its pod's log
    serving: bool = False  # a serve Job's log said "serving": peers may copy now
    detail: str = ""  # the pod's termination message or the Job's reason, when no record
    bytes_freed: int | None = None  # a clean Job's ``cleaned`` line: the bytes it removed
    blocked: str = ""  # why its running pod's container cannot start (a kubelet's word)


def latest_pod(pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The Job's newest pod (one attempt: ``backoffLimit: 0``)."""
    ordered = sorted(pods, key=lambda p: str(p["metadata"].get("creationTimestamp", "")))
    return ordered[-1] if ordered else None


def last_record(text: str) -> ProgressRecord | None:
    """The last progress record among ``text``'s lines (log lines and stderr skipped)."""
    for line in reversed(text.splitlines()):
        record = read_record(line.strip())
        if record is not None:
            return record
    return None


def bytes_freed(text: str) -> int | None:
    """The ``bytesFreed`` of the last ``{"event": "cleaned", ...}`` line in ``text``."""
    for line in reversed(text.splitlines()):
        try:
            raw = json.loads(line.strip())
        except ValueError:
            continue
        if isinstance(raw, dict) and raw.get("event") == CLEANED_EVENT:
            freed = raw.get("bytesFreed")
            return freed if isinstance(freed, int) and freed >= 0 else None
    return None


def _role(value: str | None) -> Role | None:
    return next((r for r in ROLES if r == value), None)


def staging_job(
    job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *, log: str | None
) -> StagingJob | None:
    """``job`` read into a fact; None when its labels are not a staging Job's."""
    meta = job["metadata"]
    labels: Mapping[str, str] = meta.get("labels") or {}
    role, replica = _role(labels.get(LABEL_STAGING_ROLE)), labels.get(LABEL_STAGING_REPLICA, "")
    if role is None or not replica.isdigit():
        return None
    status = job.get("status") or {}
    true = {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}
    pod = latest_pod(pods)
    terminated = _terminated(pod)
    phase = ((pod or {}).get("status") or {}).get("phase")
    outcome: Outcome = "running"
    if any(kind in true for kind in _SUCCEEDED) or phase == "Succeeded":
        outcome = "succeeded"
    elif any(kind in true for kind in _FAILED) or phase == "Failed":
        outcome = "failed"
    message = str((terminated or {}).get("message") or "")
    record = last_record(log or "") or last_record(message)
    failed = next((true[k] for k in _FAILED if k in true), None)
    detail = message.strip().splitlines()[-1] if message.strip() else ""
    if not detail and failed is not None:
        detail = f"{failed.get('reason', '')}: {failed.get('message', '')}".strip(": ")
    return StagingJob(
        name=str(meta["name"]),
        namespace=str(meta.get("namespace") or "default"),
        uid=str(meta.get("uid") or ""),
        digest=labels.get(LABEL_STAGING_DIGEST, ""),
        role=role,
        replica=int(replica),
        node=str((meta.get("annotations") or {}).get(ANNOTATION_STAGING_NODE, "")),
        outcome=outcome,
        deleting=bool(meta.get("deletionTimestamp")),
        record=record,
        serving=SERVING_EVENT in (log or ""),
        detail=detail[:512],
        bytes_freed=bytes_freed(log or "") if role == "clean" else None,
        blocked=blocked_reason(pod)[:512] if outcome == "running" else "",
    )


# A container's waiting reasons while it is on its way: anything else keeps it from
# starting until someone acts (CreateContainerConfigError: a Secret or key missing;
# ErrImagePull, ImagePullBackOff, InvalidImageName, CreateContainerError, ...).
_ON_ITS_WAY: Final = frozenset({"", "ContainerCreating", "PodInitializing"})


def blocked_reason(pod: Mapping[str, Any] | None) -> str:
    """Why ``pod``'s staging container cannot start, as its status says, or "": its
    container waiting for a reason other than being created, or the pod unschedulable.
    Without it a stage pod short of its credentials Secret would wait silently."""
    status = (pod or {}).get("status") or {}
    for container in status.get("containerStatuses") or []:
        if container.get("name") != STAGING_CONTAINER:
            continue
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if reason not in _ON_ITS_WAY:
            return f"{reason}: {waiting.get('message') or ''}".rstrip(": ")
    for cond in status.get("conditions") or []:
        unplaced = cond.get("type") == "PodScheduled" and cond.get("status") == "False"
        if unplaced and cond.get("reason") == "Unschedulable":
            return f"Unschedulable: {cond.get('message') or ''}".rstrip(": ")
    return ""


def _terminated(pod: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    for container in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if container.get("name") == STAGING_CONTAINER:
            terminated = (container.get("state") or {}).get("terminated")
            return terminated if isinstance(terminated, Mapping) else None
    return None


def job_removal(job: StagingJob) -> Removal:
    """The deletion of ``job`` (its uid as the precondition)."""
    return Removal(
        api_version="batch/v1", kind="Job", name=job.name, namespace=job.namespace, uid=job.uid
    )
