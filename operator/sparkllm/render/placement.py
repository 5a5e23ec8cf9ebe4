"""Which nodes run which replica: node facts, node groups, and replica assignment.

Pure: the Node objects are read by reconcile and handed in. Kubernetes cannot choose a
replica's nodes — which Sparks are cabled together is physical — so a replica's ranks
are pinned to the nodes of one group, in rank order. Groups are explicit in the spec or
discovered from node labels; assignment is sticky (a running replica keeps its group
even if a new group would sort first) and new replicas take the first free complete
group, so scaling never moves a running replica.

Nodes are shared by every InferenceCluster of the cluster, and a group's ports and GPUs
fit one replica: a group whose nodes another InferenceCluster holds (its
``status.replicaStatuses[].nodes``) is never given to a new replica, so the conflict is
reported (``NodeGroupInUse``, naming the holder) before anything is created rather than
as rank pods Pending forever. When two objects took the same group in the same instant
(each placed before the other's status said so), the younger one yields it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sparkllm.api import InferenceClusterSpec
from sparkllm.keys import NODE_RANK_LABEL


@dataclass(frozen=True)
class NodeFacts:
    """What the operator needs to know about one node."""

    name: str
    internal_ip: str | None
    ready: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    # When the Ready condition last flipped (the start of a NotReady spell, or of a Ready
    # one: a quarantine's settle time counts from it), and whether the kubelet stopped
    # posting at all (Ready=Unknown: the heartbeat is lost, as when a Spark wedges).
    ready_changed: datetime | None = None
    heartbeat_lost: bool = False


def _time(text: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    """Extract NodeFacts from a Node object (as returned by the API server)."""
    status = node.get("status") or {}
    addresses = status.get("addresses") or []
    internal = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), None)
    conditions = status.get("conditions") or []
    ready_condition: Mapping[str, Any] = next(
        (c for c in conditions if c.get("type") == "Ready"), {}
    )
    return NodeFacts(
        name=node["metadata"]["name"],
        internal_ip=internal,
        ready=ready_condition.get("status") == "True",
        labels=dict(node["metadata"].get("labels") or {}),
        unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
        ready_changed=_time(ready_condition.get("lastTransitionTime")),
        heartbeat_lost=ready_condition.get("status") == "Unknown",
    )


@dataclass(frozen=True)
class NodeGroup:
    """One replica's worth of nodes, in rank order. ``key`` names the group stably."""

    key: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class GroupDiscovery:
    """Complete groups, plus why any labelled group is unusable."""

    groups: tuple[NodeGroup, ...]
    problems: tuple[str, ...] = ()


def _rank_of(node: NodeFacts) -> int | str:
    """The node's rank from its label; a text naming the problem when it has none, or
    one that is no number (shown as such, never as a made-up rank)."""
    text = node.labels.get(NODE_RANK_LABEL)
    if text is None:
        return f"no {NODE_RANK_LABEL}"
    return int(text) if text.isdigit() else f"{NODE_RANK_LABEL} {text!r} (not a number)"


def _shown(item: tuple[int | str, list[str]]) -> tuple[bool, int, str]:
    """Ranks in order, then the problems."""
    rank = item[0]
    return (True, 0, rank) if isinstance(rank, str) else (False, rank, "")


def discover_groups(spec: InferenceClusterSpec, nodes: Sequence[NodeFacts]) -> GroupDiscovery:
    """The node groups a spec can use, in a stable order."""
    explicit = spec.placement.node_groups
    if explicit is not None:
        return GroupDiscovery(
            groups=tuple(
                NodeGroup(key=f"group-{i}", nodes=tuple(g)) for i, g in enumerate(explicit)
            )
        )
    label = spec.placement.node_group_label
    assert label is not None  # the API guarantees exactly one of the two
    size = spec.engine.nodes_per_replica  # node ranks 0..tp*pp-1
    by_group: dict[str, dict[int | str, list[str]]] = {}
    for node in nodes:
        group = node.labels.get(label)
        if group is None:
            continue
        by_group.setdefault(group, {}).setdefault(_rank_of(node), []).append(node.name)
    groups: list[NodeGroup] = []
    problems: list[str] = []
    for key in sorted(by_group):
        ranks = by_group[key]
        wanted: set[int | str] = set(range(size))
        if set(ranks) != wanted or any(len(names) != 1 for names in ranks.values()):
            have = ", ".join(f"{r}: {sorted(n)}" for r, n in sorted(ranks.items(), key=_shown))
            problems.append(
                f"node group {key!r} ({label}) needs exactly one node per "
                f"{NODE_RANK_LABEL} 0..{size - 1} (tensorParallel x pipelineParallel = {size} "
                f"nodes); has {{{have}}}"
            )
            continue
        groups.append(NodeGroup(key=key, nodes=tuple(ranks[r][0] for r in range(size))))
    return GroupDiscovery(groups=tuple(groups), problems=tuple(problems))


@dataclass(frozen=True)
class NodeHolder:
    """Another InferenceCluster and the nodes its placed replicas hold."""

    owner: str  # "namespace/name"
    nodes: frozenset[str]
    older: bool  # created before the object being placed (it wins a simultaneous claim)


def _created(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """Creation order: timestamp (RFC 3339 sorts as text), then namespace and name."""
    meta = obj.get("metadata") or {}
    stamp = str(meta.get("creationTimestamp") or "")
    return stamp, str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def node_holders(me: Mapping[str, Any], others: Sequence[Mapping[str, Any]]) -> list[NodeHolder]:
    """The nodes each other InferenceCluster holds, from its status (placed replicas).

    One being deleted holds nothing: its pods go with it, and a replica placed meanwhile
    waits only for its ports to free, not for the next pass."""
    holders = []
    for other in others:
        if (other.get("metadata") or {}).get("deletionTimestamp"):
            continue
        status = other.get("status") or {}
        nodes = frozenset(
            str(node)
            for entry in status.get("replicaStatuses") or []
            for node in entry.get("nodes") or []
        )
        if nodes:
            _, namespace, name = _created(other)
            holders.append(
                NodeHolder(
                    owner=f"{namespace}/{name}", nodes=nodes, older=_created(other) < _created(me)
                )
            )
    return holders


def describe_group(group: NodeGroup) -> str:
    return f"node group {group.key!r} ({', '.join(group.nodes)})"


@dataclass(frozen=True)
class Assignment:
    """Replica index -> its node group; replicas no group is free for, and why groups
    were not free (another InferenceCluster holds them)."""

    replicas: Mapping[int, NodeGroup]
    unplaced: tuple[int, ...]
    in_use: tuple[str, ...] = ()


def _holder_of(group: NodeGroup, holders: Sequence[NodeHolder], *, older_only: bool) -> str | None:
    for holder in holders:
        if holder.nodes.intersection(group.nodes) and (holder.older or not older_only):
            return holder.owner
    return None


def assign_groups(
    *,
    replicas: int,
    groups: Sequence[NodeGroup],
    current: Mapping[int, str],
    holders: Sequence[NodeHolder] = (),
    avoid: frozenset[str] = frozenset(),
) -> Assignment:
    """Give each replica 0..replicas-1 a group, keeping the groups replicas already hold.

    ``current`` maps replica index to the group key it runs on now (from the live
    StatefulSets). A replica whose group vanished is left unplaced rather than moved: its
    ranks' nodes are physical and a move would be a different replica. A group another
    InferenceCluster holds (``holders``) goes to no new replica; a replica keeps its
    group unless an older object holds it too (both placed it at the same time). A group
    in ``avoid`` (one of its nodes is quarantined) goes to no new replica either.
    """
    by_key = {g.key: g for g in groups}
    taken = {key for index, key in current.items() if index < replicas and key in by_key}
    users = {g.key: _holder_of(g, holders, older_only=False) for g in groups}
    in_use = {g.key: f"{describe_group(g)} is in use by InferenceCluster {users[g.key]}"
              for g in groups if users[g.key] is not None}  # fmt: skip
    assigned: dict[int, NodeGroup] = {}
    unplaced: list[int] = []
    free = [g for g in groups if g.key not in taken | avoid and g.key not in in_use]
    for index in range(replicas):
        key = current.get(index)
        if key is not None:
            if key in by_key and _holder_of(by_key[key], holders, older_only=True) is None:
                assigned[index] = by_key[key]
            else:
                unplaced.append(index)
            continue
        if free:
            assigned[index] = free.pop(0)
        else:
            unplaced.append(index)
    held = set(in_use).difference(g.key for g in assigned.values())
    reasons = tuple(in_use[key] for key in sorted(held)) if unplaced else ()
    return Assignment(replicas=assigned, unplaced=tuple(unplaced), in_use=reasons)
