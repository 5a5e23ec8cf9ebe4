"""Scaling down without dropping requests: take a replica out of routing, then remove it.

The router discovers rank-0 pods by labels, including ``sparkllm.io/serving=true``. To
remove a replica the operator first flips its live rank-0 pod to ``serving=false`` (the
router drops it from the pool within seconds and sends nothing new), then waits until the
engine reports no running requests (``sglang:num_running_reqs`` on its /metrics) or a
deadline passes, and only then deletes the replica's objects. The drain's start is an
annotation on that pod, so an operator restart mid-drain resumes it.

The observe step reads the running-request counts (``engines.RunningRequests``) of the
replicas being removed or drained; ``plan_drain`` decides from them (pure); ``execute``
patches the pods.

Planned gang restarts (a rolling update, ``sparkllm.io/restart=now``) drain the same way
before they stop a replica (``restarts.Action.DRAIN``): the same label, the same start
stamp, plus ``sparkllm.io/drain-reason`` naming the restart, so a pass after the restart
annotation was consumed (or after an operator restart) still knows why it drains.

A drain can be abandoned: a replica scaled down and back up before its objects went keeps
its rank-0 pod, still ``serving=false``. The StatefulSet never relabels a live pod, so
the operator puts it back (``undrain_patch``) once the replica runs again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from sparkllm.api import ENGINE_HTTP_PORT, Reason
from sparkllm.keys import (
    ANNOTATION_DRAIN_REASON,
    ANNOTATION_DRAIN_STARTED,
    LABEL_RANK,
    LABEL_REPLICA,
    LABEL_SERVING,
)
from sparkllm.reconcile.decide.actions import PendingEvent, PodPatch, earliest
from sparkllm.reconcile.decide.replicas import Observed, label, timestamp
from sparkllm.reconcile.decide.restarts import DrainFacts

ROUTER_LET_GO: Final = timedelta(seconds=6)  # smg drains a vanished worker for 5 s
DRAIN_DEADLINE: Final = timedelta(seconds=300)  # the documents' long requests take minutes
JSON = dict[str, Any]


@dataclass(frozen=True)
class DrainStep:
    """What to do with one replica being scaled away."""

    mark: bool  # flip rank 0 to serving=false (and stamp the start) now
    done: bool  # its objects may be deleted now
    retry_after: float | None = None
    started: datetime | None = None


def drain_step(rank0: Mapping[str, Any] | None, *, running: int | None, now: datetime) -> DrainStep:
    """Pure: the next step for a replica whose live rank-0 pod is ``rank0``."""
    if rank0 is None or rank0["metadata"].get("deletionTimestamp"):
        return DrainStep(mark=False, done=True)  # nothing serves: remove now
    labels = rank0["metadata"].get("labels") or {}
    stamp = (rank0["metadata"].get("annotations") or {}).get(ANNOTATION_DRAIN_STARTED)
    if labels.get(LABEL_SERVING) != "false" or stamp is None:
        return DrainStep(mark=True, done=False, retry_after=ROUTER_LET_GO.total_seconds())
    started = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    elapsed = now - started
    if elapsed >= DRAIN_DEADLINE or (elapsed >= ROUTER_LET_GO and running == 0):
        return DrainStep(mark=False, done=True, started=started)
    wait = (ROUTER_LET_GO - elapsed) if elapsed < ROUTER_LET_GO else timedelta(seconds=2)
    return DrainStep(
        mark=False, done=False, retry_after=max(wait.total_seconds(), 0.5), started=started
    )


def rank0_pod(pods: list[JSON]) -> JSON | None:
    live = [p for p in pods if (p["metadata"].get("labels") or {}).get(LABEL_RANK) == "0"]
    return live[0] if live else None


def mark_patch(rank0: Mapping[str, Any], *, now: datetime, reason: str | None = None) -> PodPatch:
    """Rank 0 out of routing (``serving=false``), the drain's start stamped (and its reason)."""
    annotations = {ANNOTATION_DRAIN_STARTED: timestamp(now)}
    if reason is not None:
        annotations[ANNOTATION_DRAIN_REASON] = reason
    patch = {"metadata": {"labels": {LABEL_SERVING: "false"}, "annotations": annotations}}
    meta = rank0["metadata"]
    return PodPatch(name=meta["name"], namespace=meta["namespace"], patch=patch)


def undrain_patch(rank0: Mapping[str, Any]) -> PodPatch | None:
    """Rank 0 back in routing (``serving=true``, drain stamps cleared) after a drain that
    no longer applies; None when it was never taken out (or is being deleted)."""
    meta = rank0["metadata"]
    annotations = meta.get("annotations") or {}
    stamps = (ANNOTATION_DRAIN_STARTED, ANNOTATION_DRAIN_REASON)
    out = (meta.get("labels") or {}).get(LABEL_SERVING) != "true"
    if meta.get("deletionTimestamp") or not (out or any(a in annotations for a in stamps)):
        return None
    patch = {"metadata": {"labels": {LABEL_SERVING: "true"}, "annotations": dict.fromkeys(stamps)}}
    return PodPatch(name=meta["name"], namespace=meta["namespace"], patch=patch)


def restart_drain(
    rank0: Mapping[str, Any] | None, *, running: int | None, now: datetime
) -> DrainFacts:
    """Pure: a serving replica's drain before a planned restart, as its rank-0 pod shows it."""
    if rank0 is None:
        return DrainFacts()
    reason = (rank0["metadata"].get("annotations") or {}).get(ANNOTATION_DRAIN_REASON)
    step = drain_step(rank0, running=running, now=now)
    return DrainFacts(
        reason=None if reason is None else str(reason),
        mark=step.mark,
        done=step.done,
        retry_after=step.retry_after,
        running=running,
    )


def draining_replicas(observed: Observed, replicas: int) -> list[int]:
    """Replicas whose running requests a pass reads: removed ones and restart drains."""
    stamped = {
        int(r)
        for p in observed.pods
        if ANNOTATION_DRAIN_STARTED in (p["metadata"].get("annotations") or {})
        and label(p, LABEL_RANK) == "0"
        and (r := label(p, LABEL_REPLICA)) is not None
        and r.isdigit()
    }
    return sorted(stamped | set(removed_replicas(observed, replicas)))


def removed_replicas(observed: Observed, replicas: int) -> list[int]:
    """Indexes of replicas with live StatefulSets beyond ``spec.replicas`` (being removed)."""
    return sorted(
        {
            int(r)
            for o in observed.statefulsets
            if (r := label(o, LABEL_REPLICA)) is not None and r.isdigit() and int(r) >= replicas
        }
    )


def rank0_address(observed: Observed, index: int) -> str | None:
    """Where a removed replica's rank 0 serves (its pod's host), if it has a pod there."""
    rank0 = rank0_pod(observed.by_replica(observed.pods, index))
    if rank0 is None or not (rank0.get("status") or {}).get("hostIP"):
        return None
    return f"http://{rank0['status']['hostIP']}:{ENGINE_HTTP_PORT}"


@dataclass(frozen=True)
class DrainPlan:
    """Replicas being scaled away: the pods to flip, what to keep for now, when to look."""

    patches: tuple[PodPatch, ...] = ()
    keep: frozenset[str] = frozenset()
    retry_after: float | None = None
    events: tuple[PendingEvent, ...] = ()


def plan_drain(
    observed: Observed, *, replicas: int, running: Mapping[int, int | None], now: datetime
) -> DrainPlan:
    """Pure: out of routing first, removed once drained (``running``: requests per replica)."""
    patches: list[PodPatch] = []
    keep: set[str] = set()
    retry: float | None = None
    events: list[PendingEvent] = []
    for index in removed_replicas(observed, replicas):
        rank0 = rank0_pod(observed.by_replica(observed.pods, index))
        step = drain_step(rank0, running=running.get(index), now=now)
        if step.mark and rank0 is not None:
            patches.append(mark_patch(rank0, now=now))
            message = f"replica {index}: out of routing; removed once its requests finish"
            events.append(PendingEvent(False, Reason.SCALING_DOWN, message))
        if not step.done:
            owned = observed.by_replica(observed.statefulsets + observed.services, index)
            keep.update(o["metadata"]["name"] for o in owned)
            retry = earliest(retry, step.retry_after)
    return DrainPlan(tuple(patches), frozenset(keep), retry, tuple(events))
