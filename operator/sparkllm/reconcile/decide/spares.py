"""Placement with spare groups and quarantine: which group each replica runs on this pass.

Why one step: where a replica goes depends on where it ran (its StatefulSets' group label,
else ``status.replicaStatuses[].nodeGroup``: the assignment outlives an operator restart),
on which groups are free (not another replica's, not another InferenceCluster's), on
which nodes failed (``failover.py``) and on which are quarantined (``quarantine.py``) —
and the failures seen here are what quarantine counts. The result feeds the replica loop
(``all_replicas.decide_replicas``): the moves, the quarantined nodes a replica must not run
on, the status parts and the Events. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from sparkllm.api import InferenceCluster
from sparkllm.api.quarantine import NodeFailures, QuarantinedNode
from sparkllm.api.rules import ApiModel
from sparkllm.keys import LABEL_NODE_GROUP, LABEL_REPLICA
from sparkllm.reconcile.decide.actions import JSON, PendingEvent
from sparkllm.reconcile.decide.failover import (
    GroupFault,
    fail_over,
    group_fault,
    vanished_fault,
)
from sparkllm.reconcile.decide.moves import Move
from sparkllm.reconcile.decide.quarantine import (
    Quarantine,
    carry,
    lift_request,
    record,
    settles_at,
)
from sparkllm.reconcile.decide.replicas import Observed, label
from sparkllm.render.placement import Assignment, NodeHolder, assign_groups, discover_groups

M = TypeVar("M", bound=ApiModel)


@dataclass(frozen=True)
class Placement:
    """Where each replica runs this pass, and what placement learned on the way."""

    assignment: Assignment
    problems: tuple[str, ...] = ()
    moves: Mapping[int, Move] = field(default_factory=dict)
    quarantine: Quarantine = field(default_factory=Quarantine)
    events: tuple[PendingEvent, ...] = ()
    lifted: bool = False  # the lift annotation was read: remove it
    retry_after: float | None = None  # when the next Ready quarantined node settles
    # status.quarantine and status.nodeFailures: None while never any; then a list, empty
    # once all are gone (a dropped field would not count as a change to write)
    quarantine_status: tuple[QuarantinedNode, ...] | None = None
    failures_status: tuple[NodeFailures, ...] | None = None


def _current(observed: Observed, previous: Mapping[str, Any]) -> dict[int, str]:
    """Replica -> group key: the live StatefulSets' label, else the status' nodeGroup."""
    current = {
        int(r["index"]): str(r["nodeGroup"])
        for r in previous.get("replicaStatuses") or []
        if r.get("nodeGroup")
    }
    current.update(
        {
            int(r): g
            for sts in observed.statefulsets
            if (r := label(sts, LABEL_REPLICA)) is not None
            and r.isdigit()
            and (g := label(sts, LABEL_NODE_GROUP)) is not None
        }
    )
    return current


def _down_before(previous: Mapping[str, Any]) -> frozenset[str]:
    """Nodes of replicas the last pass already reported down (a gone node counts once)."""
    return frozenset(
        str(n)
        for r in previous.get("replicaStatuses") or []
        if r.get("nodeDown")
        for n in r.get("nodes") or ()
    )


def _listed(model: type[M], items: list[JSON], written: bool) -> tuple[M, ...] | None:
    """A status list: absent while it never had an entry, empty once the last one left."""
    if not items and not written:
        return None
    return tuple(model.model_validate(item) for item in items)


def place(
    ic: InferenceCluster,
    observed: Observed,
    *,
    previous: Mapping[str, Any],
    annotations: Mapping[str, str] | None = None,
    holders: Sequence[NodeHolder] = (),
    now: datetime,
) -> Placement:
    """Replica -> node group: keep the groups replicas hold (skipping those another
    InferenceCluster holds), move a replica whose group failed to a free healthy spare,
    and count the failures toward quarantine."""
    policy = ic.spec.restart_policy.quarantine
    lift = lift_request(annotations)
    quarantine, events = carry(previous, policy=policy, nodes=observed.nodes, lift=lift, now=now)
    current = _current(observed, previous)
    discovery = discover_groups(ic.spec, list(observed.nodes.values()))
    groups = discovery.groups
    avoid = frozenset(g.key for g in groups if quarantine.nodes.intersection(g.nodes))
    assignment = assign_groups(
        replicas=ic.spec.replicas, groups=groups, current=current, holders=holders, avoid=avoid
    )
    faults: dict[int, GroupFault] = {}
    for index, group in assignment.replicas.items():
        fault = group_fault(group, observed, index, quarantined=quarantine.nodes, now=now)
        if fault is not None:
            faults[index] = fault
    old_nodes = {
        int(r["index"]): r.get("nodes") or () for r in previous.get("replicaStatuses") or []
    }
    keys = {g.key for g in groups}
    for index in assignment.unplaced:
        key = current.get(index)
        if key is not None and key not in keys:  # its labelled group fell apart
            faults[index] = vanished_fault(key, old_nodes.get(index, ()), observed)
    held = frozenset(g.key for g in groups if any(h.nodes.intersection(g.nodes) for h in holders))
    moved, moves = fail_over(
        assignment,
        groups=groups,
        faults=faults,
        current=current,
        old_nodes=old_nodes,
        nodes=observed.nodes,
        quarantined=quarantine.nodes,
        held=held,
    )
    failed = [f for fault in faults.values() for f in fault.failed]
    quarantine, new = record(
        quarantine, failed, policy=policy, seen_before=_down_before(previous), now=now
    )
    settle = settles_at(quarantine, observed.nodes, policy)
    listed, counted = quarantine.status(policy)
    return Placement(
        retry_after=None if settle is None else max(0.0, (settle - now).total_seconds()),
        quarantine_status=_listed(QuarantinedNode, listed, "quarantine" in previous),
        failures_status=_listed(NodeFailures, counted, "nodeFailures" in previous),
        assignment=moved,
        problems=discovery.problems,
        moves={m.index: m for m in moves},
        quarantine=quarantine,
        events=(*events, *new),
        lifted=lift is not None,
    )
