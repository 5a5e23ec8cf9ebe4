"""Spare groups: a replica whose node failed moves to a free, complete, healthy group. Pure.

Why: a replica's ranks are pinned to one node group by cable, so today a failed node holds
its replica until the node is back — and a wedged DGX Spark (unified memory exhausted, no
OOM kill, the kubelet silent) is back only after a power cycle. Groups no replica uses are
spares; when one is complete, every node Ready and schedulable, none quarantined, and no
other InferenceCluster holds it, the failed replica is given that group at once. The move
is an ordinary gang restart onto other nodes: a new generation whose StatefulSets carry
the new group's label (so the assignment survives an operator restart: ``place`` reads it
back from them, and from ``status.replicaStatuses[].nodeGroup`` when they are gone); the
old generation's pods go first, and the router and InferencePool follow the pods by label.
With no spare, nothing moves: the replica is stopped and waits for its node as before.

A group fails its replica when a node is NotReady or gone, when a rank pod cannot run on
its node (Unschedulable past the grace, or rejected by the kubelet), or when a node is
quarantined (``quarantine.py``). Only the first three count against a node; ``NodeFault``
carries, per failed node, when that failure began (a NotReady spell counts once however
many passes see it), and whether it looks like a wedge (heartbeat lost while the rank pod
on it never reported an exit).
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sparkllm.keys import LABEL_REPLICA
from sparkllm.reconcile.decide.actions import Removal
from sparkllm.reconcile.decide.moves import Move
from sparkllm.reconcile.decide.replica_state import UNSCHEDULABLE_GRACE_SECONDS, pods_by_rank
from sparkllm.reconcile.decide.replicas import Observed, label
from sparkllm.render.placement import Assignment, NodeFacts, NodeGroup

# Pod status reasons a kubelet gives when it refuses to run a pod at all (admission):
# the pod cannot run on that node, whatever the engine does.
REJECTED_REASONS = frozenset(
    {"NodeAffinity", "NodeName", "NodePorts", "UnexpectedAdmissionError", "Evicted"}
)


@dataclass(frozen=True)
class NodeFault:
    """One failed node of a replica's group: why, since when, and whether it wedged."""

    node: str
    why: str
    since: datetime | None  # when the failure began (None: not known, e.g. node gone)
    wedged: bool = False


@dataclass(frozen=True)
class GroupFault:
    """Why a group cannot run its replica now."""

    reason: str
    failed: tuple[NodeFault, ...] = ()  # counted against the nodes (quarantine)


def _exited(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's container ever reported an exit (a terminated state)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if "terminated" in (cs.get("state") or {}) or (cs.get("lastState") or {}).get("terminated"):
            return True
    return (pod.get("status") or {}).get("phase") in {"Failed", "Succeeded"}


def _cannot_run(pod: Mapping[str, Any], now: datetime) -> tuple[str, datetime | None] | None:
    """Why the rank pod cannot run on its node (and since when), or None."""
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp"):
        return None
    if status.get("phase") == "Failed" and status.get("reason") in REJECTED_REASONS:
        created = pod["metadata"].get("creationTimestamp")  # one failure per pod
        since = datetime.fromisoformat(str(created)) if created else None
        return f"rejected by the kubelet ({status['reason']})", since
    for cond in status.get("conditions") or []:
        if (cond.get("type"), cond.get("status"), cond.get("reason")) != (
            "PodScheduled",
            "False",
            "Unschedulable",
        ) or not cond.get("lastTransitionTime"):
            continue
        since = datetime.fromisoformat(str(cond["lastTransitionTime"]))
        if now - since >= timedelta(seconds=UNSCHEDULABLE_GRACE_SECONDS):
            return f"cannot be scheduled ({cond.get('message') or 'no message'})", since
    return None


def _node_fault(
    node: str, facts: NodeFacts | None, pod: Mapping[str, Any] | None, rank: int, now: datetime
) -> NodeFault | None:
    if facts is None:
        return NodeFault(node=node, why=f"node {node} missing", since=None)
    if not facts.ready:
        # A wedge: the kubelet stopped posting while the engine on it never exited.
        wedged = facts.heartbeat_lost and pod is not None and not _exited(pod)
        why = f"node {node} NotReady" + (
            " (heartbeat lost, its rank pod never exited)" if wedged else ""
        )
        return NodeFault(node=node, why=why, since=facts.ready_changed, wedged=wedged)
    if pod is not None and (stuck := _cannot_run(pod, now)) is not None:
        why, since = stuck
        return NodeFault(node=node, why=f"rank {rank} pod on {node} {why}", since=since)
    return None


def group_fault(
    group: NodeGroup,
    observed: Observed,
    index: int,
    *,
    quarantined: Container[str],
    now: datetime,
) -> GroupFault | None:
    """Why ``group`` cannot run replica ``index`` now, or None when it can."""
    pods = pods_by_rank(observed.by_replica(observed.pods, index))
    failed = [
        fault
        for rank, node in enumerate(group.nodes)
        if (fault := _node_fault(node, observed.nodes.get(node), pods.get(rank), rank, now))
    ]
    held = [n for n in group.nodes if n in quarantined and n not in {f.node for f in failed}]
    reasons = [f.why for f in failed] + [f"node {n} quarantined" for n in held]
    if not reasons:
        return None
    return GroupFault(reason="; ".join(reasons), failed=tuple(failed))


def vanished_fault(key: str, old_nodes: Sequence[str], observed: Observed) -> GroupFault:
    """A label-discovered group that is no longer complete (a node gone or relabelled)."""
    gone = [n for n in old_nodes if n not in observed.nodes]
    failed = tuple(NodeFault(node=n, why=f"node {n} missing", since=None) for n in gone)
    why = "; ".join(f.why for f in failed) or "a node left the group"
    return GroupFault(reason=f"node group {key!r} is no longer complete: {why}", failed=failed)


def healthy(group: NodeGroup, nodes: Mapping[str, NodeFacts], quarantined: Container[str]) -> bool:
    """Every node present, Ready, schedulable and not quarantined."""
    return all(
        (f := nodes.get(n)) is not None and f.ready and not f.unschedulable and n not in quarantined
        for n in group.nodes
    )


def fail_over(
    assignment: Assignment,
    *,
    groups: Sequence[NodeGroup],
    faults: Mapping[int, GroupFault],
    current: Mapping[int, str],
    old_nodes: Mapping[int, Sequence[str]],
    nodes: Mapping[str, NodeFacts],
    quarantined: Container[str],
    held: frozenset[str] = frozenset(),
) -> tuple[Assignment, tuple[Move, ...]]:
    """Give each faulted replica the first free healthy spare group, in index order.

    ``faults`` holds the replicas whose group failed (placed ones) or vanished (unplaced
    ones with a ``current`` key); a group is free when no replica has it and no other
    object holds a node of it (``held``: their keys)."""
    used = {g.key for g in assignment.replicas.values()}
    spares = [g for g in groups if g.key not in used | held and healthy(g, nodes, quarantined)]
    replicas = dict(assignment.replicas)
    unplaced = list(assignment.unplaced)
    moves: list[Move] = []
    for index in sorted(faults):
        if not spares:
            break
        spare = spares.pop(0)
        old = replicas.get(index)
        from_key = old.key if old is not None else current.get(index, "")
        from_nodes = old.nodes if old is not None else tuple(old_nodes.get(index, ()))
        replicas[index] = spare
        if index in unplaced:
            unplaced.remove(index)
        reason = faults[index].reason
        moves.append(Move(index, from_key=from_key, from_nodes=from_nodes, to=spare, reason=reason))
    moved = Assignment(replicas=replicas, unplaced=tuple(unplaced), in_use=assignment.in_use)
    return moved, tuple(moves)


def lost_pods(observed: Observed, namespace: str) -> tuple[Removal, ...]:
    """Rank pods being deleted on a node that is NotReady or gone: no kubelet will confirm
    their end, and their StatefulSet cannot make the new generation's pod (same name) until
    they are gone, so they are deleted at once (what the out-of-service taint does)."""
    removals = []
    for pod in observed.pods:
        meta = pod["metadata"]
        node = (pod.get("spec") or {}).get("nodeName")
        facts = observed.nodes.get(node or "")
        if not meta.get("deletionTimestamp") or not node or (facts is not None and facts.ready):
            continue
        if label(pod, LABEL_REPLICA) is None:
            continue
        removals.append(Removal("v1", "Pod", meta["name"], namespace, meta.get("uid")))
    return tuple(removals)
