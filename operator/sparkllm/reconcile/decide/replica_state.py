"""What a replica looks like right now, read from its pods and nodes: pure.

Reconcile lists the cluster's pods and the nodes once per pass and hands them here.
The result says, per rank, whether it runs, is ready, belongs to the replica's current
restart generation, and — if it dropped — why, in words an operator on call can act on
("rank 1 container exited (code 137, OOMKilled)"). Decisions (restart, degrade) are
made elsewhere from these facts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeVar

from sparkllm.keys import LABEL_GENERATION, LABEL_RANK, LABEL_REPLICA
from sparkllm.render.names import COMPONENT_ENGINE, LABEL_COMPONENT
from sparkllm.render.placement import NodeFacts

JSON = dict[str, Any]
PodT = TypeVar("PodT", bound=Mapping[str, Any])
# How long a rank pod may wait for the scheduler before status says it cannot be placed:
# longer than a scheduling retry after a node or port frees up, far shorter than "forever".
UNSCHEDULABLE_GRACE_SECONDS: Final = 60.0


@dataclass(frozen=True)
class RankState:
    """One rank's pod as observed."""

    rank: int
    node: str
    pod: str | None  # pod name, None when no pod exists
    uid: str | None
    generation: int | None  # restart generation on the pod, None if unlabelled/absent
    phase: str | None  # Pending | Running | Succeeded | Failed
    running: bool  # container running and not restarted
    ready: bool  # pod Ready condition
    terminating: bool
    failure: str | None  # why the rank dropped, None if it did not
    node_ip: str | None = None  # where the rank runs (status.hostIP)


@dataclass(frozen=True)
class ReplicaState:
    """All ranks of one replica plus the health of their nodes."""

    index: int
    ranks: tuple[RankState, ...]
    nodes_not_ready: tuple[str, ...]
    nodes_missing: tuple[str, ...]
    nodes_quarantined: tuple[str, ...] = ()  # Ready, but kept from replicas (quarantine.py)

    @property
    def pods_present(self) -> int:
        return sum(1 for r in self.ranks if r.pod is not None)

    def ready_ranks(self, generation: int) -> int:
        """Ranks of ``generation`` that run (rank 0 must also pass /health to count)."""
        return sum(
            1
            for r in self.ranks
            if r.generation == generation and r.running and (r.rank != 0 or r.ready)
        )

    def serving(self, generation: int) -> bool:
        return self.ready_ranks(generation) == len(self.ranks)

    def failures(self) -> tuple[str, ...]:
        return tuple(r.failure for r in self.ranks if r.failure is not None)


def _terminated_reason(term: Mapping[str, Any]) -> str:
    code = term.get("exitCode")
    reason = term.get("reason") or "Error"
    return f"code {code}, {reason}"


def describe_pod_failure(pod: Mapping[str, Any], rank: int) -> str | None:
    """Why this rank's pod no longer runs its engine; None when it runs (or starts)."""
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "terminated" in state:
            return f"rank {rank} container exited ({_terminated_reason(state['terminated'])})"
        if (cs.get("restartCount") or 0) > 0:
            last = (cs.get("lastState") or {}).get("terminated") or {}
            detail = _terminated_reason(last) if last else "restarted"
            return f"rank {rank} container exited ({detail})"
    for cs in status.get("initContainerStatuses") or []:
        # A failed init container shows terminated, or (restartPolicy Always) waiting in
        # Init:CrashLoopBackOff with the failure in lastState: both are failures.
        term = (cs.get("state") or {}).get("terminated") or {}
        if not term or term.get("exitCode", 0) == 0:
            term = (cs.get("lastState") or {}).get("terminated") or {}
        if term and term.get("exitCode", 0) != 0:
            return (
                f"rank {rank} init container {cs.get('name')} failed ({_terminated_reason(term)})"
            )
    if status.get("phase") in {"Failed", "Succeeded"}:
        reason = status.get("reason") or status.get("phase")
        return f"rank {rank} pod {status.get('phase', '').lower()} ({reason})"
    return None


def pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _container_running(pod: Mapping[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all(
        "running" in (cs.get("state") or {}) and (cs.get("restartCount") or 0) == 0
        for cs in statuses
    )


def _generation(pod: Mapping[str, Any]) -> int | None:
    value = (pod["metadata"].get("labels") or {}).get(LABEL_GENERATION, "")
    return int(value) if value.isdigit() else None


def rank_state(*, rank: int, node: str, pod: Mapping[str, Any] | None) -> RankState:
    if pod is None:
        return RankState(
            rank=rank, node=node, pod=None, uid=None, generation=None, phase=None,
            running=False, ready=False, terminating=False, failure=None,
        )  # fmt: skip
    meta = pod["metadata"]
    status = pod.get("status") or {}
    return RankState(
        rank=rank,
        node=node,
        pod=meta["name"],
        uid=meta.get("uid"),
        generation=_generation(pod),
        phase=status.get("phase"),
        running=status.get("phase") == "Running" and _container_running(pod),
        ready=pod_ready(pod),
        terminating=meta.get("deletionTimestamp") is not None,
        failure=describe_pod_failure(pod, rank),
        node_ip=status.get("hostIP"),
    )


def pods_by_rank(pods: Sequence[PodT]) -> dict[int, PodT]:
    """Each rank's pod among one replica's pods; a live pod before one being deleted."""
    by_rank: dict[int, PodT] = {}
    for pod in pods:
        rank_text = (pod["metadata"].get("labels") or {}).get(LABEL_RANK, "")
        if rank_text.isdigit():
            current = by_rank.get(int(rank_text))
            if current is None or current["metadata"].get("deletionTimestamp"):
                by_rank[int(rank_text)] = pod
    return by_rank


def observe_replica(
    *,
    index: int,
    nodes: Sequence[str],
    pods: Sequence[Mapping[str, Any]],
    node_facts: Mapping[str, NodeFacts],
) -> ReplicaState:
    """The replica's state from ITS pods (already filtered by replica label)."""
    by_rank = pods_by_rank(pods)
    ranks = tuple(rank_state(rank=k, node=node, pod=by_rank.get(k)) for k, node in enumerate(nodes))
    missing = tuple(n for n in nodes if n not in node_facts)
    not_ready = tuple(n for n in nodes if n in node_facts and not node_facts[n].ready)
    return ReplicaState(index=index, ranks=ranks, nodes_not_ready=not_ready, nodes_missing=missing)


def _unscheduled(pod: Mapping[str, Any]) -> tuple[datetime, str] | None:
    """Since when, and why, the scheduler could not place ``pod``; None if it could."""
    if pod["metadata"].get("deletionTimestamp") or (pod.get("spec") or {}).get("nodeName"):
        return None
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            if cond.get("reason") != "Unschedulable" or not cond.get("lastTransitionTime"):
                return None
            since = datetime.fromisoformat(str(cond["lastTransitionTime"]))
            return since, str(cond.get("message") or "no message from the scheduler")
    return None


def _is_rank(pod: Mapping[str, Any]) -> bool:
    return (pod["metadata"].get("labels") or {}).get(LABEL_COMPONENT) == COMPONENT_ENGINE


def _follows_ranks(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's placement requires a rank pod on its node (pod affinity)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("podAffinity") or {}
    return bool(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))


@dataclass(frozen=True)
class Unschedulable:
    """Rank pods the scheduler could not place for longer than the grace, and when the
    next one's grace ends (the pass to look again then)."""

    messages: tuple[str, ...] = ()
    retry_after: float | None = None


def unschedulable(
    pods: Sequence[Mapping[str, Any]],
    *,
    now: datetime,
    grace: float = UNSCHEDULABLE_GRACE_SECONDS,
) -> Unschedulable:
    """The scheduler's word on each pod Pending past ``grace``, in pod-name order.

    A pod that follows the rank pods (the gateway's or a Job's required pod affinity to
    them, render/model_access.py) is not stuck while no rank pod is placed: it waits for
    the ranks (held while the model stages, say), which say themselves why they wait."""
    messages: list[str] = []
    waits: list[float] = []
    ranks_placed = any(_is_rank(p) and (p.get("spec") or {}).get("nodeName") for p in pods)
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        seen = _unscheduled(pod)
        if seen is None or (_follows_ranks(pod) and not ranks_placed):
            continue
        since, why = seen
        waited = (now - since).total_seconds()
        if waited < grace:
            waits.append(grace - waited)
            continue
        labels = pod["metadata"].get("labels") or {}
        where = (
            f"replica {labels.get(LABEL_REPLICA, '?')}, rank {labels.get(LABEL_RANK, '?')}"
            if LABEL_RANK in labels
            else str(labels.get(LABEL_COMPONENT, "not a rank"))
        )
        messages.append(f"pod {pod['metadata']['name']} ({where}) cannot be scheduled: {why}")
    return Unschedulable(messages=tuple(messages), retry_after=min(waits) if waits else None)
